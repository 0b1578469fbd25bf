"""What every report notebook (``reports/*.py``) opens with: plotting style and a group's tables.

A notebook that reads the collected tables starts, after its papermill ``parameters`` cell::

    setup()
    study = load_study(group, metrics_csv, runs_csv)

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
from dataclasses import dataclass
from pathlib import Path

import matplotlib.pyplot as plt
import pandas as pd
from IPython.display import HTML, display

__all__ = ["STYLE", "Study", "in_group", "load_study", "read_log", "setup"]

STYLE = {"figure.dpi": 110, "axes.grid": True, "grid.alpha": 0.3}
HEADLINE_TOOL = "torch-fidelity"  # the FID tool headline numbers use when a study has it (docs/methods.md#fid-kid)


def setup(grid: bool = True) -> None:
    """The reports' matplotlib style; ``grid=False`` for notebooks whose figures are heatmaps."""
    plt.rcParams.update({**STYLE, "axes.grid": grid})


def in_group(df: pd.DataFrame, group: str) -> pd.DataFrame:
    """The rows of ``df`` whose ``groups`` column (``;``-joined group names) names ``group``."""
    return df[df["groups"].fillna("").str.split(";").apply(lambda g: group in g)]


def _with_variant(df: pd.DataFrame) -> pd.DataFrame:
    """Adds ``variant`` = ``<timestep sampler>+<loss weighting>``, the name every report uses."""
    if {"sampler", "weighting"} <= set(df.columns):
        return df.assign(variant=df["sampler"] + "+" + df["weighting"])
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
        """The FID tool headline numbers come from: torch-fidelity if present, else the first one."""
        fid = self.metrics[self.metrics["metric"] == "fid"]
        if (fid["tool"] == HEADLINE_TOOL).any():
            return HEADLINE_TOOL
        return fid["tool"].iloc[0] if len(fid) else ""

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


def read_log(path: str | Path) -> list[dict]:
    """A run's ``train_log.jsonl`` as records (one per log interval); ``[]`` when there is none."""
    path = Path(str(path))
    return [json.loads(x) for x in path.read_text().splitlines()] if path.is_file() else []
