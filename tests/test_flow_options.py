"""Flow matching, round 2 (issue 43): sampling without clipping, the Cauchy landing rule, the
resolution-dependent shift rules, the inference-time shift and diffusers' SD3 loss options, each
against diffusers 0.42.1 on identical inputs (docs/methods.md §12.6 lists the measured differences)."""

from __future__ import annotations

import ast
import math
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import tiny_config

from timestep_lab.components import check_config
from timestep_lab.config import ConfigError, SampleConfig
from timestep_lab.generate.sampling import StackedGenerator, resolved_clip_x0, reverse_loop
from timestep_lab.processes.diffusion import GaussianDiffusion
from timestep_lab.processes.flow import RectifiedFlow, shift_sigma
from timestep_lab.timesteps import make_sampler
from timestep_lab.timesteps.logsnr import cauchy_icdf, laplace_icdf
from timestep_lab.timesteps.shift_rules import resolution_shift
from timestep_lab.timesteps.weighting import make_weighting

diffusers = pytest.importorskip("diffusers")
from diffusers.training_utils import compute_loss_weighting_for_sd3  # noqa: E402

T = 1000
FLOW = RectifiedFlow(T)


def diffusers_calculate_shift():
    """diffusers' own ``calculate_shift`` (pipelines/flux/pipeline_flux.py), read from its source:
    the module imports transformers, which this environment does not have."""
    path = Path(diffusers.__file__).parent / "pipelines" / "flux" / "pipeline_flux.py"
    tree = ast.parse(path.read_text())
    node = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "calculate_shift")
    scope: dict = {}
    exec(compile(ast.Module([node], []), str(path), "exec"), scope)
    return scope["calculate_shift"]


# ------------------------------------------------------------------------------ 1 the two deviations


def test_flow_samples_without_clipping_by_default_and_clipping_stays_a_setting():
    assert SampleConfig().clip_x0 is None
    assert resolved_clip_x0(SampleConfig(), FLOW) is False  # diffusers never clips a flow's x0
    assert resolved_clip_x0(SampleConfig(), GaussianDiffusion(torch.linspace(0.99, 0.01, 10).double())) is True
    assert resolved_clip_x0(SampleConfig(clip_x0=True), FLOW) is True
    assert resolved_clip_x0(SampleConfig(clip_x0=False), GaussianDiffusion(torch.linspace(0.99, 0.01, 10).double())) is False


def flow_cdf_in_sigma(cdf, lam_of_sigma, edges):
    """P(sigma < e) for a density over lambda = 2 logit(1 - sigma) (decreasing in sigma)."""
    return 1.0 - cdf(lam_of_sigma(edges))


@pytest.mark.parametrize("name, params, icdf", [
    ("cauchy", {"mu": 0.0, "gamma": 1.0}, lambda u: cauchy_icdf(u, 0.0, 1.0)),
    ("laplace", {"mu": 0.0, "b": 0.5}, lambda u: laplace_icdf(u, 0.0, 0.5)),
])
def test_logsnr_samplers_land_by_the_other_flow_samplers_rule(name, params, icdf):
    """Published rule (diffusers' scripts, logit_normal/mode/cosmap): sigma in [0, 1], t = min(floor(sigma T), T - 1)."""
    s = make_sampler(name, T, FLOW.alpha_bar, **params)
    u = torch.rand(200_000, generator=torch.Generator().manual_seed(5), dtype=torch.float64)
    sigma = torch.sigmoid(-icdf(u) / 2)  # lambda = 2 logit(1 - sigma)
    expected = torch.floor(sigma * T).long().clamp(0, T - 1)
    t, w = s.sample(200_000, torch.Generator().manual_seed(5))
    assert (t != expected).float().mean() < 1e-4 and torch.all(w == 1)  # float edges only
    # the exact pmf: P(t = i) = P(i/T <= sigma < (i+1)/T), with the limit's sigma = 1 mass 0
    edges = torch.arange(T + 1, dtype=torch.float64) / T
    lam = 2 * torch.logit(1 - edges)  # +inf ... -inf
    cdf_lam = {"cauchy": lambda x: 0.5 + torch.atan(x) / math.pi,
               "laplace": lambda x: torch.where(x < 0, 0.5 * torch.exp(2 * x.clamp(max=0)), 1 - 0.5 * torch.exp(-2 * x.clamp(min=0)))}[name]
    pmf = (cdf_lam(lam[:-1]) - cdf_lam(lam[1:]))
    torch.testing.assert_close(s.probs(), pmf, rtol=0, atol=1e-12)


