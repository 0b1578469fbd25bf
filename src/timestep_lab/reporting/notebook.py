"""What every report notebook (``reports/*.py``) opens with: plotting style and a group's tables.

A notebook that reads the collected tables starts, after its ``parameters`` cell::

    setup()
    study = load_study(group, metrics_csv, runs_csv)

and shows what the study says about the papers' claims it covers (docs/methods.md §9.3)::

    show_verdicts(verdicts, ["speed_faster", ...])   # rows of verdicts.json's scorecard
    show_comparisons(study, summary)                 # every arm vs the group's baseline, paired
    show_speedup_seeds(study, summary)               # the speed-up seed by seed, with its censoring

``study.metrics`` is the tidy metrics table (one row per run x stage x images seen x metric x
tool, with its measuring protocol, docs/methods.md#protocol-record) and ``study.runs`` the run
table, both cut to the runs of one study group; the paths are the ones Snakemake passes, so a
notebook reads only files its rule declares as inputs (docs/design.md#data-flow).

Knows the columns :mod:`timestep_lab.workflow.collect` writes (``groups`` is the ``;``-joined
group names of a run; ``sampler``/``weighting`` are the timestep sampler and loss weighting,
``method`` the reverse sampler). Must not know how notebooks are rendered, nor how any number is
trained, sampled or scored.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

import matplotlib.pyplot as plt
import pandas as pd
from IPython.display import HTML, Markdown, display

from timestep_lab.artifacts.floor import headline_tool
from timestep_lab.artifacts.identity import describe, distinct
from timestep_lab.evidence.verdicts import speedup_text
from timestep_lab.reporting.compact import compact_table
from timestep_lab.reporting.forest import forest_rows, forest_svg
from timestep_lab.reporting.scorecard import format_difference, load_verdicts, scorecard_rows

__all__ = ["STYLE", "Study", "in_group", "load_study", "read_log", "setup", "show_verdicts", "comparison_table",
           "claim_verdicts", "comparison_lines", "NO_CLAIM", "group_comparisons",
           "show_comparisons", "speedup_seed_table", "show_speedup_seeds", "code_text", "SEQUENTIAL_NOTE",
           "is_sequential"]


CODE_COLUMNS = {"commit": "code_commit", "dirty": "code_dirty", "source_sha256": "code_source_sha256",
                "lock_sha256": "code_lock_sha256"}  # metrics.csv's columns of each record's code identity

STYLE = {"figure.dpi": 110, "axes.grid": True, "grid.alpha": 0.3}


def setup(grid: bool = True) -> None:
    """The reports' matplotlib style; ``grid=False`` for notebooks whose figures are heatmaps."""
    plt.rcParams.update({**STYLE, "axes.grid": grid})


def in_group(df: pd.DataFrame, group: str) -> pd.DataFrame:
    """The rows of ``df`` whose ``groups`` column (``;``-joined group names) names ``group``."""
    return df[df["groups"].fillna("").str.split(";").apply(lambda g: group in g)]


def _with_variant(df: pd.DataFrame) -> pd.DataFrame:
    """Adds ``variant`` = ``<timestep sampler>+<loss weighting>``, the name every report uses, with
    ``" sampled at shift <s>"`` where the arm is scored on a shifted grid (``sample_shift`` not 1):
    otherwise an arm and its sampling-shift twin would be one curve."""
    if {"sampler", "weighting"} <= set(df.columns):
        variant = df["sampler"] + "+" + df["weighting"]
        if "sample_shift" in df.columns:
            shift = pd.to_numeric(df["sample_shift"], errors="coerce")
            shifted = shift.notna() & (shift != 1.0)
            variant = variant.where(~shifted, variant + " sampled at shift " + shift.map("{:g}".format))
        return df.assign(variant=variant)
    return df


