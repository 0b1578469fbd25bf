"""Timestep ranges between a paper's numbering and ours.

Papers number timesteps from 1 on ``T_paper = 1000`` (``[1, 500]`` is the least noisy half);
timestep_lab numbers them from 0 on ``[0, T-1]``. :func:`scale_range` maps one convention to the
other for any T. Used by the run table (the timestep-contribution ranges of a study config) and by
the contribution analysis, so it lives below both.

Standard library only: no torch, no numpy, nothing from the package (the Snakefile imports it
when it builds the DAG).
"""

from __future__ import annotations

__all__ = ["scale_range", "chain_timesteps"]


def scale_range(lo: int, hi: int, T: int, T_paper: int = 1000) -> tuple[int, int]:
    """Map a 1-based inclusive range of the paper's T (e.g. ``[1, 500]``) to 0-based ``[0, T-1]``.

    With ``f = T / T_paper``: ``a = round((lo - 1) f)``, ``b = round(hi f) - 1``, both clipped to
    ``[0, T-1]`` and ``b >= a`` (a range never becomes empty, even for a small T).
    """
    f = T / T_paper
    a = max(0, min(T - 1, int(round((lo - 1) * f))))
    b = max(a, min(T - 1, int(round(hi * f)) - 1))
    return a, b


def chain_timesteps(T: int, steps: int | None, spacing: str = "uniform") -> list[int]:
    """The original timesteps of a respaced reverse chain, increasing (the same list as
    :func:`timestep_lab.generate.sampling.respaced_timesteps`, without torch, for checks at DAG build)."""
    if steps is None or steps >= T:
        return list(range(T))
    if steps == 1:
        return [T - 1]
    u = [i / (steps - 1) for i in range(steps)]
    return sorted({int(round((x if spacing == "uniform" else x * x) * (T - 1))) for x in u})
