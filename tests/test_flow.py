"""The rectified-flow objective (docs/methods.md §12) against diffusers itself and against closed forms:
the process, its conversions and VLB, the Euler and Heun solvers, SD3's timestep densities, the
cosmap weighting, the shift and curriculum samplers, and a flow run end to end."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from conftest import tiny_config

from timestep_lab.components import check_config
from timestep_lab.config import ConfigError
from timestep_lab.generate.sampling import StackedGenerator, reverse_loop
from timestep_lab.processes.diffusion import mean_flat
from timestep_lab.processes.flow import RectifiedFlow, shift_sigma, unshift_sigma
from timestep_lab.timesteps import make_sampler
from timestep_lab.timesteps.sd3 import MODE_SCALE_MAX, cosmap_density, cosmap_map, mode_inverse, mode_map
from timestep_lab.timesteps.weighting import make_weighting

diffusers = pytest.importorskip("diffusers")
from diffusers.training_utils import compute_density_for_timestep_sampling, compute_loss_weighting_for_sd3  # noqa: E402

T = 1000
FLOW = RectifiedFlow(T)
TOL = dict(rtol=0, atol=1e-6)


def euler_scheduler(shift: float = 1.0, T: int = T):
    return diffusers.FlowMatchEulerDiscreteScheduler(num_train_timesteps=T, shift=shift)


def diffusers_script_sigmas(u: torch.Tensor, scheduler) -> torch.Tensor:
    """What diffusers' SD3/Flux training scripts do with ``u`` from compute_density_for_timestep_sampling
    (train_dreambooth_lora_sd3.py; train_controlnet_flux.py, diffusers PR 9324):
    ``indices = (u * T).long(); sigmas = scheduler.sigmas[indices]`` on the descending table."""
    return scheduler.sigmas[(u * scheduler.config.num_train_timesteps).long()]


# ------------------------------------------------------------------------------ the process


def test_sigmas_and_forward_process_equal_flow_match_euler_discrete_scheduler():
    sched = euler_scheduler()
    torch.testing.assert_close(FLOW.sigmas.float(), sched.sigmas.flip(0), **TOL)  # ascending in our t
    g = torch.Generator().manual_seed(0)
    x0, eps = torch.rand(6, 3, 4, 4, generator=g) * 2 - 1, torch.randn(6, 3, 4, 4, generator=g)
    t = torch.tensor([0, 1, 250, 500, 998, 999])
    expected = sched.scale_noise(x0, sched.timesteps[T - 1 - t], eps)  # diffusers indexes from the noisy end
    torch.testing.assert_close(FLOW.q_sample(x0, t, eps), expected, **TOL)
    assert torch.equal(FLOW.q_sample(x0, torch.tensor([999] * 6), eps), eps)  # sigma = 1: pure noise


@pytest.mark.parametrize("shift", [0.5, 3.0, 7.0])
def test_shift_equals_the_schedulers_shifted_sigmas_and_inverts(shift):
    torch.testing.assert_close(shift_sigma(euler_scheduler().sigmas.double(), shift).float(),
                               euler_scheduler(shift).sigmas, **TOL)
    x = torch.linspace(0, 1, 101, dtype=torch.float64)
    torch.testing.assert_close(unshift_sigma(shift_sigma(x, shift), shift), x, rtol=0, atol=1e-12)


@pytest.mark.parametrize("steps", [1, 2, 7, 20, T])
def test_inference_grid_equals_set_timesteps(steps):
    sched = euler_scheduler()
    sched.set_timesteps(steps)
    torch.testing.assert_close(FLOW.inference_sigmas(steps).float(), sched.sigmas, **TOL)
    torch.testing.assert_close(FLOW.t_of_sigma(FLOW.inference_sigmas(steps)[:-1]).float() + 1, sched.timesteps, rtol=0,
                               atol=1e-3)  # diffusers' timestep is sigma T; ours sigma T - 1


def test_conversions_are_exact_inverses_and_the_velocity_is_eps_minus_x0():
    g = torch.Generator().manual_seed(1)
    x0, eps = (torch.rand(5, 1, 4, 4, generator=g, dtype=torch.float64) * 2 - 1,
               torch.randn(5, 1, 4, 4, generator=g, dtype=torch.float64))
    t = torch.tensor([0, 10, 500, 900, 998])
    x_t = FLOW.q_sample(x0, t, eps)
    v = FLOW.v_from_x0_eps(x0, t, eps)
    torch.testing.assert_close(v, eps - x0)
    for got, want in ((FLOW.x0_from_v(x_t, t, v), x0), (FLOW.eps_from_v(x_t, t, v), eps),
                      (FLOW.x0_from_eps(x_t, t, eps), x0), (FLOW.eps_from_x0(x_t, t, x0), eps)):
        torch.testing.assert_close(got, want, rtol=0, atol=1e-5)  # float32 sigma table
    # fractional t (the ODE solvers') computes sigma = (t + 1) / T
    torch.testing.assert_close(FLOW.sigma(torch.tensor([4.5], dtype=torch.float64), x0[:1]).flatten(),
                               torch.tensor([5.5 / T], dtype=torch.float64))


def test_equivalent_chain_snr_and_loss_space_factors():
    s = FLOW.sigmas
    torch.testing.assert_close(FLOW.snr[:-1], ((1 - s) / s)[:-1] ** 2, rtol=1e-9, atol=0)
    assert FLOW.alpha_bar[-1] > 0 and torch.all(FLOW.alpha_bar[1:] <= FLOW.alpha_bar[:-1])
    # ||v_hat - v||^2 = ||eps_hat - eps||^2 / (1 - sigma)^2 and ||x0_hat - x0||^2 = ... / SNR for one x_t
    g = torch.Generator().manual_seed(2)
    t = torch.tensor([0, 100, 500, 900])
    x0, eps = torch.rand(4, 1, 4, 4, generator=g, dtype=torch.float64), torch.randn(4, 1, 4, 4, generator=g, dtype=torch.float64)
    eps_hat = eps + 0.2 * torch.randn(4, 1, 4, 4, generator=g, dtype=torch.float64)
    x_t = FLOW.q_sample(x0, t, eps)
    x0_hat = FLOW.x0_from_eps(x_t, t, eps_hat)
    l_eps, l_x0 = mean_flat((eps_hat - eps) ** 2), mean_flat((x0_hat - x0) ** 2)
    l_v = mean_flat((FLOW.v_from_x0_eps(x0_hat, t, eps_hat) - FLOW.v_from_x0_eps(x0, t, eps)) ** 2)
    torch.testing.assert_close(l_v, l_eps / FLOW.v_scale[t], rtol=1e-5, atol=0)
    torch.testing.assert_close(l_x0, l_eps / FLOW.snr[t], rtol=1e-5, atol=0)
    # min-SNR on a velocity-predicting flow: min(SNR, 5) / SNR in eps space, times (1 - sigma)^2
    w_v = make_weighting("min_snr", alpha_bar=FLOW.alpha_bar, prediction="v", v_scale=FLOW.v_scale).weights()
    torch.testing.assert_close(w_v.double(), FLOW.snr.clamp(max=5) / FLOW.snr * FLOW.v_scale, rtol=1e-6, atol=0)


def test_vlb_terms_are_the_equivalent_chains_at_the_rescaled_point():
    g = torch.Generator().manual_seed(3)
    x0 = torch.randint(0, 256, (4, 1, 8, 8), generator=g).float() / 127.5 - 1
    eps = torch.randn(4, 1, 8, 8, generator=g)
    t = torch.tensor([0, 1, 400, 998])
    x_t = FLOW.q_sample(x0, t, eps)
    x0_hat = (x0 + 0.1 * torch.randn(4, 1, 8, 8, generator=g)).clamp(-1, 1)
    scale = ((1 - FLOW.sigmas[t]) ** 2 + FLOW.sigmas[t] ** 2).sqrt().float().view(-1, 1, 1, 1)
    ab = FLOW.alpha_bar[t].float().view(-1, 1, 1, 1)
    torch.testing.assert_close(x_t / scale, ab.sqrt() * x0 + (1 - ab).sqrt() * eps, rtol=0, atol=1e-4)  # float32
    got = FLOW.vlb_terms(x0, x_t, t, x0_hat)
    torch.testing.assert_close(got, FLOW.chain.vlb_terms(x0, x_t / scale, t, x0_hat))
    assert torch.all(torch.isfinite(got)) and torch.all(got >= 0)


# ------------------------------------------------------------------------------ ODE solvers


def velocity_model(x: torch.Tensor, sigma: float) -> torch.Tensor:
    """A smooth made-up velocity field (what a network would return as v)."""
    return torch.tanh(x) * (0.5 + sigma) - 0.3 * x


def flow_denoiser(flow):
    """``(x_t, t) -> (x0_hat, eps_hat)`` of :func:`velocity_model`, as a v-predicting network gives them."""
    def denoise(x, t):
        v = velocity_model(x, float((t[0].double() + 1) / flow.T))
        return flow.x0_from_v(x, t, v), flow.eps_from_v(x, t, v)
    return denoise


@pytest.mark.parametrize("method, scheduler_class, steps", [
    ("euler", "FlowMatchEulerDiscreteScheduler", 12), ("euler", "FlowMatchEulerDiscreteScheduler", 1),
    ("heun", "FlowMatchHeunDiscreteScheduler", 9),
])
def test_euler_and_heun_equal_the_diffusers_schedulers(method, scheduler_class, steps):
    T_small = 100
    flow = RectifiedFlow(T_small)
    seeds = [3, 4]
    x = reverse_loop(flow_denoiser(flow), flow, StackedGenerator(seeds), (1, 4, 4), method=method, steps=steps)
    sched = getattr(diffusers, scheduler_class)(num_train_timesteps=T_small)
    sched.set_timesteps(steps)
    y = StackedGenerator(seeds).randn((1, 4, 4))
    for timestep in sched.timesteps:
        y = sched.step(velocity_model(y, float(timestep) / T_small), timestep, y).prev_sample
    torch.testing.assert_close(x, y, rtol=0, atol=1e-6)


def test_euler_is_ddim_with_eta_0_on_the_equivalent_chain():
    """Euler on dx/dsigma = eps - x0 and deterministic DDIM on the VP chain x / s_t take the same steps."""
    flow = RectifiedFlow(50)
    seeds = [0, 1, 2]
    x_flow = reverse_loop(flow_denoiser(flow), flow, StackedGenerator(seeds), (1, 4, 4), method="euler")
    fd = flow_denoiser(flow)

    def denoise_chain(x_vp, t):  # the same network, fed the flow's x_t = s_t x_vp
        s = ((1 - flow.sigmas[t]) ** 2 + flow.sigmas[t] ** 2).sqrt().float().view(-1, 1, 1, 1)
        return fd(x_vp * s, t)

    x_chain = reverse_loop(denoise_chain, flow.chain, StackedGenerator(seeds), (1, 4, 4), method="ddim", eta=0.0)
    torch.testing.assert_close(x_flow, x_chain, rtol=0, atol=1e-4)


def test_reverse_samplers_refuse_the_other_process():
    with pytest.raises(ValueError, match="does not apply to a flow process"):
        reverse_loop(flow_denoiser(FLOW), FLOW, StackedGenerator([0]), (1, 2, 2), method="ddim", steps=2)


# ------------------------------------------------------------------------------ SD3 densities


def test_logit_normal_draws_and_the_sign_of_diffusers_logit_mean():
    """Same draws as compute_density_for_timestep_sampling("logit_normal"); but the training scripts read
    u from the noisy end of the table, so diffusers' logit_mean m trains like SD3's -m."""
    u = compute_density_for_timestep_sampling("logit_normal", 4096, logit_mean=0.5, logit_std=1.0,
                                              generator=torch.Generator().manual_seed(0))
    ours = torch.sigmoid(0.5 + 1.0 * torch.randn(4096, generator=torch.Generator().manual_seed(0)))
    torch.testing.assert_close(u, ours, **TOL)
    ln = make_sampler("logit_normal", T, m=0.5)
    ours_mean = float((ln.probs() * FLOW.sigmas).sum())
    theirs = diffusers_script_sigmas(u, euler_scheduler()).double()
    assert ours_mean > 0.55 and float(theirs.mean()) < 0.45  # SD3: m > 0 biases toward noise
    assert abs(float(theirs.mean()) - (1 - ours_mean)) < 0.01


@pytest.mark.parametrize("scale", [1.29, 0.0, -0.8, MODE_SCALE_MAX])
def test_mode_equals_diffusers_and_its_law_survives_the_scripts_flip(scale):
    u = compute_density_for_timestep_sampling("mode", 2048, mode_scale=scale, generator=torch.Generator().manual_seed(1))
    ours = mode_map(torch.rand(2048, generator=torch.Generator().manual_seed(1)), scale)
    torch.testing.assert_close(u, ours, **TOL)
    x = torch.linspace(0, 1, 257, dtype=torch.float64)
    torch.testing.assert_close(mode_map(mode_inverse(x, scale), scale), x, rtol=0, atol=1e-12)
    # f_mode(U) is symmetric about 1/2 (1 - f(u) = f(1 - u)), so sigma = 1 - f_mode(u) (the scripts'
    # index flip) has the paper's law: our pmf is a palindrome
    p = make_sampler("mode", T, scale=scale).probs()
    # (1e-5: at s = 2 / (pi - 2), f_mode is flat at 1/2 and its float64 inverse good to ~1e-16^(1/3))
    torch.testing.assert_close(p, p.flip(0), rtol=0, atol=1e-5)
    if scale == 0.0:
        torch.testing.assert_close(p, torch.full((T,), 1.0 / T, dtype=torch.float64), rtol=0, atol=1e-12)


def test_cosmap_is_a_sampler_in_the_paper_and_a_weight_in_diffusers():
    sched = euler_scheduler()
    s = sched.sigmas
    torch.testing.assert_close(cosmap_density(s), compute_loss_weighting_for_sd3("cosmap", s), **TOL)
    # the paper's sampler: t = 1 - 1 / (tan(pi u / 2) + 1) has density pi_CosMap
    x = torch.linspace(0.001, 0.999, 999, dtype=torch.float64)
    u = torch.atan(x / (1 - x)) * 2 / math.pi  # f^{-1}
    torch.testing.assert_close(cosmap_map(u), x, rtol=0, atol=1e-12)
    dudx = 2 / math.pi / (x**2 + (1 - x) ** 2)
    torch.testing.assert_close(dudx, cosmap_density(x), rtol=1e-12, atol=0)
    # diffusers' variant = our `density` weighting of the cosmap sampler: the weight is the bin average
    # of pi_CosMap (exactly T P(t)), diffusers evaluates it at the bin's sigma: within 1/T = 0.1% (+ float32)
    w = make_weighting("density", alpha_bar=FLOW.alpha_bar, sampler={"name": "cosmap"}).weights().double()
    torch.testing.assert_close(w, compute_loss_weighting_for_sd3("cosmap", FLOW.sigmas), rtol=1.1e-3, atol=0)
    p = make_sampler("cosmap", T).probs()
    torch.testing.assert_close(w, T * p, rtol=1e-6, atol=0)


def test_density_as_weight_has_the_sampled_objective_in_expectation():
    ln = make_sampler("logit_normal", T)
    w = make_weighting("density", alpha_bar=FLOW.alpha_bar, sampler={"name": "logit_normal"}).weights().double()
    loss = torch.linspace(0.1, 3.0, T, dtype=torch.float64) ** 2  # any per-t loss
    torch.testing.assert_close((w * loss).mean(), (ln.probs() * loss).sum(), rtol=1e-6, atol=0)


# ------------------------------------------------------------------------------ composed samplers


def test_shift_sampler_on_uniform_is_sd3s_shifted_uniform():
    s = make_sampler("shift", T, base={"name": "uniform"}, shift=3.0)
    p = s.probs()
    cdf = torch.cumsum(p, 0)  # P(sigma <= (j + 1) / T) = P(x < unshift((j + 1) / T)) = unshift(...)
    torch.testing.assert_close(cdf, unshift_sigma(torch.arange(1, T + 1, dtype=torch.float64) / T, 3.0), rtol=0,
                               atol=1e-12)
    assert float((p * FLOW.sigmas).sum()) > 0.6  # shift 3 trains toward noise
    same = make_sampler("shift", T, base={"name": "logit_normal"}, shift=1.0)
    torch.testing.assert_close(same.probs(), make_sampler("logit_normal", T).probs(), rtol=0, atol=1e-12)
    g1, g2 = torch.Generator().manual_seed(0), torch.Generator().manual_seed(0)
    base = make_sampler("logit_normal", T)
    t_shift = same.sample(64, g1)[0]
    assert torch.equal(t_shift, base.sample(64, g2)[0])  # shift 1 keeps the base's draws


def test_curriculum_switches_at_the_given_images_and_resumes():
    s = make_sampler("curriculum", T, first={"name": "logit_normal"}, then={"name": "uniform"}, switch_kimg=0.128)
    ln, un = make_sampler("logit_normal", T).probs(), make_sampler("uniform", T).probs()
    assert torch.equal(s.probs(), ln)
    s.update(torch.zeros(64, dtype=torch.long), torch.ones(64), nimg=64)
    assert torch.equal(s.probs(), ln)
    s.update(torch.zeros(64, dtype=torch.long), torch.ones(64), nimg=128)
    assert torch.equal(s.probs(), un)
    r = make_sampler("curriculum", T, switch_kimg=0.128)
    r.load_state_dict(s.state_dict())
    assert r.nimg == 128 and torch.equal(r.probs(), un)


@pytest.mark.parametrize("timesteps, message", [
    ({"name": "shift", "params": {"base": {"name": "unifrom"}}},
     r"timesteps\.params\.base\.name: unknown timestep sampler 'unifrom'.*did you mean 'uniform'"),
    ({"name": "shift", "params": {"base": {"name": "logit_normal", "params": {"s": 0}}}},
     r"timesteps\.params\.base\.params\.s must be in \(0\.0"),
    ({"name": "shift", "params": {"shift": 0}}, r"timesteps\.params\.shift must be in \(0\.0"),
    ({"name": "mode", "params": {"scale": 2.0}}, r"timesteps\.params\.scale must be in \[-1\.0, 1\.75"),
    ({"name": "curriculum", "params": {"then": {"name": "uniform", "parms": {}}}},
     r"timesteps\.params\.then has unknown key\(s\) \['parms'\]"),
    ({"name": "laplace", "params": {"b": -1}}, r"timesteps\.params\.b must be in \(0\.0"),
])
def test_bad_flow_sampler_parameters_fail_at_config_load(digits_dir, timesteps, message):
    with pytest.raises(ConfigError, match=message):
        check_config(tiny_config(digits_dir, timesteps=timesteps), "run.yaml")


def test_flow_config_is_validated(digits_dir):
    with pytest.raises(ConfigError, match=r"run\.yaml: diffusion\.kind: unknown diffusion process 'flw'"):
        check_config(tiny_config(digits_dir, diffusion={"kind": "flw"}), "run.yaml")
    with pytest.raises(ConfigError, match=r"sample\.method: ddim does not apply to diffusion\.kind flow; choose one of: "
                                          r"euler, heun"):
        check_config(tiny_config(digits_dir, diffusion={"kind": "flow"}, sample={"method": "ddim"}), "run.yaml")
    with pytest.raises(ConfigError, match=r"sample\.method: euler does not apply to diffusion\.kind gaussian"):
        check_config(tiny_config(digits_dir, sample={"method": "euler"}), "run.yaml")
    with pytest.raises(ConfigError, match=r"weighting\.params: sampler: adaptive learns during training"):
        check_config(tiny_config(digits_dir, weighting={"name": "density", "params": {"sampler": {"name": "adaptive"}}}),
                     "run.yaml")


# ------------------------------------------------------------------------------ analyses on a flow model


class ZeroVelocity(torch.nn.Module):
    def forward(self, x, t):
        return torch.zeros_like(x)


def test_loss_profile_and_slots_on_a_flow_model_match_closed_forms():
    """v_hat = 0 gives x0_hat = x_t and eps_hat = x_t, so on the fixed bank x0_mse = sigma^2 m,
    eps_mse = (1 - sigma)^2 m and the velocity loss is m = E||eps - x0||^2 at every t: the loss
    profile, the x0-error analysis and the slots run on the flow's conversions unchanged."""
    from timestep_lab.processes.predictions import make_prediction
    from timestep_lab.studies.profile import loss_profile, profile_bank, profile_per_t
    from timestep_lab.studies.slots import check_cover, equal_loss_slots

    flow = RectifiedFlow(100)
    images = torch.randint(0, 256, (40, 8, 8, 1), generator=torch.Generator().manual_seed(0), dtype=torch.uint8).numpy()
    prof = loss_profile(ZeroVelocity(), flow, make_prediction("v", 100), images, num_images=16, stride=9, seed=3)
    x0, eps, _ = profile_bank(images, 16, 3)
    m = float(((eps - x0).double() ** 2).mean())
    s = flow.sigmas[prof["timesteps"]].numpy()
    np.testing.assert_allclose(prof["loss"], m, rtol=1e-5)
    np.testing.assert_allclose(prof["x0_mse"], s**2 * m, rtol=1e-4)
    np.testing.assert_allclose(prof["eps_mse"], (1 - s) ** 2 * m, rtol=1e-4, atol=1e-9)
    assert all(math.isfinite(v) and v >= 0 for v in prof["vlb_bpd"])
    slots = equal_loss_slots(profile_per_t(prof, "x0_mse"), 5)
    check_cover(slots, 100)
