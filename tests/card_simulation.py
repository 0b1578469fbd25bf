"""Whole scorecards of a real study layout, simulated (tests/test_family.py, tests/test_size.py).

:func:`card_layout` lays a study config out with the project's own ``build_runs`` (the runs the
Snakefile trains), writes one synthetic metrics table in the collection's format (every run's
final FID and a flat progress curve, so that every convergence claim is judged too: the largest
family) and judges it once with :func:`timestep_lab.evidence.verdicts.judge_claims`: which
claims the study runs, which comparison each reads and over how many seeds. The simulations then
draw per-seed differences for those comparisons directly (numpy, thousands of cards at once).

:data:`NOISE`: per-seed differences of mean 0 and SD 1: normal, Student t with 3 df (scaled),
and centred lognormals ``exp(s Z) - exp(s^2 / 2)`` (scaled), log-SD 0.5, 1.0 (docs/methods.md
§9.6's skew model) and 1.5 (beyond it). Comparisons are drawn independently: for "any false
finding" that is the hardest case for Holm (shared baselines correlate the tests and lower it).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pandas as pd
import yaml

from timestep_lab.evidence.verdicts import judge_claims
from timestep_lab.workflow import arm_columns, arm_id, base_columns, build_runs

ROOT = Path(__file__).resolve().parents[1]
STUDIES = ("config.yaml", "digits-full.yaml")


def _lognormal(s: float) -> Callable[[np.random.Generator, tuple[int, ...]], np.ndarray]:
    sd = math.sqrt((math.exp(s * s) - 1.0) * math.exp(s * s))
    return lambda rng, shape: (np.exp(s * rng.standard_normal(shape)) - math.exp(s * s / 2)) / sd


NOISE: dict[str, Callable[[np.random.Generator, tuple[int, ...]], np.ndarray]] = {
    "normal": lambda rng, shape: rng.standard_normal(shape),
    "t3": lambda rng, shape: rng.standard_t(3, shape) / math.sqrt(3.0),
    "lognormal(0.5)": _lognormal(0.5),
    "lognormal(1)": _lognormal(1.0),
    "lognormal(1.5)": _lognormal(1.5),
}


@dataclass(frozen=True)
class Layout:
    """A study's scorecard: ``tests`` = ``[(comparison, seeds, permutation test?)]`` in family
    order, ``rows`` the judged rows of the synthetic table (records + ``test``), ``study`` the config,
    ``runs`` its runs."""

    name: str
    tests: tuple[tuple[str, int, bool], ...]
    rows: tuple[dict[str, Any], ...]
    study: dict[str, Any]
    runs: dict[str, Any]


@functools.lru_cache(maxsize=None)
def card_layout(config: str) -> Layout:
    study = yaml.safe_load((ROOT / "config" / config).read_text())
    runs = build_runs(study, config)
    rng = np.random.default_rng(0)
    rows = []
    for rid, run in runs.items():
        kimg = float(run.config["train"]["total_kimg"])
        base = {"run": rid, "arm": arm_id(rid, run.axes.get("seed")), **run.axes, "groups": ";".join(run.groups),
                **arm_columns(run.config, run.init_from), "metric": "fid", "tool": "torch-fidelity"}
        fid = 100.0 + rng.normal(0.0, 1.0)
        rows.append({**base, "stage": "final", "kimg": kimg, "value": fid})
        for k, f in ((kimg / 3, 1.5 * fid), (2 * kimg / 3, 1.02 * fid), (kimg, fid)):  # flat: "converged"
            rows.append({**base, "stage": "progress", "kimg": k, "value": f})
    slot_seeds = len(((study.get("analyses") or {}).get("slots") or {}).get("seeds") or [0])
    models = len([r for r in runs.values() if "consistency" in r.groups and "_opt" not in r.id])
    analyses = {"interference": {"n": slot_seeds, "diff": 0.1, "sd": 1.0, "ci_low": -1.0, "ci_high": 1.0, "p": 0.5},
                # models against the Gaussian control (issue 42): a jackknife SE over models on the calibration
                "consistency": {"n": models, "diff": 0.1, "se": 1.0, "sd": math.sqrt(models), "ci_low": -1.0,
                                "ci_high": 1.0, "p": 0.5}}
    judged = judge_claims(pd.DataFrame(rows), analyses, base=base_columns(study))
    tests: dict[str, tuple[str, int, bool]] = {}
    for r in judged["claims"]:
        if r["verdict"] not in ("not run", "not judged at this length") and r["test"] not in tests:
            tests[r["test"]] = (r["test"], int(r["n"]), r.get("p_method") == "permutation")
    assert list(tests) == judged["family"]["tests"]  # every judged comparison has a p: the family
    return Layout(config, tuple(tests.values()), tuple(judged["claims"]), study, runs)


def permutation_pvalues(rng: np.random.Generator, shape: tuple[int, ...], permutations: int = 999
                        ) -> tuple[np.ndarray, np.ndarray]:
    """Two-sided p-values of an exact permutation test under its null (studies/consistency.py's
    rule: ``k`` of ``permutations + 1`` equally likely ranks), and the sign of its statistic."""
    k = rng.integers(1, permutations + 2, shape)
    less, greater = k / (permutations + 1), (permutations + 2 - k) / (permutations + 1)
    return np.minimum(1.0, 2.0 * np.minimum(less, greater)), np.where(less < greater, -1.0, 1.0)


def null_cards(layout: Layout, noise: str, replicates: int, rng: np.random.Generator, cal: Any,
               shift: dict[int, float] | None = None) -> dict[str, np.ndarray]:
    """``replicates`` scorecards of ``layout`` with no true effect (``shift``: column -> a true
    mean difference in SD units). Returns ``p`` (calibrated), ``sign``, ``diff``, ``sd`` ``[R, m]``."""
    from timestep_lab.evidence.calibration import studentized

    m = len(layout.tests)
    out = {k: np.empty((replicates, m)) for k in ("p", "sign", "diff", "sd")}
    for j, (_, n, permutation) in enumerate(layout.tests):
        if permutation:
            out["p"][:, j], out["sign"][:, j] = permutation_pvalues(rng, (replicates,))
            out["diff"][:, j], out["sd"][:, j] = out["sign"][:, j], np.nan
            continue
        d = NOISE[noise](rng, (replicates, n)) + (shift or {}).get(j, 0.0)
        mean, sd = d.mean(axis=1), d.std(axis=1, ddof=1)
        out["p"][:, j] = cal.pvalue(studentized(mean, sd, n), n)
        out["sign"][:, j], out["diff"][:, j], out["sd"][:, j] = np.sign(mean), mean, sd
    return out
