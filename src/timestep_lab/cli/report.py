"""The report commands: ``report`` executes a report notebook (jupytext .py) in-process -> HTML;
``index`` renders the study's front page; ``scorecard`` puts several studies' verdicts side by side
(the scorecard across scales).

The rendering is ``timestep_lab.reporting``. Must not know the entry (``timestep_lab.cli``) or
other commands.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from timestep_lab.artifacts.io import ArtifactError, atomic_write_json, read_json
from timestep_lab.cli.common import command, json_object, log
from timestep_lab.config import ConfigError
from timestep_lab.reporting import render_index, render_notebook
from timestep_lab.reporting.across import render_scorecard, scorecard_data, scorecard_text
from timestep_lab.reporting.study_scale import order_by_scale, read_study


def _report_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--notebook", type=Path, required=True, help="reports/<name>.py")
    p.add_argument("--out", type=Path, required=True, help="HTML to write")
    p.add_argument("-p", dest="parameters", nargs=2, action="append", default=[], metavar=("NAME", "VALUE"),
                   help="notebook parameter (string value)")
    p.add_argument("--banner", default=None, help="a warning shown above the report (a rehearsal's: not a result)")


@command("report", "execute a report notebook and write self-contained HTML", _report_args)
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


def _index_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--template", type=Path, required=True, help="reports/index.html.j2")
    p.add_argument("--out", type=Path, required=True, help="reports/<study>/index.html to write")
    p.add_argument("--study", required=True, help="the study's name")
    p.add_argument("--config-source", required=True, help="the study's config file, as the page names it")
    p.add_argument("--summary", type=Path, required=True, help="results/<study>/summary.json (the collect job's)")
    p.add_argument("--verdicts", type=Path, required=True, help="results/<study>/verdicts.json")
    p.add_argument("--slots", type=Path, default=None, help="analyses/slots.json, when measured")
    p.add_argument("--estimate", type=Path, default=None, help="results/<study>/estimate.json, when priced")
    p.add_argument("--reports", type=Path, nargs="*", default=[], help="the study's report pages, linked in this order")
    p.add_argument("--results-dir", type=Path, default=None,
                   help="results/<study>: its benchmark files give the measured cost per rule")
    p.add_argument("--logs-dir", type=Path, default=None,
                   help="logs/<study>: each job's log ends with its exact CPU (its usage line)")
    p.add_argument("--rehearsal", type=json_object, default=None,
                   help="the study config's rehearsal section as a JSON object: a banner says no number is a result")
    p.add_argument("--scales", nargs="*", default=[], help="other studies with results: link the scorecard across scales")
    p.add_argument("--reproducibility", default=None, help="the study's reproducibility level, beside the records' own")
    p.add_argument("--stages", nargs="*", default=[],
                   help="a budgeted study's stage plans (results/<study>/stages/<k>/next.json): spent, needs, why it stopped")


@command("index", "the study's front page: scorecard, forest plot, protocol, cost, links -> index.html", _index_args)
def cmd_index(args: argparse.Namespace) -> int:
    """Render the study's index.html from its summary, verdicts, slots and estimate (and the
    measured cost from its benchmark files and job logs), linking every report."""
    if not args.template.is_file():
        raise ConfigError(f"{args.template}: index template not found")
    summary, verdicts = read_json(args.summary), read_json(args.verdicts)
    for opt, data in (("summary", summary), ("verdicts", verdicts)):
        if not isinstance(data, dict):
            raise ArtifactError(f"{getattr(args, opt)}: not the study's {opt}.json (a JSON object)")
    if not isinstance(verdicts.get("claims"), list):
        raise ArtifactError(f"{args.verdicts}: no list of claims (the verdicts job writes it)")
    render_index(args.template, args.out, study=args.study, summary=args.summary, verdicts=args.verdicts,
                 slots=args.slots, estimate=args.estimate, reports=[str(r) for r in args.reports],
                 config_source=args.config_source, results_dir=args.results_dir, logs_dir=args.logs_dir,
                 rehearsal=args.rehearsal, scales=args.scales, reproducibility=args.reproducibility,
                 stages=[str(p) for p in args.stages])
    log.info("index -> %s", args.out)
    return 0


def _scorecard_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("results", type=Path, nargs="+", metavar="RESULTS_DIR",
                   help="a study's results folder (results/<study>, holding verdicts.json), one per scale")
    p.add_argument("--out", type=Path, required=True, help="HTML to write, e.g. reports/scorecard.html")
    p.add_argument("--json", type=Path, default=None, help="also write the rows (trends and cells) as JSON here")
    p.add_argument("--template", type=Path, default=Path("reports/scorecard.html.j2"),
                   help="jinja2 template (default: reports/scorecard.html.j2, from the project root)")
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
    studies, skipped, seen = [], [], {}
    for folder in args.results:
        try:
            study = read_study(folder)
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