def test_cauchy_pure_noise_mass_by_rule():
    p_below = make_sampler("cauchy", T, FLOW.alpha_bar).probs()[-1]
    p_nearest = make_sampler("cauchy", T, FLOW.alpha_bar, landing="nearest").probs()[-1]
    assert float(p_below) == pytest.approx(0.5 - math.atan(2 * math.log(999)) / math.pi, abs=1e-12)  # 2.30%
    assert 0.0229 < float(p_below) < 0.0231 and 0.0153 < float(p_nearest) < 0.0154  # the 2.3% and 1.54%
    # P(sigma >= (T - 1)/T) = 1/2 - atan(2 log(T - 1))/pi: goes to 0, slowly (Cauchy's tail in log-SNR)
    big = 100_000
    p_big = float(make_sampler("cauchy", big, RectifiedFlow(big).alpha_bar).probs()[-1])
    assert p_big == pytest.approx(0.5 - math.atan(2 * math.log(big - 1)) / math.pi, abs=1e-12) and p_big < float(p_below)


# ------------------------------------------------------------------------------ 2 resolution rules, inference shift


@pytest.mark.parametrize("image_size", [8, 64, 256, 512, 1024, 2048])
def test_flux_rule_is_diffusers_calculate_shift_and_exponential_time_shift(image_size):
    seq_len = (image_size / 16) ** 2  # FluxPipeline: (h / (8 * 2)) (w / (8 * 2)) tokens (VAE 8, patch 2); below 16, fractional
    mu = diffusers_calculate_shift()(seq_len)
    assert resolution_shift("flux", image_size=image_size) == pytest.approx(math.exp(mu), rel=1e-12)
    # the scheduler's dynamic shifting (exponential time shift) at that mu is our shift_sigma at exp(mu)
    steps = 9
    sched = diffusers.FlowMatchEulerDiscreteScheduler(num_train_timesteps=T, use_dynamic_shifting=True)
    sched.set_timesteps(sigmas=np.linspace(1.0, 1 / T, steps), mu=mu)  # as FluxPipeline calls it
    ours = FLOW.inference_sigmas(steps, shift=resolution_shift("flux", image_size=image_size))
    torch.testing.assert_close(ours.float(), sched.sigmas, rtol=0, atol=1e-6)


def test_sd3_rule_and_the_shift_sampler_reads_its_rule():
    assert resolution_shift("sd3", image_size=1024) == 4.0 and resolution_shift("sd3", image_size=8) == 1 / 32
    s = make_sampler("shift", T, rule="sd3", image_size=512)
    assert s.shift == 2.0
    torch.testing.assert_close(s.probs(), make_sampler("shift", T, shift=2.0).probs(), rtol=0, atol=0)
    with pytest.raises(ValueError, match="needs image_size"):
        make_sampler("shift", T, rule="flux")
    with pytest.raises(ValueError, match="rule must be one of"):
        make_sampler("shift", T, rule="auto")


def velocity_model(x: torch.Tensor, sigma: float) -> torch.Tensor:
    return torch.tanh(x) * (0.5 + sigma) - 0.3 * x


@pytest.mark.parametrize("shift, steps", [(3.0, 10), (0.5, 7), (math.exp(diffusers_calculate_shift()(4096)), 6)])
def test_euler_with_inference_shift_equals_the_scheduler_per_network_call(shift, steps):
    T_small = 100
    flow = RectifiedFlow(T_small)
    seen = []

    def denoise(x, t):
        sigma = float((t[0].double() + 1) / T_small)
        seen.append((x.clone(), sigma))
        v = velocity_model(x, sigma)
        return flow.x0_from_v(x, t, v), flow.eps_from_v(x, t, v)

    seeds = [1, 2]
    x = reverse_loop(denoise, flow, StackedGenerator(seeds), (1, 4, 4), method="euler", steps=steps, shift=shift)
    sched = diffusers.FlowMatchEulerDiscreteScheduler(num_train_timesteps=T_small, shift=shift)
    sched.set_timesteps(sigmas=np.linspace(1.0, 1 / T_small, steps))  # the unshifted grid, shifted by the scheduler
    y = StackedGenerator(seeds).randn((1, 4, 4))
    assert len(seen) == len(sched.timesteps)
    for (x_k, sigma_k), timestep in zip(seen, sched.timesteps):
        assert sigma_k == pytest.approx(float(timestep) / T_small, abs=1e-6)
        torch.testing.assert_close(x_k, y, rtol=0, atol=1e-6)  # the same input at every network call
        y = sched.step(velocity_model(y, float(timestep) / T_small), timestep, y).prev_sample
    torch.testing.assert_close(x, y, rtol=0, atol=1e-6)


