"""``comparisons.json``: the claims' comparisons as ``collect`` computed them, written and read back
(format :data:`COMPARISONS_FORMAT`, docs/design.md#comparisons-json; the values and their encoding:
:mod:`timestep_lab.evidence.comparisons`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Mapping

import pandas as pd

from timestep_lab.artifacts.io import ArtifactError, atomic_write_json, read_json
from timestep_lab.evidence.comparisons import comparison_key, decode, encode

__all__ = ["COMPARISONS_FORMAT", "write_comparisons", "read_comparisons", "stored_compare"]

#: The format string of ``comparisons.json``.
COMPARISONS_FORMAT = "timestep_lab.comparisons/1"


def write_comparisons(path: str | Path, comparisons: Mapping[str, Any], *, study: str = "") -> None:
    """``comparisons.json`` (format :data:`COMPARISONS_FORMAT`), atomically."""
    atomic_write_json(path, {"format": COMPARISONS_FORMAT, "study": study, "comparisons": encode(comparisons)})


def read_comparisons(path: str | Path) -> dict[str, dict[str, Any]]:
    """The comparisons of a ``comparisons.json``; :class:`ArtifactError` naming the file when it is not one."""
    data = read_json(path)
    if not isinstance(data, dict) or data.get("format") != COMPARISONS_FORMAT:
        found = data.get("format") if isinstance(data, dict) else type(data).__name__
        raise ArtifactError(f"{path}: not a comparisons file of format {COMPARISONS_FORMAT} (found {found!r}); "
                            "the collect job writes it")
    comps = data.get("comparisons")
    if not isinstance(comps, dict) or not all(isinstance(c, dict) for c in comps.values()):
        raise ArtifactError(f"{path}: 'comparisons' is not an object of comparisons; the collect job writes it")
    return decode(comps)


def stored_compare(comparisons: Mapping[str, dict[str, Any]], source: str | Path
                   ) -> Callable[[pd.DataFrame, str, Mapping[str, Any]], dict[str, Any]]:
    """A ``compare`` for :func:`timestep_lab.evidence.verdicts.judge_claims` that reads the stored
    comparison instead of computing it; one missing is an :class:`ArtifactError` naming ``source``
    (a comparisons.json older than the claims)."""
    def compare(_metrics: pd.DataFrame, group: str, baseline: Mapping[str, Any]) -> dict[str, Any]:
        key = comparison_key(group, baseline)
        if key not in comparisons:
            raise ArtifactError(f"{source}: no comparison of {group} against {dict(baseline)}; "
                                "rerun the collect job (its claims changed)")
        return comparisons[key]
    return compare
