"""The study's tables: ``collect`` gathers every run's records into metrics.csv, runs.csv and
summary.json; ``verdicts`` judges every claim on them and the analyses; ``dvc-export`` flattens
them for ``dvc metrics`` / ``dvc plots``.

The work is :mod:`timestep_lab.workflow.collect` and :mod:`timestep_lab.workflow.dvc_export`
(pandas, imported when the command runs). Must not know the entry (``timestep_lab.cli``) or other
commands.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from timestep_lab.artifacts.io import ArtifactError, read_json
from timestep_lab.cli.common import command, json_object, log
from timestep_lab.config import ConfigError

#: the metrics.csv columns the verdicts read (collect writes them)
METRICS_COLUMNS = ("run", "stage", "metric", "value")
#: and those dvc-export reads (the progress curves per sampler and weighting)
EXPORT_COLUMNS = (*METRICS_COLUMNS, "tool", "sampler", "weighting", "kimg")


def _collect_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--study", type=json_object, required=True,
                   help="the study config as the workflow validated it (schema defaults filled in), a JSON object: "
                        "its run table says which runs to gather (timestep_lab.workflow.study_runs)")
    p.add_argument("--results", type=Path, required=True, help="the study's results folder (results/<study>)")
    p.add_argument("--floor", type=Path, default=None, help="eval/floor.json, when the study has a held-out split")
    p.add_argument("--metrics", type=Path, required=True, help="metrics.csv to write")
    p.add_argument("--runs", type=Path, required=True, help="runs.csv to write")
    p.add_argument("--summary", type=Path, required=True, help="summary.json to write")
    p.add_argument("--comparisons", type=Path, default=None,
                   help="comparisons.json to write: every paired comparison the claims read, which the verdicts "
                        "command then reads instead of computing (timestep_lab.evidence.comparisons)")
    p.add_argument("--only", default=None,
                   help="gather only these runs, comma-separated ids of the --study's run table (a budgeted "
                        "study's stage: its runs so far, docs/methods.md §14.5)")


@command("collect", "every run's metrics, progress and training log -> metrics.csv, runs.csv, summary.json",
         _collect_args)
def cmd_collect(args: argparse.Namespace) -> int:
    """One tidy table of every metric of the study (read it with pandas), the run table and a small
    summary (DVC metrics; ``floor``: the study's eval/floor.json as it is)."""
    from timestep_lab.workflow import base_columns, run_table, study_runs
    from timestep_lab.workflow.collect import collect  # pandas: only when the command runs

    if not args.results.is_dir():
        raise ArtifactError(f"{args.results}: --results folder not found")
    if args.floor is not None and not args.floor.is_file():
        raise ArtifactError(f"{args.floor}: --floor file not found")
    if not isinstance(args.study.get("study"), str):
        raise ConfigError("--study: not a study config (no 'study' name)")
    try:
        runs = study_runs(args.study, source=f"--study ({args.study['study']})")
        base = base_columns(args.study)
    except (KeyError, TypeError, AttributeError, ValueError) as exc:  # a hand-made one the schema never saw
        raise ConfigError(f"--study: not a study config as the workflow validates it ({type(exc).__name__}: "
                          f"{str(exc)[:120]})") from None
    if args.only is not None:
        only = [r for r in args.only.split(",") if r]
        unknown = [r for r in only if r not in runs]
        if unknown:
            raise ConfigError(f"--only: {', '.join(unknown[:3])} not in the --study's run table")
        runs = {r: run for r, run in runs.items() if r in set(only)}  # the run table's order
    collect(run_table(runs), str(args.results), str(args.metrics), str(args.runs), str(args.summary),
            floor_json=str(args.floor) if args.floor else None, base=base,
            comparisons_json=str(args.comparisons) if args.comparisons else None, study=args.study["study"])
    log.info("collect: %d runs -> %s", len(runs), args.metrics)
    return 0


def _verdicts_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--metrics-csv", type=Path, required=True, help="the study's metrics.csv (the collect job's)")
    p.add_argument("--runs", type=Path, default=None, help="the study's runs.csv")
    p.add_argument("--interference", type=Path, default=None, help="analyses/interference_control.json, when run")
    p.add_argument("--consistency", type=Path, default=None, help="analyses/consistency.json, when run")
    p.add_argument("--floor", type=Path, default=None, help="eval/floor.json, when the study has a held-out split")
    p.add_argument("--comparisons", type=Path, default=None,
                   help="the collect job's comparisons.json: the claims read their comparisons from it (without it "
                        "they are computed from --metrics-csv, to the same numbers)")
    p.add_argument("--base", type=json_object, default=None,
                   help="the study's own column values as a JSON object (what a baseline's \"{base}\" stands for: "
                        "batch_size, channels, total_kimg, ...; timestep_lab.workflow.base_columns)")
    p.add_argument("--study", default="", help="the study's name")
    p.add_argument("--sequential", type=json_object, default=None,
                   help="a budgeted study's test, a JSON object {\"prior_sd\": g, \"horizon\": max_seeds or null}: "
                        "claims on final FID judged by the anytime-valid safe t-test (docs/methods.md §14.1)")
    p.add_argument("--out", type=Path, required=True, help="verdicts.json to write")


