"""The registry of timestep samplers (one module per sampler registers itself here)."""

from timestep_lab.registry import Registry
from timestep_lab.timesteps.base import TimestepSampler

SAMPLERS: Registry[TimestepSampler] = Registry("timestep sampler")
