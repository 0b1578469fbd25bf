"""Record the smoke study's final and progress FID/KID values as the golden file that
``tests/test_pipeline.py::test_smoke_study_metrics_match_the_recorded_values`` compares against:

    python tests/golden/record_smoke_metrics.py results/smoke/metrics.csv > tests/golden/smoke_metrics.json

Rerecord only when a change alters the arithmetic on purpose, and say in the commit how far the
numbers moved. The values are tied to the machine's arithmetic (torch version, CPU capability):
the file records both, and the test compares digit for digit only where they match.
"""

from __future__ import annotations

import csv
import json
import platform
import sys

import numpy as np
import torch


def fingerprint() -> dict:
    """What the last digit of a CPU float result depends on, besides the code."""
    return {"torch": torch.__version__, "numpy": np.__version__, "machine": platform.machine(),
            "cpu_capability": torch.backends.cpu.get_cpu_capability()}


def metric_values(metrics_csv: str) -> dict[str, float]:
    """``"run|stage|kimg|tool|metric" -> value`` for every row of a study's metrics.csv."""
    with open(metrics_csv, newline="") as f:
        return {"|".join((r["run"], r["stage"], r["kimg"], r["tool"], r["metric"])): float(r["value"])
                for r in csv.DictReader(f)}


if __name__ == "__main__":
    json.dump({"fingerprint": fingerprint(), "values": metric_values(sys.argv[1])}, sys.stdout, indent=1, sort_keys=True)
    sys.stdout.write("\n")
