"""Errors a command reports as one ``error:`` line (no traceback), kept free of heavy imports.

The command-line entry (``timestep_lab.cli``) catches these around every command; importing them
from the modules that raise them would load torch for every command, ``--help`` included. Only
stdlib here. (``ConfigError`` lives with the config schema, ``ArtifactError`` with the file
helpers in ``timestep_lab.artifacts.io``; both are torch-free too.)
"""

from __future__ import annotations

__all__ = ["EXIT_RESUMABLE", "NonFiniteLossError", "InputError"]

#: exit status of a ``train`` that a signal (SIGTERM: a time limit, a cancellation) stopped after
#: it saved its state: rerun it to continue (``EX_TEMPFAIL`` of sysexits.h, "try again later").
#: Snakemake counts it as a failed job and resubmits it (the cluster profile's ``retries``).
EXIT_RESUMABLE = 75


class InputError(ValueError):
    """What a function was given cannot be used: an empty image set, a slot number out of range,
    a profile that is not finite (the message says which value). Raised by library code for
    inputs a user chose; the command line reports it as one ``error:`` line, exit status 2.
    (A ``ValueError`` that is not an ``InputError`` is a bug and keeps its traceback.)"""


class NonFiniteLossError(RuntimeError):
    """The loss became NaN or infinite; the message names the step and the timesteps (exit status 3)."""
