import math

import numpy as np
import pytest
import torch
from torch.distributions import Normal, kl_divergence

from timestep_lab.processes.diffusion import GaussianDiffusion, discretized_gaussian_log_likelihood
from timestep_lab.processes.schedules import get_schedule


@pytest.fixture(scope="module")
def diffusion():
    return GaussianDiffusion(get_schedule("linear", 1000))


def test_conversions_round_trip(diffusion):
    g = torch.Generator().manual_seed(0)
    x0 = torch.rand(16, 3, 8, 8, generator=g) * 2 - 1
    eps = torch.randn(16, 3, 8, 8, generator=g)
    t = torch.randint(0, 1000, (16,), generator=g)
    x_t = diffusion.q_sample(x0, t, eps)
    torch.testing.assert_close(diffusion.x0_from_eps(x_t, t, eps), x0, atol=2e-3, rtol=1e-4)
    torch.testing.assert_close(diffusion.eps_from_x0(x_t, t, x0), eps, atol=1e-4, rtol=1e-4)
    v = diffusion.v_from_x0_eps(x0, t, eps)
    torch.testing.assert_close(diffusion.x0_from_v(x_t, t, v), x0, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(diffusion.eps_from_v(x_t, t, v), eps, atol=1e-5, rtol=1e-5)


def test_q_sample_moments(diffusion):
    g = torch.Generator().manual_seed(1)
    n = 200_000
    for tv in (0, 250, 999):
        x0 = torch.full((n, 1), 0.7)
        t = torch.full((n,), tv)
        x_t = diffusion.q_sample(x0, t, torch.randn(n, 1, generator=g))
        ab = diffusion.alpha_bar[tv].item()
        assert x_t.mean().item() == pytest.approx(math.sqrt(ab) * 0.7, abs=4 * math.sqrt((1 - ab) / n) + 1e-6)
        # sample variance ~ (1-ab) with relative standard error sqrt(2/n)
        assert x_t.var().item() == pytest.approx(1 - ab, rel=5 * math.sqrt(2 / n))


def test_posterior_matches_bayes_rule(diffusion):
    # q(x_{t-1}|x_t,x0) ∝ q(x_t|x_{t-1}) q(x_{t-1}|x0): check mean/var by completing the square
    t = 500
    ab, ab_prev = diffusion.alpha_bar[t].item(), diffusion.alpha_bar[t - 1].item()
    beta = 1 - ab / ab_prev
    x0, x_t = torch.tensor([[0.3]]), torch.tensor([[-0.4]])
    prec = 1 / (1 - ab_prev) + (1 - beta) / beta
    mean = (math.sqrt(ab_prev) * x0 / (1 - ab_prev) + math.sqrt(1 - beta) * x_t / beta) / prec
    m, var, _ = diffusion.q_posterior(x0, x_t, torch.tensor([t]))
    assert m.item() == pytest.approx(mean.item(), rel=1e-5)
    assert var.item() == pytest.approx(1 / prec, rel=1e-5)


def test_vlb_term_equals_direct_gaussian_kl(diffusion):
    g = torch.Generator().manual_seed(2)
    x0 = torch.rand(4, 1, 4, 4, generator=g) * 2 - 1
    eps = torch.randn(4, 1, 4, 4, generator=g)
    x0_hat = (x0 + 0.1 * torch.randn(4, 1, 4, 4, generator=g)).clamp(-1, 1)
    t = torch.tensor([1, 10, 300, 999])
    x_t = diffusion.q_sample(x0, t, eps)
    got = diffusion.vlb_terms(x0, x_t, t, x0_hat)
    for i, tv in enumerate(t.tolist()):
        ab, ab_prev = diffusion.alpha_bar[tv], diffusion.alpha_bar[tv - 1]
        beta = 1 - ab / ab_prev
        c1 = beta * ab_prev.sqrt() / (1 - ab)
        c2 = (1 - ab_prev) * (1 - beta).sqrt() / (1 - ab)
        q = Normal(c1 * x0[i].double() + c2 * x_t[i].double(), (beta * (1 - ab_prev) / (1 - ab)).sqrt())
        p = Normal(c1 * x0_hat[i].double() + c2 * x_t[i].double(), beta.sqrt())  # fixed_large
        expected = kl_divergence(q, p).mean() / math.log(2)
        assert got[i].item() == pytest.approx(expected.item(), rel=1e-3, abs=1e-7)


def test_decoder_term_at_t0_is_discretised_nll(diffusion):
    x0 = torch.tensor([-1.0, -0.5, 0.0, 1.0]).view(1, 1, 2, 2)
    t = torch.tensor([0])
    x_t = diffusion.q_sample(x0, t, torch.zeros_like(x0))
    got = diffusion.vlb_terms(x0, x_t, t, x0).item()
    std = math.sqrt(diffusion.betas[1].item() * (1 - diffusion.alpha_bar[0].item()) / (1 - diffusion.alpha_bar[1].item()))
    mean = x0  # c1 = 1 at t = 0, c2 = 0
    n = Normal(mean.double(), std)
    lp = []
    for xi, mi in zip(x0.flatten().double(), mean.flatten().double()):
        nd = Normal(mi, std)
        hi = 1.0 if xi > 0.999 else nd.cdf(xi + 1 / 255)
        lo = 0.0 if xi < -0.999 else nd.cdf(xi - 1 / 255)
        lp.append(math.log(max(float(hi - lo), 1e-12)))
    assert got == pytest.approx(-sum(lp) / 4 / math.log(2), rel=1e-4)
    del n


def test_discretised_likelihood_sums_to_one():
    mean, log_scale = torch.tensor(0.13), torch.tensor(math.log(0.3))
    bins = torch.linspace(-1, 1, 256)
    total = discretized_gaussian_log_likelihood(bins, mean, log_scale).exp().sum()
    assert total.item() == pytest.approx(1.0, abs=1e-5)


def test_decoder_likelihood_is_finite_and_exact_far_from_the_mean_in_float32():
    """A bin far above (or below) a narrow Gaussian: the float64 closed form via scipy's log_ndtr
    is matched in float32 (the naive log(Phi(u) - Phi(l)) is log(1 - 1) = -inf there)."""
    from scipy.special import log_ndtr

    from timestep_lab.processes.diffusion import discretized_gaussian_log_likelihood

    x = torch.tensor([0.3, -0.3, 0.3, 0.0, 0.5])
    mean = torch.tensor([-1.0, 1.0, 0.29, 0.0, 0.45])
    log_scale = torch.tensor([-4.9, -4.9, -4.9, -4.9, 0.5])
    got = discretized_gaussian_log_likelihood(x, mean, log_scale)
    xd, md, sd = x.double().numpy(), mean.double().numpy(), np.exp(log_scale.double().numpy())
    up, lo = (xd - md + 1 / 255) / sd, (xd - md - 1 / 255) / sd
    # in the upper tail use survival functions, in the lower the CDFs (both exact in float64)
    want = np.where(xd > md, log_ndtr(-lo) + np.log1p(-np.exp(log_ndtr(-up) - log_ndtr(-lo))),
                    log_ndtr(up) + np.log1p(-np.exp(log_ndtr(lo) - log_ndtr(up))))
    assert torch.isfinite(got).all()
    np.testing.assert_allclose(got.double().numpy(), want, rtol=1e-4)


def test_t0_kl_term_for_the_adaptive_reward_is_the_closed_form_gaussian_kl(diffusion):
    # The adaptive sampler's official code scores t = 0 with the KL term, not the decoder NLL,
    # and feeds it the unclipped x0 estimate. At t = 0 q(x_-1|x_0, x0) has mean x0 and p has
    # mean x0_hat (c1 = 1, c2 = 0), both with the clipped variance beta~_1 under fixed_large:
    # KL = mean((x0 - x0_hat)^2) / (2 beta~_1) / ln 2.
    g = torch.Generator().manual_seed(5)
    x0 = torch.rand(2, 1, 4, 4, generator=g) * 2 - 1
    x0_hat = x0 + 0.3 * torch.randn(2, 1, 4, 4, generator=g) * 4  # reaches well outside [-1, 1]
    t = torch.zeros(2, dtype=torch.long)
    x_t = diffusion.q_sample(x0, t, torch.randn(2, 1, 4, 4, generator=g))
    var = diffusion.betas[1].item() * (1 - diffusion.alpha_bar[0].item()) / (1 - diffusion.alpha_bar[1].item())
    expected = ((x0 - x0_hat).double() ** 2).mean(dim=(1, 2, 3)) / (2 * var) / math.log(2)
    got = diffusion.vlb_terms(x0, x_t, t, x0_hat, t0_term="kl")
    assert torch.allclose(got.double(), expected, rtol=1e-4)
    # clamping x0_hat (what the reward used to do) shrinks the term: not the same quantity
    assert (diffusion.vlb_terms(x0, x_t, t, x0_hat.clamp(-1, 1), t0_term="kl") < got).all()
    with pytest.raises(ValueError):
        diffusion.vlb_terms(x0, x_t, t, x0_hat, t0_term="nll")
