"""Small helpers the Snakefile's rules call: the training launcher, optional shell flags, and a
one-line summary of a schema-validation error; and the local profile's ``cores``.

Command-line pieces are lists of arguments, never pre-joined strings: a rule pastes them with
``{params.x:q}``, which quotes every element, so no config value is ever read by the shell as
code and a path with a space stays one argument.

No Snakemake import, no torch, no files.
"""

from __future__ import annotations

import re
from typing import Any, Mapping, Sequence

__all__ = ["launcher", "opt", "schema_error_summary", "local_cores"]

LOCAL_EXECUTORS = ("local", "dryrun", "touch")  # Snakemake's executors that run jobs on this host


def launcher(gpus: int) -> list[str]:
    """The command prefix of a training job (argv): one process, or torchrun with one process per GPU."""
    if gpus > 1:
        return ["torchrun", "--standalone", "--nproc_per_node", str(int(gpus)), "-m", "timestep_lab"]
    return ["python", "-m", "timestep_lab"]


def opt(flag: str, value: Any) -> list[str]:
    """``["--flag", "value"]``, or no arguments when ``value`` is None or empty."""
    return [] if value is None or value == "" else [flag, str(value)]


def schema_error_summary(message: str) -> str:
    """One line from Snakemake's schema-validation error: the offending key as a dotted path and
    jsonschema's reason, e.g. ``evaluation.num_samples: 'x' is not of type 'integer'``."""
    reason = next((ln.split("ValidationError:", 1)[1].strip() for ln in message.splitlines()
                   if "ValidationError:" in ln), message.strip().splitlines()[-1] if message.strip() else "invalid")
    where = next((ln for ln in message.splitlines() if ln.startswith("On instance")), "")
    keys = re.findall(r"\[(?:'([^']*)'|(\d+))\]", where)
    path = ".".join(k or i for k, i in keys)
    return f"{path}: {reason}" if path else f"{reason} (workflow/schemas/config.schema.yaml)"


def local_cores(argv: Sequence[str], environ: Mapping[str, str]) -> str | None:
    """``cores`` of the local profile (``profiles/default``, which Snakemake layers over any
    ``--profile``): ``"all"`` for a run on this host; None (the key left out) when the command
    line names a global profile (``--profile``, or ``SNAKEMAKE_PROFILE``) or an executor that
    submits jobs elsewhere. Snakemake caps every job's threads at ``--cores``, cluster jobs
    too, and the workflow profile wins over ``--profile``: a submitting host's 2 cores would
    cut a cluster job's 8 threads to 2. The global profile sets its own (the cluster profile's
    is high); a local run under another global profile gives ``--cores`` itself.

    ``argv``: snakemake's arguments (``sys.argv[1:]``), ``environ``: its environment."""
    args = list(argv)
    for i, arg in enumerate(args):
        flag, eq, value = arg.partition("=")
        if flag not in ("--profile", "--executor", "-e"):
            continue
        if not eq:
            value = args[i + 1] if i + 1 < len(args) else ""
        if flag == "--profile" and value not in ("", "none"):
            return None
        if flag != "--profile" and value not in ("",) + LOCAL_EXECUTORS:
            return None
    if environ.get("SNAKEMAKE_PROFILE", "none") not in ("", "none"):
        return None
    return "all"
