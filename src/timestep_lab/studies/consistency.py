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
from timestep_lab.evidence.jackknife import jackknife_over_models, models_vs_control

__all__ = ["paired_distance", "derangement", "jackknife_over_models", "consistency_test", "models_vs_control"]


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


def _pair_stats(a: np.ndarray, b: np.ndarray, perm_a: np.ndarray, perm_b: np.ndarray) -> float:
    """``mean_i d(a_{perm_a(i)}, b_{perm_b(i)})`` for flattened float sets ``[N, D]`` (RMS for pixels)."""
    return float(np.sqrt(((a[perm_a] - b[perm_b]) ** 2).mean(1)).mean())


def _flat(x: np.ndarray, pixels: bool) -> np.ndarray:
    x = np.asarray(x, np.float64)
    return (x / 255.0 if pixels else x).reshape(len(x), -1)


def consistency_test(sets: dict[str, np.ndarray], controls: dict[str, np.ndarray] | None = None, *,
                     features: Callable[[np.ndarray], Any] | None = None, permutations: int = 999,
                     seed: int = 0) -> dict[str, Any]:
    """The consistency claim tested over models, not pairs (docs/methods.md §4.1, §9.5).

    :param sets: ``{model: uint8 [N, H, W, C]}``, row i of every set drawn with sample seed i.
    :param controls: ``{name: uint8 [N, H, W, C]}`` drawn with the same seeds by closed-form
        denoisers (the Gaussian solution every network passes through early, the training
        set's optimal denoiser): the "same early solution" controls.
    :returns: per space (``pixel``, ``feature`` when ``features`` is given):

        * ``test``: ``paired - unpaired`` distance averaged over the model pairs (unpaired: row i
          against row i+1), with a jackknife-over-models interval (:func:`jackknife_over_models`)
          and a two-sided permutation p: each model's sample seeds are permuted (one permutation
          per model, shared by all its pairs, so pairs sharing a model stay dependent),
          ``permutations`` times; ``p_less = (1 + #{stat_perm <= stat}) / (1 + permutations)``,
          ``p_greater`` the same with ``>=``, ``p = min(1, 2 min(p_less, p_greater))``
          (``alternative`` "two-sided": paired samples further apart than unpaired ones can be
          told too, and contradict the claim).
        * ``controls``: per control, ``paired`` and ``unpaired`` distance of every model to it and
          ``closer_to_each_other``: per model pair, ``d(a, b) - (d(a, C) + d(b, C)) / 2`` on paired
          samples (negative: the models are closer to each other than to the control), with the
          jackknife interval over models; ``models_vs_control``: the same on log paired/unpaired
          ratios (:func:`models_vs_control`), the contrast the scorecard tests.
    """
    names = list(sets)
    if len(names) < 2:
        raise InputError(f"the test over models needs at least 2 models' sample sets, got {len(names)}")
    n = len(next(iter(sets.values())))
    spaces: dict[str, dict[str, np.ndarray]] = {"pixel": {k: _flat(v, True) for k, v in sets.items()}}
    ctrl = {"pixel": {k: _flat(v, True) for k, v in (controls or {}).items()}}
    if features is not None:
        def feats(x: np.ndarray) -> np.ndarray:
            f = features(np.ascontiguousarray(x))
            f = f.detach().cpu().numpy() if hasattr(f, "detach") else np.asarray(f)
            return f.reshape(len(f), -1).astype(np.float64)
        spaces["feature"] = {k: feats(v) for k, v in sets.items()}
        ctrl["feature"] = {k: feats(v) for k, v in (controls or {}).items()}
    ident, shift = np.arange(n), (np.arange(n) + 1) % n
    pairs = [(a, b) for i, a in enumerate(names) for b in names[i + 1:]]
    rng = np.random.default_rng(seed)
    perms = [{m: rng.permutation(n) for m in names} for _ in range(permutations)]
    out: dict[str, Any] = {"models": names, "n_samples": n, "permutations": permutations, "seed": seed}
    for space, flat in spaces.items():
        dist = lambda a, b, pa=ident, pb=ident: _pair_stats(flat[a], flat[b], pa, pb)  # noqa: E731
        per_pair = {(a, b): dist(a, b) - dist(a, b, ident, shift) for a, b in pairs}
        test = jackknife_over_models(names, per_pair)
        stat = np.mean([dist(a, b) for a, b in pairs])
        null = np.array([np.mean([dist(a, b, p[a], p[b]) for a, b in pairs]) for p in perms])
        test.update(_two_sided_p(null, stat, permutations))
        test["p_adj"] = test["p"]
        test["paired"] = float(stat)
        test["unpaired"] = float(np.mean([dist(a, b, ident, shift) for a, b in pairs]))
        test["per_pair"] = [{"a": a, "b": b, "diff": v} for (a, b), v in per_pair.items()]
        controls_out = {cname: _to_control(flat, c, names, pairs, dist, shift) for cname, c in ctrl[space].items()}
        out[space] = {"test": test, "controls": controls_out}
    return out


def _two_sided_p(null: np.ndarray, stat: float, permutations: int) -> dict[str, Any]:
    """The permutation p of ``stat`` against ``null`` on both sides (the claim can also be
    contradicted: paired samples further apart than unpaired ones); ``{"p": None}`` without
    permutations."""
    if not permutations:
        return {"p": None}
    less = float((1 + (null <= stat).sum()) / (1 + permutations))
    greater = float((1 + (null >= stat).sum()) / (1 + permutations))
    return {"p": min(1.0, 2 * min(less, greater)), "p_less": less, "p_greater": greater, "alternative": "two-sided"}


def _to_control(flat: dict[str, np.ndarray], control: np.ndarray, names: list[str], pairs: list[tuple[str, str]],
                dist: Callable[..., float], shift: np.ndarray) -> dict[str, Any]:
    """Every model's paired and unpaired distance to one closed-form control, and per model pair
    how much closer the two are to each other than to the control (jackknife over models)."""
    ident = np.arange(len(control))
    to_c = {m: _pair_stats(flat[m], control, ident, ident) for m in names}
    to_c_unpaired = {m: _pair_stats(flat[m], control, ident, shift) for m in names}
    closer = {(a, b): dist(a, b) - (to_c[a] + to_c[b]) / 2 for a, b in pairs}
    ratio = {m: to_c[m] / to_c_unpaired[m] for m in names}
    model_ratio = {(a, b): dist(a, b) / dist(a, b, ident, shift) for a, b in pairs}
    return {"paired": to_c, "unpaired": to_c_unpaired, "ratio": ratio,
            "closer_to_each_other": jackknife_over_models(names, closer),
            "models_vs_control": models_vs_control(names, model_ratio, ratio)}