@dataclass(frozen=True)
class Study:
    """One study group's collected results.

    ``metrics``: tidy rows (``run``, run axes, ``stage`` in {final, progress}, ``kimg``, ``metric``,
    ``value``, ``tool``, protocol columns, ``variant``). ``runs``: one row per run (axes, ``status``,
    ``nimg``, ``final_loss``, ``sec_per_step``, ``train_log``, ``variant``). ``label``: how the
    study names its FID (the feature extractor says which), for axis labels and sentences.
    """

    group: str
    metrics: pd.DataFrame
    runs: pd.DataFrame
    label: str

    @property
    def tool(self) -> str:
        """The FID tool headline numbers come from (:func:`timestep_lab.artifacts.floor.headline_tool`)."""
        fid = self.metrics[self.metrics["metric"] == "fid"]
        return headline_tool(fid["tool"].unique()) or ""

    def fid(self, stage: str | None = None, tool: str | None = None) -> pd.DataFrame:
        """The FID rows, optionally of one ``stage`` (``final`` or ``progress``) and one ``tool``."""
        m = self.metrics
        keep = m["metric"] == "fid"
        if stage is not None:
            keep &= m["stage"] == stage
        if tool is not None:
            keep &= m["tool"] == tool
        return m[keep]

    @property
    def failed(self) -> pd.DataFrame:
        """Runs whose status is not ``ok`` (diverged, or missing their scores)."""
        return self.runs[self.runs["status"] != "ok"]

    def show_failed(self, note: str = "") -> None:
        """Displays the failed runs' ids in a red line (nothing when every run finished)."""
        if len(self.failed):
            display(HTML(f"<p class='failed'>Failed runs{note}: " + ", ".join(self.failed["run"]) + "</p>"))


def load_study(group: str, metrics_csv: str | Path, runs_csv: str | Path) -> Study:
    """Reads ``metrics.csv`` and ``runs.csv`` and keeps the runs of ``group``."""
    metrics = pd.read_csv(metrics_csv)
    label = metrics["label"].dropna().iloc[0] if metrics["label"].notna().any() else "FID"
    runs = pd.read_csv(runs_csv)
    return Study(group=group, metrics=_with_variant(in_group(metrics, group)), runs=_with_variant(in_group(runs, group)),
                 label=label)


def code_text(rows: pd.DataFrame) -> str:
    """The code identity (git commit and dirty flag, package source hash, requirements.lock hash,
    and the arithmetic where recorded) that computed the metrics ``rows``, for a protocol
    paragraph; several are listed, none said."""
    if rows.empty or not set(CODE_COLUMNS.values()) <= set(rows.columns):
        return "not recorded"
    idents = []
    for _, r in rows.iterrows():
        ident = {k: (None if pd.isna(r[c]) else r[c]) for k, c in CODE_COLUMNS.items()}
        if "arithmetic" in rows.columns and not pd.isna(r["arithmetic"]):  # and the CPU code paths, where recorded
            blas = r.get("arithmetic_openblas")
            ident["arithmetic"] = {"level": r["arithmetic"], "torch_cpu_capability": r.get("arithmetic_torch"),
                                   "openblas": [] if blas is None or pd.isna(blas) else str(blas).split("/")}
        idents.append(ident if any(v is not None for v in ident.values()) else None)
    found = distinct(idents)
    if len(found) == 1:
        return describe(found[0])
    return f"{len(found)} different code identities (mixed): " + "; ".join(describe(i) for i in found)


def read_log(path: str | Path) -> list[dict]:
    """A run's ``train_log.jsonl`` as records (one per log interval); ``[]`` when there is none."""
    path = Path(str(path))
    return [json.loads(x) for x in path.read_text().splitlines()] if path.is_file() else []


def show_verdicts(verdicts_json: str | Path | None, ids: Iterable[str]) -> None:
    """Displays the scorecard rows (``verdicts.json``) of the claims ``ids`` as a table: paired
    difference with its 95% interval, n seeds, Holm-adjusted p, verdict, detectable effect or
    what the claim needs, censored speed-up. An empty ``ids`` says the report tests no claim."""
    ids = list(ids)
    if not ids:
        display(Markdown("**Verdicts.** This report tests none of the papers' claims on the scorecard "
                         "(`index.html`): its numbers describe what happened and state no finding."))
        return
    data = load_verdicts(verdicts_json)
    rows = scorecard_rows(data, ids)
    if not rows:
        display(Markdown("**Verdicts.** _No verdicts.json for this study yet._"))
        return
    display(Markdown("**Verdicts on the claims this report covers**, direction and size side by side (paired by "
                     "seed, 95% interval and p on the scorecard's calibration (it holds under skewed seeds), p Holm-adjusted "
                     "across the whole scorecard as on `index.html`; "
                     "docs/methods.md §9):"))
    keep = set(ids)
    display(HTML(forest_svg(forest_rows({"claims": [c for c in data.get("claims", []) if c.get("id") in keep]}))))
    display(HTML(compact_table(rows)))


