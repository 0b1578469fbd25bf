import math

import numpy as np
import pytest
import torch

from timestep_lab.config import ConfigError
from timestep_lab.processes.schedules import alpha_bar_from_betas, betas_from_alpha_bar, get_schedule


def test_linear_matches_ddpm_closed_form():
    ab = get_schedule("linear", 1000)
    betas = np.linspace(1e-4, 0.02, 1000)
    assert ab.dtype == torch.float64 and ab.shape == (1000,)
    np.testing.assert_allclose(ab.numpy(), np.cumprod(1 - betas), rtol=1e-12)
    # DDPM's well-known end point: alpha_bar_T ~ 4.04e-5
    assert ab[-1].item() == pytest.approx(4.0358e-5, rel=1e-3)


def test_linear_rescales_for_other_T():
    ab = get_schedule("linear", 100)
    betas = np.linspace(1e-4 * 10, 0.02 * 10, 100)
    np.testing.assert_allclose(ab.numpy(), np.cumprod(1 - betas), rtol=1e-12)


def test_quad_and_scaled_linear():
    ab = get_schedule("quad", 1000)
    betas = np.linspace(math.sqrt(1e-4), math.sqrt(0.02), 1000) ** 2
    np.testing.assert_allclose(ab.numpy(), np.cumprod(1 - betas), rtol=1e-12)
    ab = get_schedule("scaled_linear", 1000)
    betas = np.linspace(math.sqrt(0.00085), math.sqrt(0.012), 1000) ** 2
    np.testing.assert_allclose(ab.numpy(), np.cumprod(1 - betas), rtol=1e-12)


def test_cosine_matches_iddpm_formula():
    T, s = 1000, 0.008
    ab = get_schedule("cosine", T).numpy()
    f = lambda t: math.cos((t / T + s) / (1 + s) * math.pi / 2) ** 2  # noqa: E731
    # away from the clipped end, alpha_bar_t = f(t+1)/f(0) with 0-based t
    for t in (0, 1, 100, 500, 900):
        assert ab[t] == pytest.approx(f(t + 1) / f(0), rel=1e-9)
    betas = betas_from_alpha_bar(torch.from_numpy(ab))
    assert betas.max().item() <= 0.999 + 1e-12


@pytest.mark.parametrize("name", ["linear", "cosine", "quad", "scaled_linear"])
def test_schedules_are_valid(name):
    ab = get_schedule(name, 1000)
    assert torch.all(ab > 0) and torch.all(ab < 1)
    assert torch.all(ab[1:] < ab[:-1])
    torch.testing.assert_close(alpha_bar_from_betas(betas_from_alpha_bar(ab)), ab)


def test_unknown_schedule_and_bad_params_are_config_errors():
    with pytest.raises(ConfigError, match="unknown noise schedule 'linaer'.*did you mean 'linear'"):
        get_schedule("linaer", 1000)
    with pytest.raises(ConfigError, match="params.beta_end"):
        get_schedule("linear", 1000, beta_start=0.02, beta_end=0.01)
