"""The DAG Snakemake builds for a study config of config/, once per test session (each build is a
Snakemake DAG build in a child process, 1.5-4 CPU-s: tests/test_estimate.py, test_mnist.py and
test_rehearsal.py read the same ones)."""

from __future__ import annotations

from functools import lru_cache

from worktree import ROOT


@lru_cache(maxsize=None)
def study_plan(name: str):
    from timestep_lab.cost.estimate.study import load_plan

    return load_plan(ROOT / "config" / f"{name}.yaml", ROOT / "Snakefile")
