"""Loss weightings (docs/methods.md §2) against their formulas."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from conftest import tiny_config

from timestep_lab.components import check_config
from timestep_lab.config import ConfigError
from timestep_lab.processes.diffusion import GaussianDiffusion, mean_flat
from timestep_lab.processes.flow import RectifiedFlow
from timestep_lab.processes.schedules import get_schedule
from timestep_lab.timesteps.weighting import WEIGHTINGS, finite_difference, make_weighting

T = 1000
AB = get_schedule("linear", T).double()
SNR = AB / (1 - AB)
FLOW = RectifiedFlow(T)


def w(name, prediction="eps", ab=AB, **params):
    return make_weighting(name, alpha_bar=ab, prediction=prediction, **params).weights().double()


def close(a, b, rtol=1e-6):
    torch.testing.assert_close(a.double(), b.double(), rtol=rtol, atol=0)


@pytest.mark.parametrize("name", WEIGHTINGS.names())
@pytest.mark.parametrize("prediction", ["eps", "x0", "v", "mixed"])
def test_every_weighting_is_a_positive_float32_table(name, prediction):
    if WEIGHTINGS.build(name, None, alpha_bar=FLOW.alpha_bar, prediction="v", v_scale=FLOW.v_scale,
                        sigma=FLOW.sigmas).flow_velocity_only:  # the flow's velocity loss only (test_flow_options)
        with pytest.raises(ValueError, match="flow only"):
            make_weighting(name, alpha_bar=AB, prediction=prediction)
        if prediction != "v":
            return
        weights = make_weighting(name, FLOW.alpha_bar, "v", FLOW.v_scale, sigma=FLOW.sigmas).weights()
    else:
        weights = make_weighting(name, alpha_bar=AB, prediction=prediction).weights()
    assert weights.shape == (T,) and weights.dtype == torch.float32
    assert torch.all(torch.isfinite(weights)) and torch.all(weights > 0)


def test_none_is_one_in_every_space():
    for prediction in ("eps", "x0", "v", "mixed"):
        assert torch.all(w("none", prediction) == 1)


def test_min_snr_per_prediction_type():
    gamma = 5.0
    clipped = SNR.clamp(max=gamma)
    close(w("min_snr", "eps"), clipped / SNR)
    close(w("min_snr", "x0"), clipped)
    close(w("min_snr", "v"), clipped / (SNR + 1))
    close(w("min_snr", "mixed"), clipped)  # mixed trains in x0 space
    close(w("min_snr", "eps", gamma=1.0), SNR.clamp(max=1.0) / SNR)
    # not the SpeeD repository's gamma / (SNR + 1)
    assert not torch.allclose(w("min_snr", "v"), gamma / (SNR + 1))
    # low noise (large SNR): eps weight gamma / SNR, high noise: 1
    close(w("min_snr", "eps")[:1], gamma / SNR[:1])
    assert w("min_snr", "eps")[-1] == 1


def test_eps_to_x0_and_v_conversion_is_exact():
    """||x0_hat - x0||^2 = ||eps_hat - eps||^2 / SNR and ||v_hat - v||^2 = ||eps_hat - eps||^2 / ab, so
    a weighting gives the same weighted loss whichever target the network is trained on."""
    d = GaussianDiffusion(AB)
    g = torch.Generator().manual_seed(0)
    t = torch.tensor([0, 3, 50, 300, 700, 999])
    x0 = (torch.rand(6, 3, 4, 4, generator=g) * 2 - 1).double()
    eps = torch.randn(6, 3, 4, 4, generator=g, dtype=torch.float64)
    eps_hat = eps + 0.3 * torch.randn(6, 3, 4, 4, generator=g, dtype=torch.float64)
    ab = AB[t].view(-1, 1, 1, 1)
    x_t = ab.sqrt() * x0 + (1 - ab).sqrt() * eps
    x0_hat = (x_t - (1 - ab).sqrt() * eps_hat) / ab.sqrt()  # the same prediction, as x0 and as v
    v, v_hat = ab.sqrt() * eps - (1 - ab).sqrt() * x0, ab.sqrt() * eps_hat - (1 - ab).sqrt() * x0_hat
    l_eps, l_x0, l_v = mean_flat((eps_hat - eps) ** 2), mean_flat((x0_hat - x0) ** 2), mean_flat((v_hat - v) ** 2)
    close(l_x0, l_eps / SNR[t], rtol=1e-9)
    close(l_v, l_eps / AB[t], rtol=1e-9)
    # issue 42: eps_units gives every type the eps loss, while "none" leaves x0 and v at 1/SNR and 1/ab in eps units
    for p, loss in (("x0", l_x0), ("v", l_v)):
        close(w("eps_units", p).double()[t] * loss, l_eps, rtol=1e-5)
    assert torch.all(w("eps_units", "eps") == 1) and torch.all(w("none", "x0") == 1)
    spread = (1 / SNR).max() / (1 / SNR).min()  # what "none" does to an x0 model's per-t weights in eps units
    assert spread > 2e4
    for name in ("min_snr", "p2", "edm", "speed", "none", "eps_units"):
        we, wx, wv = (w(name, p).double()[t] for p in ("eps", "x0", "v"))
        if name in ("speed", "none"):  # defined on the network's own loss ("native"): no conversion
            close(wx, we), close(wv, we)
        else:
            close(wx * l_x0, we * l_eps, rtol=1e-5)
            close(wv * l_v, we * l_eps, rtol=1e-5)
    # float32 conversions in GaussianDiffusion agree with the float64 identity
    x0_f = d.x0_from_eps(x_t.float(), t, eps_hat.float())
    close(mean_flat((x0_f.double() - x0) ** 2)[2:], (l_eps / SNR[t])[2:], rtol=1e-3)


def test_speed_weighting_values():
    lam, tau = 0.6, 700
    g = np.gradient(1.0 - AB.numpy())
    g_hat = (g - g.min()) / (g.max() - g.min())
    expected = np.where(np.arange(T) < tau, (1 - lam) + (2 * lam - 1) * g_hat, 1.0)
    np.testing.assert_allclose(w("speed").numpy(), expected, rtol=1e-6)
    weights = w("speed")
    assert weights[:tau].min() >= 1 - lam - 1e-6 and weights[:tau].max() <= lam + 1e-6
    assert torch.all(weights[tau:] == 1)
    np.testing.assert_allclose(w("speed", lam=1.0).numpy()[:tau], g_hat[:tau], atol=1e-6)  # lam = 1: g^ itself
    assert torch.all(w("speed", lam=0.5)[:tau] == 0.5)
    assert torch.all(w("speed", after_tau=0.25)[tau:] == 0.25)
    assert torch.all(w("speed", tau=300)[300:] == 1) and w("speed", tau=300)[299] != 1
    assert torch.all(w("speed", "x0") == w("speed", "eps"))  # applies to the MSE term as is
    # tau defaults to 0.7 T for other T
    ab100 = get_schedule("linear", 100)
    assert torch.all(w("speed", ab=ab100)[70:] == 1) and w("speed", ab=ab100)[69] != 1
    np.testing.assert_allclose(finite_difference(1.0 - AB).numpy(), g, rtol=1e-12)


@pytest.mark.parametrize("k, gamma", [(1.0, 1.0), (1.0, 0.5), (2.0, 1.0)])
def test_p2(k, gamma):
    w_eps = 1.0 / (k + SNR) ** gamma
    close(w("p2", "eps", k=k, gamma=gamma), w_eps)
    close(w("p2", "x0", k=k, gamma=gamma), w_eps * SNR)
    close(w("p2", "v", k=k, gamma=gamma), w_eps * AB)


def test_edm():
    sd = 0.5
    sigma2 = (1 - AB) / AB
    w_x0 = (sigma2 + sd**2) / (sigma2 * sd**2)
    close(w("edm", "x0"), w_x0)
    close(w("edm", "eps"), 1 + sigma2 / sd**2)  # = w_x0 / SNR
    close(w("edm", "v"), w_x0 / SNR * AB)
    close(w("edm", "x0", sigma_data=1.0), (sigma2 + 1) / sigma2)


@pytest.mark.parametrize("weighting, message", [
    ({"name": "speed", "params": {"lam": 1.01}}, r"weighting\.params\.lam must be in \[0\.5, 1\.0\]"),
    ({"name": "speed", "params": {"tau": 101}}, r"weighting\.params: tau must be <= T=100"),
    ({"name": "speed", "params": {"tau": -1}}, r"weighting\.params\.tau must be in \[0"),
    ({"name": "min_snr", "params": {"gamma": 0}}, r"weighting\.params\.gamma must be in \(0\.0"),
    ({"name": "p2", "params": {"k": 0}}, r"weighting\.params\.k must be in \(0\.0"),
    ({"name": "edm", "params": {"sigma_data": -0.5}}, r"weighting\.params\.sigma_data must be in"),
    ({"name": "min-snr"}, r"weighting\.name: unknown loss weighting 'min-snr'.*did you mean 'min_snr'"),
])
def test_bad_weighting_parameters_fail_at_config_load(digits_dir, weighting, message):
    with pytest.raises(ConfigError, match=message):
        check_config(tiny_config(digits_dir, weighting=weighting), "run.yaml")
