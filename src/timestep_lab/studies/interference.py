"""Slot fine-tuning interference (Xie & Agam, arXiv 2502.01990, Fig. 2; docs/methods.md §3.2).

Start from the reference model, fine-tune it on one slot ``k`` only, measure the loss profile
again (same bank and noise), and report for every evaluated slot ``j``

    M[k, j] = (L_j(after fine-tuning on k) - L_j(reference)) / L_j(reference),
    L_j = sum_{t in slot j} eps_mse(t)

(a relative change: -0.1 means slot j's summed loss fell by 10 %). The paper's finding is that
training one slot lowers its own loss (negative diagonal) but raises the others' (positive
off-diagonal entries): the timesteps interfere.

Slots are numbered from **1** in the output (``trained`` and ``evaluated``), the paper's and the
config's (``analyses.slots.finetune``) convention.

Against a control (:func:`interference_vs_control`, docs/methods.md §3.2): any fine-tuning at a
given learning rate perturbs the model, so each seed ``s`` also fine-tunes the reference on
*uniform* t with the same budget, learning rate and seed (same data order and noise). With
``C_s[j] = (L_j(control_s) - L_j(reference)) / L_j(reference)`` the change the control makes,
the excess change of training on slot k instead of on all t is measured as a log-ratio,

    R_s[k, j] = log( L_j(slot k, s) / L_j(control_s) )

(``exp(R) - 1`` is the relative change against the control). Log-ratios are symmetric (a
doubling and a halving weigh the same) and tame the heavy right tail of relative changes: a
slot whose loss grows 7-fold would otherwise dominate every mean. The claim "training one slot
raises the others" is the paired comparison over seeds of the per-seed mean off-diagonal
``R_s`` (a 95% t-interval over seeds, :func:`timestep_lab.evidence.stats.paired`); every entry has its
own interval too.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np

from timestep_lab.artifacts.io import atomic_write_json
from timestep_lab.errors import InputError
from timestep_lab.evidence.stats import json_safe, paired
from timestep_lab.studies.profile import load_profile, profile_per_t
from timestep_lab.studies.slots import check_cover, load_slots, slot_sums

__all__ = ["interference_matrix", "interference_vs_control", "write_interference_vs_control"]


def interference_matrix(reference_profile: Mapping[str, Any], finetuned_profiles: Mapping[Any, Mapping[str, Any]],
                        slots: Sequence[Sequence[int]], *, key: str = "eps_mse") -> dict[str, Any]:
    """Relative change of every slot's summed loss after fine-tuning on each slot.

    :param reference_profile: a :func:`~timestep_lab.studies.profile.loss_profile` dict of the
        reference model (strided profiles are linearly interpolated to every t first).
    :param finetuned_profiles: ``{k: profile}`` with ``k`` the **1-based** fine-tuned slot number
        (int or a string of one), profiles measured with the same bank and noise (seed).
    :param slots: the inclusive 0-based ranges covering ``[0, T-1]`` (e.g. from
        :func:`~timestep_lab.studies.slots.equal_loss_slots`).
    :param key: which profile quantity to sum (``eps_mse``; ``loss``/``x0_mse``/``vlb_bpd`` also work).
    :returns: ``{"key", "slots" [[lo, hi]], "trained" [k, ...] (sorted, 1-based), "evaluated" [1..n],
        "before" [n] slot sums of the reference, "after" [[n] per trained slot], "matrix" [[n] per
        trained slot] (relative changes, rows in ``trained`` order), "diagonal" [per trained slot],
        "trained_improved" [bool per trained slot], "largest_off_diagonal" {"value", "trained",
        "evaluated"} (largest |change|, signed; None with a single slot), "max_off_diagonal_increase"
        {...} (the most harmful entry), "mean_off_diagonal" (mean over all off-diagonal entries)}``.
    """
    T = int(reference_profile["T"])
    check_cover(slots, T)
    n = len(slots)
    before = np.asarray(slot_sums(profile_per_t(reference_profile, key), slots))
    if np.any(before <= 0):
        j = int(np.flatnonzero(before <= 0)[0]) + 1
        raise InputError(f"slot {j} has zero reference loss: relative changes are undefined")
    profiles = _checked_profiles(reference_profile, finetuned_profiles, n, T)
    trained = sorted(profiles)
    after = [np.asarray(slot_sums(profile_per_t(profiles[k], key), slots)) for k in trained]
    matrix = [(a - before) / before for a in after]
    diagonal = [float(m[k - 1]) for k, m in zip(trained, matrix)]
    off = [(float(m[j]), k, j + 1) for k, m in zip(trained, matrix) for j in range(n) if j != k - 1]

    def entry(item):
        return None if item is None else {"value": item[0], "trained": item[1], "evaluated": item[2]}

    return {
        "key": key,
        "definition": "M[k, j] = (L_j(after fine-tuning slot k) - L_j(reference)) / L_j(reference), "
                      "L_j = sum of the per-timestep loss over slot j",
        "slots": [[int(a), int(b)] for a, b in slots],
        "trained": trained,
        "evaluated": list(range(1, n + 1)),
        "before": [float(x) for x in before],
        "after": [[float(x) for x in a] for a in after],
        "matrix": [[float(x) for x in m] for m in matrix],
        "diagonal": diagonal,
        "trained_improved": [d < 0 for d in diagonal],
        "largest_off_diagonal": entry(max(off, key=lambda e: abs(e[0])) if off else None),
        "max_off_diagonal_increase": entry(max(off, key=lambda e: e[0]) if off else None),
        "mean_off_diagonal": float(np.mean([e[0] for e in off])) if off else None,
    }


def _checked_profiles(reference_profile: Mapping[str, Any], finetuned_profiles: Mapping[Any, Mapping[str, Any]],
                      n: int, T: int) -> dict[int, Mapping[str, Any]]:
    """``{k: profile}`` with ``k`` an int in ``[1, n]``, once each, every profile of ``T``
    timesteps and measured with the reference's bank (``seed``, ``num_images``); else an
    :class:`InputError` naming the slot."""
    profiles: dict[int, Mapping[str, Any]] = {}
    for k, prof in finetuned_profiles.items():
        kk = int(k)
        if not 1 <= kk <= n:
            raise InputError(f"fine-tuned slot {k!r} is not a 1-based slot number in [1, {n}]")
        if kk in profiles:
            raise InputError(f"fine-tuned slot {kk} given twice")
        if int(prof["T"]) != T:
            raise InputError(f"profile for slot {kk} has T = {prof['T']}, the reference has T = {T}")
        for field in ("seed", "num_images"):
            if field in prof and field in reference_profile and prof[field] != reference_profile[field]:
                raise InputError(f"profile for slot {kk} used {field} = {prof[field]}, the reference "
                                 f"{reference_profile[field]}: the profiles are not comparable")
        profiles[kk] = prof
    return profiles


def interference_vs_control(reference_profile: Mapping[str, Any],
                            finetuned: Mapping[Any, Mapping[Any, Mapping[str, Any]]],
                            controls: Mapping[Any, Mapping[str, Any]], slots: Sequence[Sequence[int]], *,
                            key: str = "eps_mse") -> dict[str, Any]:
    """Interference relative to the uniform-t control on log-ratios, with 95% intervals over seeds
    (module docstring).

    :param finetuned: ``{seed: {k: profile}}``, ``k`` the 1-based fine-tuned slot.
    :param controls: ``{seed: profile}`` of the uniform-t fine-tune of the same seed.
    :returns: JSON-safe ``{"key", "seeds", "trained", "evaluated", "slots", "definition", "units",
        "matrix" [[n] per trained slot] (mean over seeds of M, relative to the reference),
        "control" [n] (mean of C), "log_ratio" [[n]] (mean over seeds of R), "per_seed"
        {seed: [[n]] R_s}, "excess" [[{"diff", "ci_low", "ci_high", "n", "p"}] per trained slot]
        (R per entry, t-interval over seeds), "off_diagonal" and "diagonal"
        (:class:`~timestep_lab.evidence.stats.Paired` dicts of the per-seed mean off-diagonal / diagonal
        R, ``p_adj`` = ``p``)}``. Only seeds with both a control and every trained slot are used.
    """
    seeds = sorted({str(s) for s in finetuned} & {str(s) for s in controls}, key=_seed_order)
    if not seeds:
        raise InputError("no seed has both slot fine-tunes and a uniform-t control")
    fts = {str(s): v for s, v in finetuned.items()}
    ctl = {str(s): v for s, v in controls.items()}
    trained = sorted({int(k) for s in seeds for k in fts[s]})
    seeds = [s for s in seeds if {int(k) for k in fts[s]} == set(trained)]
    n = len(slots)
    m, c, lr = [], [], []  # per seed: M [K, n], C [n], R [K, n]
    for s in seeds:
        res = interference_matrix(reference_profile, fts[s], slots, key=key)
        ctrl = interference_matrix(reference_profile, {1: ctl[s]}, slots, key=key)
        m.append(np.asarray(res["matrix"]))
        c.append(np.asarray(ctrl["matrix"][0]))
        with np.errstate(divide="ignore", invalid="ignore"):
            lr.append(np.log(np.asarray(res["after"]) / np.asarray(ctrl["after"][0])[None, :]))
    m_arr, c_arr, r_arr = np.stack(m), np.stack(c), np.stack(lr)  # [S, K, n], [S, n], [S, K, n]
    off = np.ones((len(trained), n), dtype=bool)
    for i, k in enumerate(trained):
        off[i, k - 1] = False
    zeros = np.zeros(len(seeds))
    excess = [[paired(zeros, r_arr[:, i, j]).as_dict() for j in range(n)] for i in range(len(trained))]

    def summary(mask: np.ndarray) -> dict[str, Any]:
        res = paired(zeros, r_arr[:, mask].mean(axis=1)).as_dict()
        return {**res, "p_adj": res["p"], "units": "log-ratio of slot loss, slot fine-tune / uniform control"}

    return json_safe({
        "key": key, "seeds": [_seed_order(s) for s in seeds], "trained": trained,
        "evaluated": list(range(1, n + 1)), "slots": [[int(a), int(b)] for a, b in slots],
        "definition": "R_s[k, j] = log(L_j(fine-tuned on slot k, seed s) / L_j(uniform-t control, seed s)); "
                      "off_diagonal: the per-seed mean of R_s over k and j != k, t-interval over seeds",
        "units": "log-ratio (exp(R) - 1 = relative change against the control)",
        "matrix": m_arr.mean(axis=0).tolist(), "control": c_arr.mean(axis=0).tolist(),
        "log_ratio": r_arr.mean(axis=0).tolist(),
        "per_seed": {str(_seed_order(s)): r_arr[i].tolist() for i, s in enumerate(seeds)},
        "excess": [[{k: e[k] for k in ("diff", "ci_low", "ci_high", "n", "p")} for e in row] for row in excess],
        "off_diagonal": summary(off), "diagonal": summary(~off),
    })


def _seed_order(seed: Any) -> Any:
    try:
        return int(seed)
    except (TypeError, ValueError):
        return seed


def write_interference_vs_control(reference: str, finetuned: Mapping[Any, Mapping[Any, str]],
                                  controls: Mapping[Any, str], slots: str, out: str) -> dict[str, Any]:
    """:func:`interference_vs_control` from files: profile paths ``{seed: {k: path}}`` and
    ``{seed: path}``, the slots JSON (``{"slots": [[lo, hi], ...]}``); writes ``out`` (JSON)."""
    result = interference_vs_control(
        load_profile(reference), {s: {k: load_profile(p) for k, p in ks.items()} for s, ks in finetuned.items()},
        {s: load_profile(p) for s, p in controls.items()}, load_slots(slots))
    atomic_write_json(out, result)
    return result