#: What the verdict column says for a comparison no scorecard claim reads.
NO_CLAIM = "no claim reads it: described, not judged"


def group_comparisons(study: Study, summary: str | Path | dict) -> dict:
    """The paired comparisons of ``study``'s group as ``collect`` computed them once for the whole
    study (``summary.json["comparisons"]``: :func:`timestep_lab.evidence.verdicts.study_comparisons`
    with the study's own base values, failed runs left out): ``{key: comparison}`` where ``key`` is
    the group or ``<group>/<column>=<value>`` for a stratified one. The reports read them, never
    recompute them."""
    data = json.loads(Path(summary).read_text()) if isinstance(summary, (str, Path)) else (summary or {})
    return {key: comp for key, comp in (data.get("comparisons") or {}).items() if key.split("/")[0] == study.group}


def claim_verdicts(verdicts: str | Path | dict | None) -> dict[str, list[tuple[str, str]]]:
    """``{test: [(claim id, direction verdict), ...]}`` from ``verdicts.json``: the one verdict the
    scorecard gives each comparison it reads (two claims on one comparison, a finding and the
    opposite hypothesis, each with its own), for the group reports to print instead of judging the
    comparison again (issue 42)."""
    data = verdicts if isinstance(verdicts, dict) else load_verdicts(verdicts)
    out: dict[str, list[tuple[str, str]]] = {}
    for row in (data or {}).get("claims", []):
        if row.get("test"):
            out.setdefault(str(row["test"]), []).append((str(row.get("id")), str(row.get("verdict"))))
    return out


def comparison_table(study: Study, summary: str | Path | dict, verdicts: str | Path | dict | None = None
                     ) -> pd.DataFrame:
    """Every arm of ``study``'s group against the group's baseline arm, paired by seed
    (:func:`group_comparisons`, read from ``summary.json``): one row per arm with the final-FID
    difference and 95% interval, the geometric-mean FID ratio and its interval, n, the verdict the
    scorecard (``verdicts``) gives the claims that read this comparison, or :data:`NO_CLAIM` (one
    verdict per comparison: the group's own Holm test is not a second one), the smallest
    difference found with 80% power at the group's Holm level (estimated from the sample SD), and
    the censored per-seed speed-up."""
    judged = claim_verdicts(verdicts)
    rows = []
    for key, group in group_comparisons(study, summary).items():
        for arm, c in group["comparisons"].items():
            log = c.get("log") or {}
            ratio = [math.exp(x) if x is not None and math.isfinite(x) else math.nan
                     for x in (log.get("diff"), log.get("ci_low"), log.get("ci_high"))]
            claims = judged.get(f"{key.split('/')[0]}:{arm}:{group['baseline']}", [])
            rows.append({
                "comparison": key, "arm": arm, "baseline": group["baseline"], "n seeds": c["n"],
                f"{study.label} difference [95% CI]": format_difference(c),
                "FID ratio [95% CI]": (f"{ratio[0]:.3f} [{ratio[1]:.3f}, {ratio[2]:.3f}]"
                                       if all(math.isfinite(r) for r in ratio) else "n/a"),
                "scorecard verdict": "; ".join(f"{cid}: {v}" for cid, v in claims) if claims else NO_CLAIM,
                "detectable |difference|": c.get("detectable"),
                "speed-up (censored)": speedup_text(c.get("speedup")) or "",
            })
    return pd.DataFrame(rows)


#: above a group's table when the study ran in stages (docs/methods.md §14.5)
SEQUENTIAL_NOTE = ("_This study ran in stages and its scorecard was looked at after each: the differences and "
                   "95% intervals below are the fixed design's t-intervals on all seeds, whose coverage does not "
                   "hold after several looks. Only the scorecard's verdicts (anytime-valid, "
                   "docs/methods.md §14.1) are valid readings; the table describes._")


