"""Errors a command reports as one ``error:`` line (no traceback), kept free of heavy imports.

The command-line entry (``timestep_lab.cli``) catches these around every command; importing them
from the modules that raise them would load torch for every command, ``--help`` included. Only
stdlib here. (``ConfigError`` lives with the config schema, ``ArtifactError`` with the file
helpers in ``timestep_lab.io``; both are torch-free too.)
"""

from __future__ import annotations

__all__ = ["EXIT_RESUMABLE", "NonFiniteLossError"]

#: exit status of a ``train`` that a signal (SIGTERM: a time limit, a cancellation) stopped after
#: it saved its state: rerun it to continue (``EX_TEMPFAIL`` of sysexits.h, "try again later").
#: Snakemake counts it as a failed job and resubmits it (the cluster profile's ``retries``).
EXIT_RESUMABLE = 75


class NonFiniteLossError(RuntimeError):
    """The loss became NaN or infinite; the message names the step and the timesteps (exit status 3)."""
