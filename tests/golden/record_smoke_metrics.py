"""Record the smoke study's final and progress FID/KID values as the golden file that
``tests/test_pipeline.py::test_smoke_study_metrics_match_the_recorded_values`` compares against:

    python tests/golden/record_smoke_metrics.py results/smoke > tests/golden/smoke_metrics.json

Rerecord only when a change alters the arithmetic on purpose, and say in the commit how far the
numbers moved. The smoke study runs ``reproducibility: portable`` (:mod:`timestep_lab.arithmetic`):
every job computes with the x86-64-v3 code paths of torch, oneDNN, numpy, OpenBLAS and MKL, so the
last digits depend on the code and the libraries' versions, not on the CPU. The file records
both (:func:`fingerprint`): the libraries' versions, and the arithmetic every job recorded.
"""

from __future__ import annotations

import csv
import json
import platform
import sys
from pathlib import Path

import numpy as np
import scipy
import torch


def study_arithmetic(results: str | Path) -> list[dict]:
    """The distinct arithmetic records (``code.arithmetic``) of every ``metrics.json`` and training
    log record under ``results/runs``, without the variables (the level says which they were)."""
    found: list[dict] = []
    runs = Path(results) / "runs"
    records = [json.loads(p.read_text()).get("code") for p in sorted(runs.glob("*/metrics.json"))]
    records += [json.loads(line).get("code") for p in sorted(runs.glob("*/train_log.jsonl"))
                for line in p.read_text().splitlines()]
    for code in records:
        rec = {k: v for k, v in ((code or {}).get("arithmetic") or {}).items() if k != "variables"}
        if rec not in found:
            found.append(rec)
    return found


def fingerprint(results: str | Path) -> dict:
    """What the last digit of the study's numbers depends on besides the code: the numeric
    libraries' versions (this venv's, which ran the jobs) and the study's arithmetic (one record)."""
    found = study_arithmetic(results)
    if len(found) != 1:
        raise SystemExit(f"{results}: the jobs computed with {len(found)} different arithmetics: {found}")
    return {"torch": torch.__version__, "numpy": np.__version__, "scipy": scipy.__version__,
            "machine": platform.machine(), "arithmetic": found[0]}


def metric_values(metrics_csv: str | Path) -> dict[str, float]:
    """``"run|stage|kimg|tool|metric" -> value`` for every row of a study's metrics.csv."""
    with open(metrics_csv, newline="") as f:
        return {"|".join((r["run"], r["stage"], r["kimg"], r["tool"], r["metric"])): float(r["value"])
                for r in csv.DictReader(f)}


if __name__ == "__main__":
    results = Path(sys.argv[1])
    json.dump({"fingerprint": fingerprint(results), "values": metric_values(results / "metrics.csv")}, sys.stdout,
              indent=1, sort_keys=True)
    sys.stdout.write("\n")
