"""The figures and tables every FID report shows, from a group's collected tables
(:class:`timestep_lab.reporting.notebook.Study`): FID against images seen, against optimizer
steps and against wall-clock; per-seed final FIDs straight from the data; per-seed paired
differences against the group's baseline arm.

* :func:`progress_table`: the progress rows of the headline tool with ``steps = nimg / batch_size``
  and ``wall_s``, the training wall-clock at that point (the run's log, interpolated in images
  seen; runs share 2 cores with other jobs, so wall-clock is noisy and said to be).
* :func:`plot_progress`: three panels, one curve per arm (mean over seeds, band min..max).
* :func:`per_seed_table`: arm x seed of final FID, as collected (no means).
* :func:`plot_paired_differences`: ``arm - baseline`` per seed (dots), mean and 95% t-interval.

Must not know how notebooks are rendered, nor how any number is trained, sampled or scored.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from timestep_lab.evidence.stats import paired

__all__ = ["progress_table", "plot_progress", "per_seed_table", "paired_differences", "plot_paired_differences",
           "log_wall_clock"]


def log_wall_clock(train_log: str | Path) -> tuple[np.ndarray, np.ndarray]:
    """``(nimg, wall_time_s)`` of a run's ``train_log.jsonl`` (empty arrays without one)."""
    path = Path(str(train_log))
    if not str(train_log) or not path.is_file():
        return np.zeros(0), np.zeros(0)
    recs = [json.loads(x) for x in path.read_text().splitlines() if x.strip()]
    return (np.array([r["nimg"] for r in recs], float), np.array([r.get("wall_time_s", np.nan) for r in recs], float))


def progress_table(study: Any, name: Callable[[pd.Series], str] | None = None, tool: str | None = None) -> pd.DataFrame:
    """Progress FID rows of ``study`` (one tool: the headline one unless given) with ``arm_name``,
    ``seed``, ``kimg``, ``steps`` and ``wall_s``; ``name(run_row)`` labels an arm (default: its
    ``variant``, else its arm id)."""
    prog = study.fid("progress", tool or study.tool)
    if not len(prog):
        return pd.DataFrame(columns=["run", "arm_name", "seed", "kimg", "steps", "wall_s", "value"])
    runs = study.runs.set_index("run")
    rows = []
    for run, d in prog.groupby("run"):
        r = runs.loc[run] if run in runs.index else None
        label = name(r) if (name and r is not None) else (r.get("variant") if r is not None and "variant" in r
                                                           else d["arm"].iloc[0])
        nimg_log, wall_log = log_wall_clock(r["train_log"] if r is not None and "train_log" in r
                                            and isinstance(r["train_log"], str) else "")
        batch = float(r["batch_size"]) if r is not None and "batch_size" in r else np.nan
        for _, row in d.sort_values("nimg").iterrows():
            wall = float(np.interp(row["nimg"], nimg_log, wall_log)) if len(nimg_log) else np.nan
            rows.append({"run": run, "arm_name": label, "seed": int(row["seed"]), "kimg": float(row["kimg"]),
                         "steps": float(row["nimg"]) / batch, "wall_s": wall, "value": float(row["value"])})
    return pd.DataFrame(rows)


def plot_progress(table: pd.DataFrame, label: str, *, baseline: str | None = None, title: str = "") -> plt.Figure:
    """FID against images seen, optimizer steps and wall-clock: one curve per arm (mean over its
    seeds at each point; band: min..max over seeds); log y."""
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.2), sharey=True)
    xs = (("kimg", "images seen (kimg)"), ("steps", "optimizer steps"), ("wall_s", "training wall-clock (s, 2 shared cores)"))
    for i, (arm, d) in enumerate(table.groupby("arm_name", sort=False)):
        style = dict(lw=2.5, color="black") if arm == baseline else dict(lw=1.5, color=f"C{i % 10}")
        n = d["seed"].nunique()
        for ax, (col, _) in zip(axes, xs):
            agg = d.groupby("kimg").agg(x=(col, "mean"), mean=("value", "mean"), lo=("value", "min"),
                                        hi=("value", "max")).sort_values("x")
            ax.plot(agg["x"], agg["mean"], marker="o", ms=3, label=f"{arm} ({n} seed{'s' if n != 1 else ''})", **style)
            ax.fill_between(agg["x"], agg["lo"], agg["hi"], alpha=0.12, color=style["color"])
    for ax, (_, xlabel) in zip(axes, xs):
        ax.set_xlabel(xlabel)
        ax.set_yscale("log")
    axes[0].set_ylabel(f"{label} (log)")
    axes[0].legend(fontsize=7)
    fig.suptitle(title or "FID during training: mean over seeds, band min..max", fontsize=10)
    fig.tight_layout()
    return fig


