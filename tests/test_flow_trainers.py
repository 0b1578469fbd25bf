"""The flow trainers' own timestep options (issue 43): OneTrainer's SIGMOID and INVERTED_PARABOLA,
SimpleTuner's Beta schedule and truncated ranges, against the trainers' published formulas written
out here (each names its source): pmfs to float precision, draws by a two-sample KS test on 200k
draws against draws made by the trainer's own rule."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from scipy import stats

from timestep_lab.timesteps import make_sampler

T = 1000
N = 200_000


def ours(name: str, n_t: int = T, seed: int = 0, **params) -> tuple[torch.Tensor, np.ndarray]:
    s = make_sampler(name, n_t, **params)
    t, w = s.sample(N, torch.Generator().manual_seed(seed))
    assert torch.all(w == 1)
    return s.probs(), t.numpy()


def onetrainer_weights(curve: str, n_t: int, weight: float, bias: float, lo: float, hi: float) -> torch.Tensor:
    """OneTrainer modules/modelSetup/mixin/ModelSetupNoiseMixin.py, ``_get_timestep_discrete`` at shift 1
    (``linspace_derivative`` = 1): the weights over ``num_timestep = max_timestep - min_timestep``
    timesteps, drawn by ``torch.multinomial(weights) + min_timestep``."""
    min_timestep, max_timestep = int(n_t * lo), int(n_t * hi)
    linspace = torch.linspace(0, 1, max_timestep - min_timestep, dtype=torch.float64)
    bias = bias + 0.5
    if curve == "sigmoid":
        w = 1 / (1 + torch.exp(-weight * (linspace - bias)))
    else:  # INVERTED_PARABOLA
        w = torch.clamp(-weight * ((linspace - bias) ** 2) + 2, min=0.0)
    return torch.cat([torch.zeros(min_timestep, dtype=torch.float64), w,
                      torch.zeros(n_t - max_timestep, dtype=torch.float64)])


@pytest.mark.parametrize("curve, params", [
    ("sigmoid", {"weight": 6.0, "bias": 0.1}),
    ("sigmoid", {"weight": 3.0, "bias": -0.2, "min_strength": 0.1, "max_strength": 0.9}),
    ("inverted_parabola", {"weight": 8.0, "bias": 0.0}),
    ("inverted_parabola", {"weight": 2.0, "bias": 0.2, "min_strength": 0.0, "max_strength": 0.5}),
])
def test_onetrainer_tables_and_draws(curve, params):
    full = {"weight": 0.0, "bias": 0.0, "min_strength": 0.0, "max_strength": 1.0, **params}
    ref = onetrainer_weights(curve, T, full["weight"], full["bias"], full["min_strength"], full["max_strength"])
    p, t = ours(curve, **params)
    torch.testing.assert_close(p, ref / ref.sum(), rtol=0, atol=1e-15)
    ref_draws = torch.multinomial(ref.float(), N, replacement=True, generator=torch.Generator().manual_seed(1)).numpy()
    assert stats.ks_2samp(t, ref_draws).pvalue > 1e-3
    assert t.min() >= int(T * full["min_strength"]) and t.max() < int(T * full["max_strength"])


def test_onetrainer_defaults_are_uniform():
    for curve in ("sigmoid", "inverted_parabola"):
        torch.testing.assert_close(make_sampler(curve, T).probs(), torch.full((T,), 1 / T, dtype=torch.float64))


@pytest.mark.parametrize("a, b", [(2.0, 2.0), (0.7, 1.6), (3.0, 1.2)])
def test_simpletuner_beta_schedule(a, b):
    """SimpleTuner's trainer, ``flow_use_beta_schedule`` branch: ``beta_dist = Beta(alpha, beta);
    batch["sigmas"] = beta_dist.sample((bsz,))`` (then ``apply_flow_schedule_shift``: our ``shift``
    around it), defaults 2.0 and 2.0; landed as every flow sampler, ``t = min(floor(sigma T), T - 1)``."""
    p, t = ours("beta", alpha=a, beta=b)
    edges = np.linspace(0, 1, T + 1)
    torch.testing.assert_close(p, torch.from_numpy(np.diff(stats.beta.cdf(edges, a, b))), rtol=0, atol=1e-12)
    sigma = np.random.default_rng(2).beta(a, b, N)
    ref = np.minimum(np.floor(sigma * T), T - 1)
    assert stats.ks_2samp(t, ref).pvalue > 1e-3


@pytest.mark.parametrize("lo, hi, base", [
    (0.0, 0.5, {"name": "uniform"}),
    (0.2, 0.9, {"name": "logit_normal", "params": {"m": 0.3}}),
])
def test_truncate_is_the_trainers_affine_range(lo, hi, base):
    """OneTrainer ``_get_timestep_discrete`` (continuous branch): ``timestep = min_timestep + (max_timestep -
    min_timestep) * u`` for uniform and ``logit_normal * num_timestep + min_timestep``; sd-scripts
    library/sd3_train_utils.py ``get_noisy_model_input_and_timesteps``: ``indices = (u * (t_max - t_min) +
    t_min)``, and library/flux_train_utils.py's ``t = t * (t_max - t_min) + t_min`` (t_min, t_max = min/max_timestep / 1000)."""
    p, t = ours("truncate", lo=lo, hi=hi, base=base)
    g = torch.Generator().manual_seed(3)
    if base["name"] == "uniform":
        x = torch.rand(N, generator=g, dtype=torch.float64)
    else:
        x = torch.sigmoid(0.3 + torch.randn(N, generator=g, dtype=torch.float64))
    ref = torch.floor((lo + (hi - lo) * x) * T).clamp(0, T - 1).numpy()
    assert stats.ks_2samp(t, ref).pvalue > 1e-3
    assert t.min() >= math.floor(lo * T) and t.max() < math.ceil(hi * T)
    if base["name"] == "uniform":  # exact: uniform on [lo T, hi T)
        expected = torch.zeros(T, dtype=torch.float64)
        expected[int(lo * T):int(hi * T)] = 1 / (int(hi * T) - int(lo * T))
        torch.testing.assert_close(p, expected, rtol=0, atol=1e-12)
    else:  # the pmf of floor((lo + (hi - lo) x) T) for x = sigmoid(N(0.3, 1)), x spread over its bin
        edges = ((torch.arange(T + 1, dtype=torch.float64) / T - lo) / (hi - lo)).clamp(0, 1)
        cdf = stats.norm.cdf(torch.logit(edges).numpy() - 0.3)
        torch.testing.assert_close(p, torch.from_numpy(np.diff(cdf)), rtol=0, atol=2e-4)  # bin spreading vs the density
    assert abs(float(p.sum()) - 1) < 1e-12


@pytest.mark.parametrize("name, params, message", [
    ("sigmoid", {"min_strength": 0.5, "max_strength": 0.5}, "max_strength must be > min_strength"),
    ("beta", {"alpha": 0.0}, "alpha"),
    ("truncate", {"lo": 0.6, "hi": 0.4}, "hi must be > lo"),
])
def test_bad_parameters_are_refused(name, params, message):
    with pytest.raises(Exception, match=message):
        make_sampler(name, T, **params)
