import torch

from timestep_lab.processes.diffusion import GaussianDiffusion
from timestep_lab.processes.predictions import make_prediction
from timestep_lab.processes.schedules import get_schedule

D = GaussianDiffusion(get_schedule("linear", 1000))


def batch(seed=0):
    g = torch.Generator().manual_seed(seed)
    x0 = torch.rand(6, 1, 4, 4, generator=g) * 2 - 1
    eps = torch.randn(6, 1, 4, 4, generator=g)
    t = torch.tensor([0, 1, 50, 400, 800, 999])
    return x0, eps, t, D.q_sample(x0, t, eps)


def test_perfect_predictions_have_zero_loss_and_exact_estimates():
    x0, eps, t, x_t = batch()
    targets = {"eps": eps, "x0": x0, "v": D.v_from_x0_eps(x0, t, eps)}
    for name, target in targets.items():
        p = make_prediction(name)
        assert torch.allclose(p.loss(target, x0, eps, x_t, t, D).loss, torch.zeros(6), atol=1e-10)
        x0_hat, eps_hat = p.estimates(target, x_t, t, D)
        torch.testing.assert_close(x0_hat[2:], x0[2:], atol=1e-3, rtol=1e-3)  # eps->x0 is ill-conditioned at t~0
        torch.testing.assert_close(eps_hat[:5], eps[:5], atol=1e-3, rtol=1e-3)


def test_mixed_picks_the_head_with_smallest_x0_error_and_only_it_gets_gradient():
    x0, eps, t, x_t = batch(1)
    p = make_prediction("mixed", num_timesteps=1000)
    v = D.v_from_x0_eps(x0, t, eps)
    good_x0 = x0 + 0.01
    out = torch.cat([eps + 0.5, good_x0, v + 5.0], dim=1).requires_grad_(True)
    res = p.loss(out, x0, eps, x_t, t, D)
    # near t = 0 the eps head's x0 error is tiny (scaled by sqrt((1-ab)/ab)); elsewhere x0 wins
    assert res.head.tolist()[0] == 0 and all(h == 1 for h in res.head.tolist()[2:])
    res.loss.sum().backward()
    g = out.grad
    assert torch.all(g[2:, 0] == 0) and torch.all(g[2:, 2] == 0) and torch.any(g[2:, 1] != 0)
    errors = p.head_errors(out.detach(), x0, x_t, t, D)
    torch.testing.assert_close(res.loss.detach(), errors.min(0).values)


def test_mixed_inference_uses_head_table():
    x0, eps, t, x_t = batch(2)
    p = make_prediction("mixed", num_timesteps=1000)
    v = D.v_from_x0_eps(x0, t, eps)
    out = torch.cat([torch.zeros_like(eps), x0, v], dim=1)
    p.head_per_t[:] = 1
    torch.testing.assert_close(p.estimates(out, x_t, t, D)[0], x0)
    p.head_per_t[:] = 2
    torch.testing.assert_close(p.estimates(out, x_t, t, D)[0], x0, atol=1e-5, rtol=1e-5)
