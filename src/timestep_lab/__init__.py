"""timestep-lab: how diffusion models are trained across timesteps, reproducibly.

The library is one module per concern (see the README and ``shared/DESIGN.md``); the CLI is
``python -m timestep_lab``.
"""

__version__ = "0.1.0"
