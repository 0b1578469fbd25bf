"""The consistency phenomenon (arXiv 2404.07946; docs/methods.md §4): two diffusion models trained
separately (different seeds, even different widths) map the same initial noise to nearly the
same image. Given samples ``a_i`` and ``b_i`` drawn with the same seed ``i`` (same initial and
sampler noise) from two models, compare

    paired    = mean_i d(a_i, b_i)
    unpaired  = mean_i d(a_i, b_{(i+1) mod N})          (shifted by one)
    deranged  = mean_i d(a_i, b_{pi(i)})                (pi: a random derangement, fixed seed)

with ``d`` the per-image RMS pixel distance, ``sqrt(mean_pixels (a - b)^2)`` on images scaled to
[0, 1], and, when a feature function is given, the Euclidean distance between feature vectors.
The paper's claim: ``paired / unpaired`` is much smaller than 1.
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

from timestep_lab.errors import InputError

__all__ = ["paired_distance", "derangement"]


def derangement(n: int, seed: int = 0) -> np.ndarray:
    """A uniformly random permutation of ``range(n)`` with no fixed point (rejection sampling
    with ``numpy.random.default_rng(seed)``; deterministic). Needs ``n >= 2``."""
    if n < 2:
        raise InputError(f"a derangement needs n >= 2, got {n}")
    rng = np.random.default_rng(seed)
    while True:
        p = rng.permutation(n)
        if not np.any(p == np.arange(n)):
            return p


def _check(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    a, b = np.asarray(a), np.asarray(b)
    for name, x in (("a", a), ("b", b)):
        if x.ndim != 4 or x.dtype != np.uint8:
            raise InputError(f"{name} must be uint8 [N, H, W, C], got {x.dtype}{list(x.shape)}")
    if a.shape != b.shape:
        raise InputError(f"a and b must have the same shape, got {list(a.shape)} and {list(b.shape)}")
    if a.shape[0] < 2:
        raise InputError(f"need at least 2 samples per set, got {a.shape[0]}")
    return a, b


def _rms(a: np.ndarray, b: np.ndarray, perm: np.ndarray, chunk: int = 256) -> np.ndarray:
    """``d_i = sqrt(mean((a_i - b_perm[i])^2))`` in [0, 1] units, chunked: ``[N]`` float64."""
    out = np.empty(a.shape[0], dtype=np.float64)
    for s in range(0, a.shape[0], chunk):
        x = a[s : s + chunk].astype(np.float32) / 255.0
        y = b[perm[s : s + chunk]].astype(np.float32) / 255.0
        out[s : s + chunk] = np.sqrt(((x - y) ** 2).reshape(len(x), -1).mean(axis=1, dtype=np.float64))
    return out


def _summary(paired: np.ndarray, shifted: np.ndarray, deranged: np.ndarray) -> dict[str, Any]:
    def ratio(x: float, y: float) -> float:
        return float(x / y) if y > 0 else float("nan")

    p, s, d = float(paired.mean()), float(shifted.mean()), float(deranged.mean())
    return {"paired": p, "paired_std": float(paired.std()), "unpaired": s, "unpaired_std": float(shifted.std()),
            "deranged": d, "deranged_std": float(deranged.std()), "ratio": ratio(p, s), "ratio_deranged": ratio(p, d)}


def paired_distance(a_uint8_nhwc: np.ndarray, b_uint8_nhwc: np.ndarray,
                    features: Callable[[np.ndarray], Any] | None = None, *, seed: int = 0,
                    chunk: int = 256) -> dict[str, Any]:
    """Paired vs unpaired distances between two sample sets (module docstring).

    :param a_uint8_nhwc, b_uint8_nhwc: ``uint8 [N, H, W, C]``, row ``i`` of both drawn with seed ``i``.
    :param features: optional ``uint8 [n, H, W, C] -> [n, D]`` (numpy or torch), called in chunks.
    :param seed: seed of the derangement.
    :returns: ``{"n", "pixel": {"paired", "paired_std", "unpaired", "unpaired_std", "deranged",
        "deranged_std", "ratio" (paired / unpaired), "ratio_deranged"}, "feature": same keys or None,
        "units"}``; pixel distances are RMS in [0, 1] units, feature distances Euclidean.
    """
    a, b = _check(a_uint8_nhwc, b_uint8_nhwc)
    n = a.shape[0]
    ident = np.arange(n)
    shift = (ident + 1) % n
    der = derangement(n, seed)
    pixel = _summary(_rms(a, b, ident, chunk), _rms(a, b, shift, chunk), _rms(a, b, der, chunk))
    feature = None
    if features is not None:
        def feats(x: np.ndarray) -> np.ndarray:
            parts = []
            for s in range(0, n, chunk):
                f = features(np.ascontiguousarray(x[s : s + chunk]))
                f = f.detach().cpu().numpy() if hasattr(f, "detach") else np.asarray(f)
                parts.append(f.reshape(f.shape[0], -1).astype(np.float64))
            return np.concatenate(parts)

        fa, fb = feats(a), feats(b)
        if fa.shape != fb.shape or fa.shape[0] != n:
            raise InputError(f"features returned {list(fa.shape)} and {list(fb.shape)}, expected [{n}, D]")

        def dist(perm: np.ndarray) -> np.ndarray:
            return np.linalg.norm(fa - fb[perm], axis=1)

        feature = _summary(dist(ident), dist(shift), dist(der))
    return {"n": int(n), "seed": int(seed), "pixel": pixel, "feature": feature,
            "units": {"pixel": "RMS distance of images scaled to [0, 1]", "feature": "Euclidean distance"}}
