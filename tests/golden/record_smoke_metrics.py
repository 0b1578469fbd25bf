"""Record the smoke study's final and progress FID/KID values as the golden file that
``tests/test_pipeline.py::test_smoke_study_metrics_match_the_recorded_values`` compares against:

    python tests/golden/record_smoke_metrics.py results/smoke/metrics.csv > tests/golden/smoke_metrics.json

Rerecord only when a change alters the arithmetic on purpose, and say in the commit how far the
numbers moved. The last digits depend on the machine's arithmetic: torch's version and CPU
capability, and the OpenBLAS kernel numpy's and scipy's copies run (``threadpoolctl`` reports it
as ``architecture``; ``OPENBLAS_CORETYPE`` picks another, ``OPENBLAS_L2_SIZE`` changes its
blocking). The file records all of it, and the test compares digit for digit only where the
fingerprint matches, and within a relative tolerance everywhere (its docstring says why).
"""

from __future__ import annotations

import csv
import json
import os
import platform
import sys

import numpy as np
import torch


#: environment variables that change which kernel (or blocking) a BLAS runs, hence the last digits
KERNEL_ENV = ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE", "MKL_CBWR", "MKL_ENABLE_INSTRUCTIONS", "ATEN_CPU_CAPABILITY")


def blas_kernels() -> list[str]:
    """``"<library> <version> <architecture>"`` of every BLAS numpy and scipy load here (the
    kernel OpenBLAS picked for this CPU, or was told to pick)."""
    import scipy.linalg  # noqa: F401 - loads scipy's own OpenBLAS
    from threadpoolctl import threadpool_info

    return sorted({f"{i.get('prefix')} {i.get('version')} {i.get('architecture')}"
                   for i in threadpool_info() if i.get("user_api") == "blas"})


def fingerprint() -> dict:
    """What the last digit of a CPU float result depends on, besides the code."""
    return {"torch": torch.__version__, "numpy": np.__version__, "machine": platform.machine(),
            "cpu_capability": torch.backends.cpu.get_cpu_capability(), "blas": blas_kernels(),
            "kernel_env": {k: os.environ[k] for k in KERNEL_ENV if k in os.environ}}


def metric_values(metrics_csv: str) -> dict[str, float]:
    """``"run|stage|kimg|tool|metric" -> value`` for every row of a study's metrics.csv."""
    with open(metrics_csv, newline="") as f:
        return {"|".join((r["run"], r["stage"], r["kimg"], r["tool"], r["metric"])): float(r["value"])
                for r in csv.DictReader(f)}


if __name__ == "__main__":
    json.dump({"fingerprint": fingerprint(), "values": metric_values(sys.argv[1])}, sys.stdout, indent=1, sort_keys=True)
    sys.stdout.write("\n")
