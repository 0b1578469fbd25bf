"""The claims' paired comparisons, computed once (by ``collect``) and read by ``verdicts``.

Every FID claim reads one comparison: its group's arms against the claim's baseline arm
(:func:`timestep_lab.evidence.verdicts.compare_group`). ``collect`` computes each distinct
(group, baseline) comparison once, from the same table it writes as ``metrics.csv``, and stores
them in ``comparisons.json`` (:mod:`timestep_lab.workflow.comparisons_file` writes and reads it);
the ``verdicts`` job reads them back instead of computing them again (docs/design.md#comparisons-json).

A comparison holds values that are not finite numbers (a censored speed-up's upper bound is
infinite, a one-seed interval is NaN), which strict JSON cannot carry. ``comparisons.json`` writes
each one as ``{"$float": "nan" | "inf" | "-inf"}`` and reads it back as that float, so the
verdicts computed from the file equal those computed from the table to the last bit
(``tests/test_comparisons_file.py``). ``summary.json``'s comparisons (the group reports') keep
the ``null`` a report shows as "no value".
"""

from __future__ import annotations

import json
import math
from typing import Any, Mapping, Sequence

import numpy as np
import pandas as pd

from timestep_lab.claims import CLAIMS, Claim
from timestep_lab.evidence.verdicts import claim_baseline, compare_group

__all__ = ["comparison_key", "claim_comparisons", "encode", "decode"]

_TAG = "$float"
_NONFINITE = {"nan": math.nan, "inf": math.inf, "-inf": -math.inf}


def comparison_key(group: str, baseline: Mapping[str, Any]) -> str:
    """The key of the comparison of ``group``'s arms against the arm ``baseline`` selects: the
    group and the selector as sorted JSON (``"sampler_comparison {\\"sampler\\": \\"uniform\\", ...}"``)."""
    return f"{group} {json.dumps(dict(baseline), sort_keys=True, default=str)}"


def claim_comparisons(metrics: pd.DataFrame, *, base: Mapping[str, Any] | None = None,
                      claims: Sequence[Claim] = CLAIMS) -> dict[str, dict[str, Any]]:
    """Every comparison the FID ``claims`` read, keyed by :func:`comparison_key`, each computed once
    (two claims against the same baseline share it). ``metrics``: the study's table without failed
    runs (what ``verdicts`` reads); ``base``: the study's own column values."""
    out: dict[str, dict[str, Any]] = {}
    for claim in claims:
        found = claim_baseline(claim, metrics, base)
        if found is None:
            continue
        key = comparison_key(claim.group, found[1])
        if key not in out:
            out[key] = compare_group(metrics, claim.group, found[1])
    return out


def encode(obj: Any) -> Any:
    """``obj`` as strict JSON: each float that is not finite as ``{"$float": "nan" | "inf" | "-inf"}``,
    numpy scalars as Python ones, tuples as lists (recursively)."""
    if isinstance(obj, np.generic):
        obj = obj.item()
    if isinstance(obj, float):
        if math.isfinite(obj):
            return obj
        return {_TAG: "nan" if math.isnan(obj) else ("inf" if obj > 0 else "-inf")}
    if isinstance(obj, Mapping):
        return {str(k): encode(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [encode(v) for v in obj]
    return obj


def decode(obj: Any) -> Any:
    """The inverse of :func:`encode`: a ``{"$float": ...}`` object back to its float."""
    if isinstance(obj, dict):
        if set(obj) == {_TAG} and obj[_TAG] in _NONFINITE:
            return _NONFINITE[obj[_TAG]]
        return {k: decode(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [decode(v) for v in obj]
    return obj
