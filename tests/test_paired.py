"""Paired runs (common random numbers, docs/methods.md §9.1) and the adaptive sampler's VLB closure."""

from __future__ import annotations

import torch
from conftest import tiny_config

from timestep_lab.train.step import StepGenerators, build_train_step


def _record_noise(ts):
    """Wrap ``ts.loss_fn`` so every call's ``(t, noise)`` is recorded."""
    seen, inner = [], ts.loss_fn

    def fn(x0, t, noise):
        seen.append((x0.clone(), t.clone(), noise.clone()))
        return inner(x0, t, noise)

    ts.loss_fn = fn
    return seen


def test_arms_with_one_seed_share_weights_data_and_noise(digits_dir):
    """uniform and speed (inverse CDF) and adaptive (Beta, many draws per sample) with one seed:
    identical initial weights, images and x_t noise; different t."""
    arms = {name: tiny_config(digits_dir, timesteps=spec, data={"hflip": True}) for name, spec in (
        ("uniform", {"name": "uniform"}), ("speed", {"name": "speed", "params": {"k": 5, "dual": True}}),
        ("adaptive", {"name": "adaptive", "params": {"update_every": 2}}))}
    steps = {name: build_train_step(cfg) for name, cfg in arms.items()}
    ref = steps["uniform"].net.state_dict()
    for name, ts in steps.items():
        assert all(torch.equal(ref[k], v) for k, v in ts.net.state_dict().items()), name
    seen = {name: _record_noise(ts) for name, ts in steps.items()}
    for _ in range(3):
        for ts in steps.values():
            ts.step()
    for name in ("speed", "adaptive"):
        for (x_u, t_u, n_u), (x_a, t_a, n_a) in zip(seen["uniform"], seen[name]):
            assert torch.equal(x_u, x_a) and torch.equal(n_u, n_a), name
        assert any(not torch.equal(a[1], b[1]) for a, b in zip(seen["uniform"], seen[name])), name
    # a different seed changes all of it
    other = build_train_step(tiny_config(digits_dir, train={"seed": 1}))
    assert not torch.equal(other.net.state_dict()[next(iter(ref))], next(iter(ref.values())))


def test_step_generators_save_and_restore_every_stream():
    g = StepGenerators(3)
    state = g.get_state()
    a = [torch.rand(4, generator=getattr(g, k)) for k in g.STREAMS]
    g.set_state(state)
    assert all(torch.equal(x, torch.rand(4, generator=getattr(g, k))) for x, k in zip(a, g.STREAMS))
    # the streams are distinct
    assert not torch.equal(a[0], a[1]) and not torch.equal(a[1], a[2])


def test_adaptive_reward_uses_unclipped_estimates_and_the_t0_kl(digits_dir, monkeypatch):
    """The VLB closure feeds ``vlb_terms`` the raw x0 estimate (values beyond [-1, 1] kept) and
    asks for the KL term at t = 0, as the official code does (docs/methods.md §1.4)."""
    ts = build_train_step(tiny_config(digits_dir, timesteps={"name": "adaptive"}))
    calls = []
    real = ts.diffusion.vlb_terms

    def spy(x0, x_t, t, x0_hat, **kw):
        calls.append((x0_hat.clone(), kw))
        return real(x0, x_t, t, x0_hat, **kw)

    monkeypatch.setattr(ts.diffusion, "vlb_terms", spy)
    x0 = ts.loader.batch(torch.arange(8), ts.gen.data)
    t = torch.tensor([0, 0, 1, 2, 50, 90, 99, 99])
    noise = torch.randn(x0.shape, generator=torch.Generator().manual_seed(0)) * 3  # large eps error at big t
    out = ts.vlb_fn(x0, t, noise)
    (x0_hat, kw), = calls
    assert kw == {"t0_term": "kl"}
    assert x0_hat.abs().max() > 1.0  # nothing clamped it
    x_t = ts.diffusion.q_sample(x0, t, noise)
    assert torch.allclose(out, real(x0, x_t, t, x0_hat, t0_term="kl"))
    assert not torch.allclose(out, real(x0, x_t, t, x0_hat.clamp(-1, 1), t0_term="kl"))
