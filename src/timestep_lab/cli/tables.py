"""The study's tables: ``verdicts`` judges every claim on the collected metrics and the analyses.

The work is :mod:`timestep_lab.workflow.collect` (pandas, imported when the command runs). Must not
know the entry (``timestep_lab.cli``) or other commands.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from timestep_lab.artifacts.io import ArtifactError
from timestep_lab.cli.common import command, log

#: the metrics.csv columns the verdicts read (collect writes them)
METRICS_COLUMNS = ("run", "stage", "metric", "value")


def _verdicts_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--metrics-csv", type=Path, required=True, help="the study's metrics.csv (the collect job's)")
    p.add_argument("--runs", type=Path, default=None, help="the study's runs.csv")
    p.add_argument("--interference", type=Path, default=None, help="analyses/interference_control.json, when run")
    p.add_argument("--consistency", type=Path, default=None, help="analyses/consistency.json, when run")
    p.add_argument("--floor", type=Path, default=None, help="eval/floor.json, when the study has a held-out split")
    p.add_argument("--base", type=_base_values, default=None,
                   help="the study's own column values as a JSON object (what a baseline's \"{base}\" stands for: "
                        "batch_size, channels, total_kimg, ...; timestep_lab.workflow.base_columns)")
    p.add_argument("--study", default="", help="the study's name")
    p.add_argument("--out", type=Path, required=True, help="verdicts.json to write")


def _base_values(text: str) -> dict:
    """An argparse ``type``: a JSON object of column values (else argparse's one-line usage error)."""
    import json

    try:
        value = json.loads(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a JSON object: {text[:80]!r}") from None
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError(f"not a JSON object: {text[:80]!r}")
    return value


def _check_metrics(path: Path) -> None:
    """A metrics.csv the verdicts can read: text CSV with :data:`METRICS_COLUMNS` (one byte or
    none: collect's table of a study without metrics)."""
    if path.stat().st_size <= 1:
        return
    import pandas as pd

    try:
        columns = set(pd.read_csv(path, nrows=0).columns)
    except (UnicodeDecodeError, ValueError) as exc:  # pandas' ParserError and EmptyDataError are ValueErrors
        raise ArtifactError(f"{path}: not a metrics table ({type(exc).__name__}: {str(exc).splitlines()[0]})") from None
    missing = [c for c in METRICS_COLUMNS if c not in columns]
    if missing:
        raise ArtifactError(f"{path}: not a metrics table (no column {', '.join(missing)}; collect writes it)")


@command("verdicts", "direction and size verdicts per claim -> verdicts.json", _verdicts_args)
def cmd_verdicts(args: argparse.Namespace) -> int:
    """Both verdicts per claim (docs/methods.md §9.3), Holm across the scorecard, -> verdicts.json."""
    from timestep_lab.workflow.collect import write_verdicts  # pandas: only when the command runs

    for opt in ("metrics_csv", "runs", "interference", "consistency", "floor"):
        path = getattr(args, opt)
        if path is not None and not path.is_file():
            raise ArtifactError(f"{path}: --{opt.replace('_', '-')} file not found")
    _check_metrics(args.metrics_csv)
    optional = {k: str(getattr(args, k)) if getattr(args, k) is not None else None
                for k in ("interference", "consistency", "floor")}
    write_verdicts(str(args.metrics_csv), str(args.out), runs_csv=str(args.runs) if args.runs else None,
                   base=args.base, study=args.study, **optional)
    log.info("verdicts -> %s", args.out)
    return 0