def test_heun_with_inference_shift_steps_on_the_shifted_grid():
    flow = RectifiedFlow(100)
    sigmas = []

    def denoise(x, t):
        sigmas.append(float((t[0].double() + 1) / 100))
        v = velocity_model(x, sigmas[-1])
        return flow.x0_from_v(x, t, v), flow.eps_from_v(x, t, v)

    reverse_loop(denoise, flow, StackedGenerator([0]), (1, 2, 2), method="heun", steps=5, shift=3.0)
    grid = shift_sigma(torch.linspace(1, 0.01, 5, dtype=torch.float64), 3.0).tolist()
    assert sigmas == pytest.approx([grid[0]] + [s for s in grid[1:] for _ in (0, 1)], abs=1e-6)  # float32 time input


def test_inference_shift_is_refused_for_the_gaussian_samplers(tmp_path):
    cfg = tiny_config(tmp_path, sample={"shift": 3.0})
    with pytest.raises(ConfigError, match="sample.shift"):
        check_config(cfg)
    with pytest.raises(ValueError, match="shift must be > 0"):
        SampleConfig(shift=0.0)


# ------------------------------------------------------------------------------ 3 diffusers' SD3 loss options


@pytest.mark.parametrize("scheme", ["none", "sigma_sqrt", "cosmap"])
def test_precondition_outputs_is_train_dreambooth_sd3s_loss(scheme):
    """train_dreambooth_sd3.py (precondition_outputs=1): model_pred = model_pred * (-sigmas) + noisy_model_input;
    target = model_input; loss = mean(weighting * (model_pred - target)^2), weighting = compute_loss_weighting_for_sd3."""
    g = torch.Generator().manual_seed(0)
    # float64 throughout: the x0 estimate at sigma = 1/T cancels 1e3-fold, beyond float32
    x0 = torch.rand(64, 1, 4, 4, generator=g, dtype=torch.float64) * 2 - 1
    eps = torch.randn(64, 1, 4, 4, generator=g, dtype=torch.float64)
    t = torch.randint(0, T, (64,), generator=g)
    t[:2] = torch.tensor([0, T - 1])
    x_t, v = FLOW.q_sample(x0, t, eps), FLOW.v_from_x0_eps(x0, t, eps)
    v_hat = v + 0.3 * torch.randn(v.shape, generator=g)
    sigmas = FLOW.sigma(t, x0)
    reference = (compute_loss_weighting_for_sd3(scheme, sigmas) * (v_hat * (-sigmas) + x_t - x0) ** 2).mean((1, 2, 3))
    w = make_weighting("precondition_outputs", FLOW.alpha_bar, "v", FLOW.v_scale, sigma=FLOW.sigmas, scheme=scheme)
    ours = w.weights()[t].double() * ((v_hat - v) ** 2).mean((1, 2, 3))
    torch.testing.assert_close(ours, reference, rtol=1e-6, atol=0)


def test_sigma_sqrt_is_compute_loss_weighting_for_sd3_and_is_refused_off_the_flow_velocity():
    w = make_weighting("sigma_sqrt", FLOW.alpha_bar, "v", FLOW.v_scale, sigma=FLOW.sigmas).weights()
    torch.testing.assert_close(w, compute_loss_weighting_for_sd3("sigma_sqrt", FLOW.sigmas.float()), rtol=1e-6, atol=0)
    with pytest.raises(ValueError, match="kind flow only"):
        make_weighting("sigma_sqrt", FLOW.alpha_bar, "v")
    with pytest.raises(ValueError, match="prediction v only"):
        make_weighting("precondition_outputs", FLOW.alpha_bar, "eps", FLOW.v_scale, sigma=FLOW.sigmas)


def test_flow_weightings_and_shift_rules_are_checked_where_the_config_enters(tmp_path):
    flow = {"kind": "flow", "prediction": "v", "num_timesteps": 100}
    check_config(tiny_config(tmp_path, diffusion=flow, sample={"method": "euler", "shift": 3.0},
                             weighting={"name": "precondition_outputs", "params": {"scheme": "sigma_sqrt"}},
                             timesteps={"name": "shift", "params": {"rule": "flux", "image_size": 8}}))
    with pytest.raises(ConfigError, match="weighting.params: .*kind flow only"):
        check_config(tiny_config(tmp_path, weighting={"name": "sigma_sqrt"}))
    with pytest.raises(ConfigError, match="timesteps.params: rule sd3 needs image_size"):
        check_config(tiny_config(tmp_path, diffusion=flow, sample={"method": "euler"},
                                 timesteps={"name": "shift", "params": {"rule": "sd3"}}))