def _check_metrics(path: Path, needed: tuple[str, ...] = METRICS_COLUMNS) -> None:
    """A metrics.csv the command can read: text CSV with the ``needed`` columns (one byte or
    none: collect's table of a study without metrics)."""
    if path.stat().st_size <= 1:
        return
    import pandas as pd

    try:
        columns = set(pd.read_csv(path, nrows=0).columns)
    except (UnicodeDecodeError, ValueError) as exc:  # pandas' ParserError and EmptyDataError are ValueErrors
        raise ArtifactError(f"{path}: not a metrics table ({type(exc).__name__}: {str(exc).splitlines()[0]})") from None
    missing = [c for c in needed if c not in columns]
    if missing:
        raise ArtifactError(f"{path}: not a metrics table (no column {', '.join(missing)}; collect writes it)")


def _sequential(spec: dict | None) -> dict | None:
    """``--sequential`` checked: a positive ``prior_sd`` and a ``horizon`` of at least 2 seeds or null."""
    if spec is None:
        return None
    g, h = spec.get("prior_sd"), spec.get("horizon")
    if not isinstance(g, (int, float)) or isinstance(g, bool) or not g > 0:
        raise ConfigError(f"--sequential: prior_sd must be a number > 0, got {g!r}")
    if h is not None and (not isinstance(h, int) or isinstance(h, bool) or h < 2):
        raise ConfigError(f"--sequential: horizon must be an integer >= 2 or null, got {h!r}")
    return {"prior_sd": float(g), "horizon": h}


@command("verdicts", "direction and size verdicts per claim -> verdicts.json", _verdicts_args)
def cmd_verdicts(args: argparse.Namespace) -> int:
    """Both verdicts per claim (docs/methods.md §9.3), Holm across the scorecard, -> verdicts.json."""
    from timestep_lab.workflow.collect import write_verdicts  # pandas: only when the command runs

    for opt in ("metrics_csv", "runs", "interference", "consistency", "floor", "comparisons"):
        path = getattr(args, opt)
        if path is not None and not path.is_file():
            raise ArtifactError(f"{path}: --{opt.replace('_', '-')} file not found")
    _check_metrics(args.metrics_csv)
    optional = {k: str(getattr(args, k)) if getattr(args, k) is not None else None
                for k in ("interference", "consistency", "floor", "comparisons")}
    write_verdicts(str(args.metrics_csv), str(args.out), runs_csv=str(args.runs) if args.runs else None,
                   base=args.base, study=args.study, sequential=_sequential(args.sequential), **optional)
    log.info("verdicts -> %s", args.out)
    return 0


def _dvc_export_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--summary", type=Path, required=True, help="the study's summary.json (the collect job's)")
    p.add_argument("--metrics-csv", type=Path, required=True, help="the study's metrics.csv (the collect job's)")
    p.add_argument("--profile", type=Path, required=True, help="analyses/profiles/reference.json")
    p.add_argument("--metrics-out", type=Path, required=True, help="dvc/<study>/metrics.json to write")
    p.add_argument("--fid-progress-out", type=Path, required=True, help="dvc/<study>/fid_progress.csv to write")
    p.add_argument("--loss-profile-out", type=Path, required=True, help="dvc/<study>/loss_profile.csv to write")


@command("dvc-export", "summary, metrics and the loss profile -> flat files for dvc metrics / dvc plots",
         _dvc_export_args)
def cmd_dvc_export(args: argparse.Namespace) -> int:
    """Final FID per group variant and the paired comparisons (metrics.json), FID against images
    seen (fid_progress.csv) and the reference loss profile (loss_profile.csv), for DVC."""
    from timestep_lab.workflow.dvc_export import dvc_export  # pandas: only when the command runs

    if not isinstance(read_json(args.summary), dict):
        raise ArtifactError(f"{args.summary}: not a study summary (collect writes it)")
    profile = read_json(args.profile)
    columns = [profile.get(k) if isinstance(profile, dict) else None for k in ("timesteps", "eps_mse", "vlb_bpd")]
    if not all(isinstance(c, list) for c in columns) or len({len(c) for c in columns}) != 1:
        raise ArtifactError(f"{args.profile}: not a loss profile (timesteps, eps_mse and vlb_bpd, one value per timestep)")
    if not args.metrics_csv.is_file():
        raise ArtifactError(f"{args.metrics_csv}: --metrics-csv file not found")
    _check_metrics(args.metrics_csv, EXPORT_COLUMNS)
    dvc_export(str(args.summary), str(args.metrics_csv), str(args.profile), str(args.metrics_out),
               str(args.fid_progress_out), str(args.loss_profile_out))
    log.info("dvc-export -> %s", args.metrics_out.parent)
    return 0