def per_seed_table(study: Any, name: Callable[[pd.Series], str] | None = None, tool: str | None = None) -> pd.DataFrame:
    """Final FID of every run as collected: one row per arm, one column per seed (no means)."""
    fid = study.fid("final", tool or study.tool)
    if not len(fid):
        return pd.DataFrame()
    runs = study.runs.set_index("run")

    def label(run: str, arm: str) -> str:
        if run in runs.index:
            r = runs.loc[run]
            return name(r) if name else (r["variant"] if "variant" in r else arm)
        return arm

    fid = fid.assign(arm_name=[label(r, a) for r, a in zip(fid["run"], fid["arm"])])
    table = fid.pivot_table(index="arm_name", columns="seed", values="value", aggfunc="first", sort=False)
    table.columns = [f"seed {int(c)}" for c in table.columns]
    return table


def paired_differences(per_seed: pd.DataFrame, baseline: str) -> pd.DataFrame:
    """``arm - baseline`` per seed from :func:`per_seed_table`, with the mean and 95% t-interval
    (:func:`timestep_lab.evidence.stats.paired`; seeds missing in either arm are dropped, and arms that
    share no seed with the baseline)."""
    rows = []
    if baseline not in per_seed.index:
        return pd.DataFrame()
    base = per_seed.loc[baseline]
    for arm, vals in per_seed.iterrows():
        if arm == baseline:
            continue
        keep = vals.notna() & base.notna()
        if not keep.any():  # no seed in common with the baseline (e.g. a width arm on its own seed)
            continue
        p = paired(base[keep].values, vals[keep].values)
        rows.append({"arm": arm, "n": p.n, "diff": p.diff, "ci_low": p.ci_low, "ci_high": p.ci_high,
                     **{c: vals[c] - base[c] for c in per_seed.columns if keep[c]}})
    return pd.DataFrame(rows)


def plot_paired_differences(diffs: pd.DataFrame, label: str, baseline: str) -> plt.Figure | None:
    """One row per arm: each seed's ``arm - baseline`` (dots) and the mean with its 95% interval."""
    if not len(diffs):
        return None
    seeds = [c for c in diffs.columns if c.startswith("seed ")]
    fig, ax = plt.subplots(figsize=(8, 0.6 + 0.55 * len(diffs)))
    for i, (_, r) in enumerate(diffs.iterrows()):
        pts = [r[c] for c in seeds if c in r and pd.notna(r[c])]
        ax.scatter(pts, [i] * len(pts), color="C0", s=22, zorder=3, label="one seed" if i == 0 else None)
        if pd.notna(r["ci_low"]):
            ax.errorbar([r["diff"]], [i], xerr=[[r["diff"] - r["ci_low"]], [r["ci_high"] - r["diff"]]], fmt="D",
                        color="C3", capsize=4, zorder=4, label="mean, 95% t-interval" if i == 0 else None)
    ax.axvline(0, color="k", lw=0.8)
    ax.set_yticks(range(len(diffs)), diffs["arm"])
    ax.set_xlabel(f"{label}: arm - {baseline}, per seed (negative: the arm is better)")
    ax.legend(fontsize=7, loc="best")
    ax.invert_yaxis()
    fig.tight_layout()
    return fig