def is_sequential(verdicts: str | Path | dict | None) -> bool:
    """Whether ``verdicts.json`` is a budgeted study's, judged sequentially over its stages."""
    data = verdicts if isinstance(verdicts, dict) else load_verdicts(verdicts)
    return bool(((data or {}).get("family") or {}).get("sequential"))


def show_comparisons(study: Study, summary: str | Path | dict, verdicts: str | Path | dict | None = None
                     ) -> pd.DataFrame:
    """Displays :func:`comparison_table` (or a line saying why there is none) and returns it; for a
    study that ran in stages, :data:`SEQUENTIAL_NOTE` first."""
    table = comparison_table(study, summary, verdicts)
    if not len(table):
        display(Markdown("_No paired comparison: the group's baseline arm has no finished seed._"))
        return table
    if is_sequential(verdicts):
        display(Markdown(SEQUENTIAL_NOTE))
    display(table.style.format({"detectable |difference|": "{:.3g}"}, na_rep="n/a").hide(axis="index"))
    return table


def comparison_lines(table: pd.DataFrame, label: str, versus: str) -> list[str]:
    """One line per row of :func:`comparison_table` for a report's "what our numbers show": the
    difference, and the scorecard's verdict where a claim reads the comparison; otherwise a
    description with the smallest difference this budget detects (never a finding of its own)."""
    lines = []
    for _, r in table.iterrows():
        diff, det = r[f"{label} difference [95% CI]"], r["detectable |difference|"]
        if r["scorecard verdict"] != NO_CLAIM:
            lines.append(f"- {r['arm']} vs {versus}: {diff}; scorecard: **{r['scorecard verdict']}**.")
        elif r["n seeds"] < 2:
            lines.append(f"- {r['arm']} vs {versus}: {diff}; fewer than 2 paired seeds, so no interval.")
        else:
            lines.append(f"- {r['arm']} vs {versus}: {diff}; no claim on the scorecard reads this comparison, so it is "
                         "described, not judged" + (f" (this budget detects |differences| of about {det:.3g} or more "
                                                    "at the group's Holm level)." if det == det and det is not None
                                                    else "."))
    return lines


_CENSORING = {"": "reached between two points", "early": "at or before the first point: ratio is a lower bound",
              "never": "not by the last point: ratio is an upper bound", "dropped": "left out"}


def speedup_seed_table(study: Study, summary: str | Path | dict) -> pd.DataFrame:
    """The speed-up of every arm of ``study``'s group seed by seed: the level (the baseline's FID at
    its last progress point), the baseline's kimg there, the kimg the arm needs to reach it (a
    bound when censored), the ratio and the censoring (docs/methods.md §9.4)."""
    rows = []
    for key, group in group_comparisons(study, summary).items():
        for arm, c in group["comparisons"].items():
            for s in (c.get("speedup") or {}).get("per_seed", []):
                cens = s.get("censoring", "")
                reach = s.get("reach_kimg")
                bound = {"early": "<", "never": ">"}.get(cens, "")
                rows.append({"comparison": key, "arm": arm, "seed": s.get("seed"), "level (FID)": s.get("target"),
                             "baseline kimg": s.get("total_kimg"),
                             "arm kimg to reach": f"{bound}{reach:.3g}" if reach == reach and reach is not None else "n/a",
                             "speed-up": s.get("ratio"),
                             "censoring": _CENSORING.get(cens, cens) + (f" ({s['note']})" if s.get("note") else "")})
    return pd.DataFrame(rows)


def show_speedup_seeds(study: Study, summary: str | Path | dict) -> pd.DataFrame:
    """Displays :func:`speedup_seed_table` (or a line saying there are no progress curves)."""
    table = speedup_seed_table(study, summary)
    if not len(table):
        display(Markdown("_No progress curves in this group: no speed-up per seed._"))
        return table
    display(table.style.format({"level (FID)": "{:.4g}", "baseline kimg": "{:g}", "speed-up": "{:.3g}"}, na_rep="n/a")
            .hide(axis="index"))
    return table
