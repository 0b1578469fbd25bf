"""The report commands: ``report`` executes a report notebook (jupytext .py) with papermill -> HTML;
``scorecard`` puts several studies' verdicts side by side (the scorecard across scales).

The rendering is ``timestep_lab.reporting``. Must not know the entry (``timestep_lab.cli``) or
other commands.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from timestep_lab.artifacts.io import ArtifactError, atomic_write_json
from timestep_lab.cli.common import command, log
from timestep_lab.config import ConfigError
from timestep_lab.reporting import render_notebook
from timestep_lab.reporting.across import render_scorecard, scorecard_data, scorecard_text
from timestep_lab.reporting.study_scale import order_by_scale, read_study


def _report_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--notebook", type=Path, required=True, help="reports/<name>.py")
    p.add_argument("--out", type=Path, required=True, help="HTML to write")
    p.add_argument("-p", dest="parameters", nargs=2, action="append", default=[], metavar=("NAME", "VALUE"),
                   help="notebook parameter (string value)")
    p.add_argument("--banner", default=None, help="a warning shown above the report (a rehearsal's: not a result)")


@command("report", "execute a report notebook with papermill and write self-contained HTML", _report_args)
def cmd_report(args: argparse.Namespace) -> int:
    """Run reports/<name>.py (jupytext) with -p NAME VALUE parameters -> HTML."""
    if not args.notebook.is_file():
        raise ConfigError(f"{args.notebook}: report notebook not found")
    if args.notebook.suffix != ".py":
        raise ConfigError(f"{args.notebook}: a report notebook is a jupytext .py file (reports/<name>.py)")
    params = {}
    for name, value in args.parameters:
        params[name] = value
    render_notebook(args.notebook, args.out, params, banner=args.banner)
    log.info("report %s -> %s", args.notebook, args.out)
    return 0


def _scorecard_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("results", type=Path, nargs="+", metavar="RESULTS_DIR",
                   help="a study's results folder (results/<study>, holding verdicts.json), one per scale")
    p.add_argument("--out", type=Path, required=True, help="HTML to write, e.g. reports/scorecard.html")
    p.add_argument("--json", type=Path, default=None, help="also write the rows (trends and cells) as JSON here")
    p.add_argument("--template", type=Path, default=Path("reports/scorecard.html.j2"),
                   help="jinja2 template (default: reports/scorecard.html.j2, from the project root)")
    p.add_argument("--rules", type=Path, default=Path("workflow/rules"),
                   help="the workflow's rule files, to tell local rules (no CPU of their own) apart "
                        "(default: workflow/rules; absent: their jobs count the CPU Snakemake sampled)")
    p.add_argument("--skip-missing", action="store_true",
                   help="list a folder without a readable verdicts.json (format 2) on the page as left out, with "
                        "the reason, instead of failing (the Snakemake target's mode)")


def _renders(folder: Path, study) -> None:
    """Build the study's cells alone once, so a verdicts.json whose claims hold values of a kind
    no check foresaw is an ArtifactError naming it (left out with --skip-missing), not a traceback."""
    try:
        scorecard_data([study])
    except (KeyError, TypeError, ValueError, AttributeError, IndexError) as exc:
        raise ArtifactError(f"{folder}/verdicts.json: a claim cannot be read ({type(exc).__name__}: "
                            f"{str(exc)[:200]})") from None


@command("scorecard", "the claims across scales: several studies' verdicts side by side -> self-contained HTML",
         _scorecard_args)
def cmd_scorecard(args: argparse.Namespace) -> int:
    """Per claim, each study's verdicts (direction and size) and effect with its interval, whether
    the claim holds, flips or is unresolved as scale grows (docs/methods.md §9.9), and each study's
    scale (data, resolution, parameters, images seen, FID extractor) and measured cost. Prints one
    line per claim; writes --out (and --json)."""
    if not args.template.is_file():
        raise ConfigError(f"{args.template}: scorecard template not found (run from the project root, or give "
                          "--template)")
    rules = args.rules if args.rules.is_dir() else None
    studies, skipped, seen = [], [], {}
    for folder in args.results:
        try:
            study = read_study(folder, rules)
            _renders(folder, study)
        except ArtifactError as exc:
            if not args.skip_missing:
                raise
            skipped.append((str(folder), str(exc).removeprefix(f"{folder}: ")))
            log.warning("left out: %s", exc)
            continue
        if study.name in seen:
            raise ConfigError(f"{folder}: study {study.name!r} is also {seen[study.name]}: give each study once")
        seen[study.name] = str(folder)
        studies.append(study)
    if not studies:
        raise ArtifactError(f"none of {', '.join(map(str, args.results))} holds a readable verdicts.json")
    data = render_scorecard(args.template, args.out, order_by_scale(studies), skipped)
    if args.json:
        atomic_write_json(args.json, {"format": "timestep_lab.scorecard/1", **data,
                                      "skipped": [{"folder": f, "reason": r} for f, r in skipped]})
    print(scorecard_text(data))
    log.info("scorecard of %d studies -> %s", len(studies), args.out)
    return 0
