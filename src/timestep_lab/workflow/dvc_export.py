"""Flat files for ``dvc metrics`` / ``dvc plots`` from a study's collected results.

Inputs are :mod:`timestep_lab.workflow.collect`'s ``summary.json`` and ``metrics.csv`` and the
reference loss profile; outputs live under ``dvc/<study>/``, outside the persisted result
folders. Needs pandas: imported by the ``dvc-export`` command only, never at DAG build.
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from timestep_lab.artifacts.floor import headline_tool
from timestep_lab.artifacts.io import atomic_path, atomic_write_json

__all__ = ["dvc_export"]


def dvc_export(summary_json: str, metrics_csv: str, profile_json: str, metrics_out: str, fid_progress_out: str,
               loss_profile_out: str) -> None:
    """Flat files for ``dvc metrics`` / ``dvc plots``: final FID per group variant, the paired
    comparisons of every group (difference, 95% interval, Holm p), FID against
    images seen per sampler-comparison variant (mean over seeds), and the reference loss profile."""
    summary = json.loads(Path(summary_json).read_text())
    flat = {"runs": summary.get("runs", 0), "failed_runs": len(summary.get("failed_runs", []))}
    for group, variants in (summary.get("fid") or {}).items():
        for variant, stats in variants.items():
            flat[f"fid.{group}.{variant.split('+')[0]}+{variant.split('+')[1]}"] = round(stats["mean"], 4)
    # paired differences (arm - baseline, final FID) with their 95% interval and Holm p; no
    # mean-curve speed-up (docs/methods.md §9.4)
    for group, comp in (summary.get("comparisons") or {}).items():
        for arm, c in (comp.get("comparisons") or {}).items():
            for key in ("diff", "ci_low", "ci_high", "p_adj"):
                flat[f"paired.{group}.{arm}.{key}"] = None if c.get(key) is None else round(c[key], 4)
    atomic_write_json(metrics_out, flat)
    metrics = pd.read_csv(metrics_csv)
    prog = metrics[(metrics["stage"] == "progress") & (metrics["metric"] == "fid")]
    prog = prog[prog["tool"] == headline_tool(prog["tool"].unique())]
    prog = prog.assign(variant=prog["sampler"] + "+" + prog["weighting"])
    curve = prog.groupby(["variant", "kimg"], as_index=False)["value"].mean().rename(columns={"value": "fid"})
    with atomic_path(fid_progress_out, suffix=".csv") as tmp:
        curve.to_csv(tmp, index=False)
    prof = json.loads(Path(profile_json).read_text())
    table = pd.DataFrame({"t": prof["timesteps"], "eps_mse": prof["eps_mse"], "vlb_bpd": prof["vlb_bpd"]})
    with atomic_path(loss_profile_out, suffix=".csv") as tmp:
        table.to_csv(tmp, index=False)
