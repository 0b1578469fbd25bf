"""Which prediction type estimates x0 best at each timestep (Xie & Agam, arXiv 2502.01990,
Sec. 2.2; docs/methods.md §3.5).

Every model (eps, x0, v or mixed prediction) is turned into an x0 estimate (``Prediction.estimates``:
``x0 = (x_t - sqrt(1-ab) eps_hat) / sqrt(ab)`` for eps, ``x0_hat`` for x0,
``x0 = sqrt(ab) x_t - sqrt(1-ab) v_hat`` for v) and scored on the fixed profile bank and noise
of :func:`~timestep_lab.studies.profile.loss_profile` (same ``seed`` -> same inputs for every model):

    x0_mse[t] = mean_i mean_pixels (x0_hat_i(t) - x0_i)^2      (data in [-1, 1]; not clamped)

A mixed model is scored with its current inference rule (``head_per_t``) and, in addition, each
of its three heads separately (``"<name>/eps"``, ``"<name>/x0"``, ``"<name>/v"``); the head with
the lowest mean x0 error at each t (docs/methods.md §3.5) is its inference table (``head_per_t``,
every t, nearest evaluated t).
"""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np
import torch
from torch import nn

from timestep_lab.errors import InputError
from timestep_lab.processes.diffusion import GaussianDiffusion
from timestep_lab.processes.predictions import HEADS, Prediction
from timestep_lab.studies.profile import _Eval, _forward_stats, profile_bank, profile_timesteps

__all__ = ["x0_error_profile", "winning_ranges"]


def winning_ranges(timesteps: list[int], winners: list[str]) -> list[dict[str, Any]]:
    """Contiguous runs of the same winner on the evaluated grid:
    ``[{"winner", "lo", "hi"}]`` with ``lo``/``hi`` the first and last evaluated t of the run."""
    out: list[dict[str, Any]] = []
    for t, w in zip(timesteps, winners):
        if out and out[-1]["winner"] == w:
            out[-1]["hi"] = int(t)
        else:
            out.append({"winner": w, "lo": int(t), "hi": int(t)})
    return out


def _nearest_table(timesteps: list[int], values: list[int], T: int) -> list[int]:
    """Spread values on the evaluated grid to every t (nearest evaluated t; ties to the earlier)."""
    grid = np.asarray(timesteps)
    pos = np.searchsorted(grid, np.arange(T))
    pos = np.clip(pos, 0, len(grid) - 1)
    prev = np.clip(pos - 1, 0, len(grid) - 1)
    use_prev = np.abs(np.arange(T) - grid[prev]) <= np.abs(grid[pos] - np.arange(T))
    idx = np.where(use_prev, prev, pos)
    return [int(values[i]) for i in idx]


def x0_error_profile(models: Mapping[str, tuple[nn.Module, Prediction]], diffusion: GaussianDiffusion,
                     images_uint8_nhwc: Any, *, num_images: int = 256, stride: int = 1, seed: int = 1234,
                     batch_size: int = 256, device: Any = "cpu") -> dict[str, Any]:
    """Per-t x0 error of each model, the winner per t and the t-ranges each one wins.

    :param models: ``{name: (net, prediction)}``; all on the same data (same image shape).
    :returns: ``{"T", "stride", "num_images", "seed", "timesteps" [K], "x0_mse": {name: [K],
        "<mixed name>/<head>": [K]}, "predictions": {name: type}, "winner" [K] (model names only),
        "wins": [{"winner", "lo", "hi"}] contiguous runs on the evaluated grid, "win_counts": {name: int},
        "heads": {mixed name: {"winner" [K] (eps/x0/v), "wins" [...], "head_per_t" [T] (0 = eps,
        1 = x0, 2 = v), "win_counts": {head: int}}}}``.
    """
    if not models:
        raise InputError("x0_error_profile needs at least one model")
    device = torch.device(device)
    T = diffusion.T
    ts = profile_timesteps(T, stride)
    x0, eps, _ = profile_bank(images_uint8_nhwc, num_images, seed)
    x0_mse: dict[str, list[float]] = {}
    kinds: dict[str, str] = {}
    heads: dict[str, dict[str, Any]] = {}
    for name, (net, prediction) in models.items():
        if "/" in name:
            raise InputError(f"model name {name!r} must not contain '/'")
        mixed = getattr(prediction, "heads", 1) == 3 and hasattr(prediction, "head_errors")
        with _Eval(net):
            stats = _forward_stats(net, diffusion, prediction, x0, eps, ts, max(1, int(batch_size)), device,
                                   with_heads=mixed)
        kinds[name] = getattr(prediction, "name", type(prediction).__name__)
        x0_mse[name] = [float(v) for v in stats["x0_mse"]]
        if mixed:
            per_head = torch.stack([stats[f"head_{h}"] for h in HEADS])  # [3, K]
            for h, row in zip(HEADS, per_head):
                x0_mse[f"{name}/{h}"] = [float(v) for v in row]
            best = per_head.argmin(dim=0).tolist()
            winners = [HEADS[i] for i in best]
            heads[name] = {"winner": winners, "wins": winning_ranges(ts, winners),
                           "head_per_t": _nearest_table(ts, best, T),
                           "win_counts": {h: winners.count(h) for h in HEADS}}
    names = list(models)
    table = np.asarray([x0_mse[n] for n in names])  # [M, K]
    winner = [names[i] for i in table.argmin(axis=0)]  # ties: the first model given
    return {
        "T": T, "stride": int(stride), "num_images": int(x0.shape[0]), "seed": int(seed), "timesteps": ts,
        "definition": "x0_mse[t] = mean over bank and pixels of (x0_hat - x0)^2, x0 in [-1, 1], not clamped",
        "predictions": kinds, "x0_mse": x0_mse, "winner": winner, "wins": winning_ranges(ts, winner),
        "win_counts": {n: winner.count(n) for n in names}, "heads": heads,
    }
