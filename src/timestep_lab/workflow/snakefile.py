"""Small helpers the Snakefile's rules call: the training launcher, optional shell flags, a
one-line summary of a schema-validation error, the check of the config file's own name, and
the local profile's ``cores``.

Command-line pieces are lists of arguments, never pre-joined strings: a rule pastes them with
``{params.x:q}``, which quotes every element, so no config value is ever read by the shell as
code and a path with a space stays one argument. An option that carries a value is one word,
``--flag=value``: a value that starts with '-' (a path named ``--help``) stays the option's value
instead of becoming an option of its own (tests/test_injection.py renders every rule).

No Snakemake import, no torch, no files (paths are compared as strings).
"""

from __future__ import annotations

import os
import re
from typing import Any, Mapping, Sequence

__all__ = ["launcher", "opt", "schema_error_summary", "NAME_PATTERN", "PATH_PATTERN", "config_source_error",
           "config_in_outputs", "local_cores"]

#: the schema's pattern of a name (workflow/schemas/config.schema.yaml, ``identifier``): matched
#: whole, ``$(?!\n)``, since jsonschema's ``$`` also matches before a final newline
NAME_PATTERN = r"^[A-Za-z0-9_][A-Za-z0-9_.-]*$(?!\n)"
#: the schema's pattern of a path (``path``): no control character, no bidirectional-text control
#: (a right-to-left override shows a path other than the one used), no brace
PATH_PATTERN = r"^[^\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069{}]*$(?!\n)"
_RULES = {NAME_PATTERN: "a name holds only letters, digits, '_', '.' and '-', and starts with neither '.' nor '-'",
          PATH_PATTERN: "a path may hold neither a control character (NUL, newline, tab, ...), a "
                        "bidirectional-text control (a right-to-left override, ...: the path shown is not the "
                        "one used) nor a brace (Snakemake reads '{...}' as a wildcard)"}


LOCAL_EXECUTORS = ("local", "dryrun", "touch")  # Snakemake's executors that run jobs on this host


def launcher(gpus: int) -> list[str]:
    """The command prefix of a training job (argv): one process, or torchrun with one process per GPU."""
    if gpus > 1:
        return ["torchrun", "--standalone", f"--nproc_per_node={int(gpus)}", "-m", "timestep_lab"]
    return ["python", "-m", "timestep_lab"]


def opt(flag: str, value: Any) -> list[str]:
    """``["--flag=value"]`` (one word: module docstring), or no arguments when ``value`` is None or empty."""
    return [] if value is None or value == "" else [f"{flag}={value}"]


def schema_error_summary(message: str) -> str:
    """One line from Snakemake's schema-validation error: the offending key as a dotted path and
    jsonschema's reason, e.g. ``evaluation.num_samples: 'x' is not of type 'integer'``."""
    reason = next((ln.split("ValidationError:", 1)[1].strip() for ln in message.splitlines()
                   if "ValidationError:" in ln), message.strip().splitlines()[-1] if message.strip() else "invalid")
    where = next((ln for ln in message.splitlines() if ln.startswith("On instance")), "")
    keys = re.findall(r"\[(?:'([^']*)'|(\d+))\]", where)
    path = ".".join(k or i for k, i in keys)
    for pattern, rule in _RULES.items():  # say what the pattern means instead of quoting it
        reason = reason.replace(f"does not match {pattern!r}", f"is refused: {rule}")
    return f"{path}: {reason}" if path else f"{reason} (workflow/schemas/config.schema.yaml)"


def config_source_error(name: str) -> str | None:
    """Why the config file ``name`` (``--configfile``) cannot be a rule's input, or None: a
    control character, or a brace that Snakemake would read as a wildcard."""
    if re.search(PATH_PATTERN, name) is None:
        return f"{name!r}: cannot be used as the study config's file name: {_RULES[PATH_PATTERN]}; rename the file"
    return None


def config_in_outputs(name: str, outputs: Sequence[str]) -> str | None:
    """Why the study config ``name`` may not be used where it lies, or None: inside one of the
    study's ``outputs`` folders (results/<study>, reports/<study>, logs/<study>, dvc/<study>, the
    prepared data), where a job would overwrite or delete it (``collect`` writes summary.json)."""
    path = os.path.abspath(name)
    for folder in outputs:
        top = os.path.abspath(folder)
        if os.path.commonpath([path, top]) == top:
            return (f"{name}: the study config lies in {folder}/, which the study writes (a job would overwrite or "
                    f"delete it); keep it elsewhere, e.g. under config/")
    return None


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
