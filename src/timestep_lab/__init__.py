"""timestep-lab: how diffusion models are trained across timesteps, reproducibly.

The library is one module per concern (see the README and ``docs/design.md``); the CLI is
``python -m timestep_lab`` (``timestep_lab.cli``).
"""

__version__ = "0.1.0"
