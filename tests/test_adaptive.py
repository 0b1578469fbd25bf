"""The learned Beta sampler (``adaptive``, arXiv 2411.09998, docs/methods.md §1.4)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest
import torch
from conftest import tiny_config
from scipy.special import betainc
from sklearn.feature_selection import SelectKBest, f_regression
from test_samplers import gof_pvalue, run_ranks

from timestep_lab.artifacts.io import load_torch
from timestep_lab.config import dump_config
from timestep_lab.timesteps import make_sampler
from timestep_lab.timesteps.adaptive import beta_entropy, beta_log_prob, sample_beta_logit
from timestep_lab.train import train

T = 1000


def gen(seed=0):
    return torch.Generator().manual_seed(seed)


def images(shape, n=16, seed=0):
    return torch.rand((n, *shape), generator=gen(seed)) * 2 - 1


def fake_vlb(net_state):
    """A stand-in for the training loop's ``vlb_fn``: depends on the image, t, the noise and a
    mutable 'network' (``net_state[0]``), like the real one does; no gradient."""

    def vlb_fn(x0, t, noise):
        x = x0.flatten(1).mean(1) + 0.1 * noise.flatten(1).mean(1)
        return (1.0 + x.abs()) * torch.exp(-t.double() / 300) * net_state[0] + 1e-3 * t.double() * x

    return vlb_fn


def spread_policy(s, seed=3):
    """Give pi_phi's output layer random weights so alpha and beta vary across images."""
    with torch.no_grad():
        g = gen(seed)
        last = s.policy.head[-1]
        last.weight.copy_(torch.randn(last.weight.shape, generator=g) * 20.0)
        last.bias.copy_(torch.tensor([0.3, 1.0]))


def run_updates(s, x0, n_steps, vlb_fn, net_state, **ctx):
    g = gen(11)
    for step in range(n_steps):
        t, _ = s.sample(x0.shape[0], g, x0=x0)
        context = dict(step=step, nimg=step * x0.shape[0], x0=x0, vlb_fn=vlb_fn, **ctx)
        s.before_update(**context)
        net_state[0] *= 0.9  # "training" lowers the loss
        s.update(t, torch.ones(len(t)), **{**context, "step": step + 1})


@pytest.mark.parametrize("shape", [(1, 8, 8), (3, 32, 32), (3, 64, 64), (1, 7, 5)])
def test_any_channels_and_resolution(shape):
    s = make_sampler("adaptive", num_timesteps=T, update_every=1, stride=50)
    x0 = images(shape, n=8)
    t, w = s.sample(8, gen(), x0=x0)
    assert t.shape == (8,) and 0 <= t.min() and t.max() < T and torch.all(w == 1)
    alpha, beta = s.policy(x0)
    torch.testing.assert_close(alpha, torch.full((8,), 0.97408), atol=1e-4, rtol=0)  # softplus(0.5): ~uniform
    torch.testing.assert_close(beta, alpha)
    n_features = s.policy.head[0].in_features
    assert n_features == {(1, 8, 8): 128, (3, 32, 32): 2048, (3, 64, 64): 2048, (1, 7, 5): 128}[shape]
    before = [p.detach().clone() for p in s.policy.parameters()]
    run_updates(s, x0, 3, fake_vlb([1.0]), [1.0])
    assert s.count == 3 and any(not torch.equal(a, b) for a, b in zip(before, s.policy.parameters()))


def test_official_input_size_gives_the_official_network():
    s = make_sampler("adaptive", num_timesteps=T)
    s.sample(2, gen(), x0=images((3, 32, 32), n=2))
    n = sum(p.numel() for p in s.policy.parameters())
    convs = 3 * 9 * 32 + 32 + 32 * 9 * 64 + 64 + 64 * 9 * 128 + 128
    mlp = 2048 * 256 + 256 + 256 * 256 + 256 + 256 * 2 + 2
    assert n == convs + mlp


def pmf(a, b):
    """P(round(u (T - 1)) = t) for u ~ Beta(a, b), ``[T]``."""
    edges = np.clip((np.arange(T + 1) - 0.5) / (T - 1), 0, 1)
    return torch.from_numpy(np.diff(betainc(a, b, edges)))


@pytest.mark.parametrize("a, b", [(0.97, 0.97), (0.3, 2.0), (5.0, 0.6), (40.0, 60.0), (0.05, 0.05)])
def test_beta_draws_from_the_generator_match_the_discretised_beta(a, b):
    n = 40_000
    alpha, beta = torch.full((n,), a, dtype=torch.float64), torch.full((n,), b, dtype=torch.float64)
    state = torch.get_rng_state()
    z = sample_beta_logit(alpha, beta, gen(1))
    assert torch.equal(state, torch.get_rng_state())
    assert torch.equal(z, sample_beta_logit(alpha, beta, gen(1)))
    assert torch.isfinite(z).all() or (a < 0.1)
    t = torch.round(torch.sigmoid(z) * (T - 1)).long()
    assert gof_pvalue(t, pmf(a, b), n_bins=30) > 1e-3


def test_log_prob_and_entropy_match_torch_distributions():
    alpha = torch.tensor([0.5, 1.0, 2.0, 7.0], dtype=torch.float64)
    beta = torch.tensor([0.8, 1.0, 5.0, 0.3], dtype=torch.float64)
    u = torch.tensor([0.1, 0.5, 0.3, 0.97], dtype=torch.float64)
    d = torch.distributions.Beta(alpha, beta)
    torch.testing.assert_close(beta_log_prob(alpha, beta, torch.logit(u)), d.log_prob(u))
    torch.testing.assert_close(beta_entropy(alpha, beta), d.entropy())


def test_probs_is_the_marginal_over_the_batch_mixture():
    s = make_sampler("adaptive", num_timesteps=T)
    x0 = images((1, 8, 8), n=12, seed=4)
    s.sample(12, gen(), x0=x0)
    spread_policy(s)
    alpha, beta = s.policy(x0)
    assert alpha.std() > 0.1 and beta.std() > 0.1  # a real mixture
    # i.i.d. draws from the mixture: one uniformly chosen image out of each copy of the batch
    reps, g, pick = 100, gen(1), gen(2)
    t = torch.cat([s.sample(12 * reps, g, x0=x0.repeat(reps, 1, 1, 1))[0].view(reps, 12)
                   .gather(1, torch.randint(0, 12, (reps, 1), generator=pick)).flatten() for _ in range(60)])
    p = s.probs()  # the last batch: the same 12 images, repeated
    torch.testing.assert_close(p, torch.stack([pmf(a, b) for a, b in zip(alpha.tolist(), beta.tolist())]).mean(0))
    assert abs(p.sum().item() - 1) < 1e-9
    assert gof_pvalue(t, p) > 1e-3
    single = make_sampler("adaptive", num_timesteps=T)
    single.sample(1, gen(), x0=x0[:1])
    assert gof_pvalue(t, single.probs()) < 1e-6  # the test sees the difference from the initial Beta


def test_update_fills_the_buffer_selects_s_by_f_test_and_uses_the_old_s_for_rewards():
    s = make_sampler("adaptive", num_timesteps=100, update_every=2, capacity=4)
    x0 = images((1, 8, 8), n=6)
    seen = []

    def vlb_fn(x0_, t, noise):
        seen.append(t.clone())
        return fake_vlb(state)(x0_, t, noise)

    state = [1.0]
    run_updates(s, x0, 1, vlb_fn, state)
    # step 0: x^ at all 100 timesteps, then 6 images x S = {0, 1, 2}; before and after
    assert len(seen) == 2 and torch.equal(seen[0], seen[1])
    assert torch.equal(seen[0][:100], torch.arange(100)) and torch.equal(seen[0][100:], torch.tensor([0, 1, 2] * 6))
    assert s.count == 1 and s.S.tolist() == [0, 1, 2]  # one entry: no selection yet
    run_updates(s, x0, 9, vlb_fn, state)  # steps 0..8 again -> updates at 0, 2, 4, 6, 8
    assert s.count == 4 and s.pos == (1 + 5) % 4
    X, y = s.buf_delta.numpy(), s.buf_y.numpy()
    np.testing.assert_allclose(y, X.sum(1))
    expected = SelectKBest(f_regression, k=3).fit(X, y).get_support(indices=True)
    assert s.S.tolist() == expected.tolist()


def test_f_test_picks_the_columns_that_predict_y():
    s = make_sampler("adaptive", num_timesteps=50, capacity=20)
    g = gen(2)
    X = torch.randn(20, 50, generator=g, dtype=torch.float64) * 0.01
    X[:, [7, 19, 33]] += torch.randn(20, 3, generator=g, dtype=torch.float64)
    s.buf_delta.copy_(X)
    s.buf_y.copy_(X.sum(1))
    s.count = 20
    assert sorted(s._select_subset().tolist()) == [7, 19, 33]


def test_stride_evaluates_a_grid_and_selects_from_it():
    s = make_sampler("adaptive", num_timesteps=T, update_every=1, stride=25)
    assert s.grid.tolist() == list(range(0, T, 25))
    x0 = images((1, 8, 8), n=4)
    run_updates(s, x0, 4, fake_vlb([1.0]), [1.0])
    assert s.buf_delta.shape == (20, 40) and all(t % 25 == 0 for t in s.S.tolist())


def state_equal(a, b):
    assert a.keys() == b.keys()
    for k in a:
        if isinstance(a[k], torch.Tensor):
            assert torch.equal(a[k], b[k]), k
        elif isinstance(a[k], dict):
            state_equal(a[k], b[k])
        elif isinstance(a[k], list) and a[k] and isinstance(a[k][0], dict):
            for x, y in zip(a[k], b[k]):
                state_equal(x, y)
        else:
            assert a[k] == b[k], k


def test_state_round_trips_through_a_weights_only_checkpoint(tmp_path):
    s = make_sampler("adaptive", num_timesteps=100, update_every=1, stride=5)
    x0 = images((3, 16, 16), n=8)
    run_updates(s, x0, 4, fake_vlb([1.0]), [1.0])
    torch.save(s.state_dict(), tmp_path / "s.pt")
    r = make_sampler("adaptive", num_timesteps=100, update_every=1, stride=5)
    r.load_state_dict(torch.load(tmp_path / "s.pt", weights_only=True))
    state_equal(r.state_dict(), s.state_dict())
    torch.testing.assert_close(r.probs(), s.probs())
    # both continue identically
    run_updates(s, x0, 3, fake_vlb([0.5]), [0.5])
    run_updates(r, x0, 3, fake_vlb([0.5]), [0.5])
    state_equal(r.state_dict(), s.state_dict())


def test_ddp_ranks_compute_the_same_update(tmp_path):
    """Two ranks, each with its shard, a gather that concatenates in rank order: every rank ends
    with the bitwise-identical sampler (network, Adam, S, buffer), and it matches one process."""
    B, world = 8, 2
    x0 = images((1, 8, 8), n=B, seed=5)

    def run(rank, gather):
        s = make_sampler("adaptive", num_timesteps=100, update_every=2, stride=3)
        shard = slice(rank * B // world, (rank + 1) * B // world)
        run_updates(s, x0, 7, fake_vlb([1.0]), [1.0], gather=gather, world_size=world, shard=shard)
        return s

    r0, r1 = run_ranks(world, run)
    state_equal(r0.state_dict(), r1.state_dict())
    single = make_sampler("adaptive", num_timesteps=100, update_every=2, stride=3)
    run_updates(single, x0, 7, fake_vlb([1.0]), [1.0])
    assert r0.S.tolist() == single.S.tolist()
    torch.testing.assert_close(r0.buf_delta, single.buf_delta, rtol=1e-12, atol=1e-15)
    for a, b in zip(r0.policy.parameters(), single.policy.parameters()):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-6)


def test_resumed_training_run_is_bit_identical(digits_dir, tmp_path):
    cfg = tiny_config(digits_dir, timesteps={"name": "adaptive", "params": {"update_every": 3, "stride": 4}})
    full = train(cfg, tmp_path / "full", progress=False)
    part = train(cfg, tmp_path / "part", progress=False, stop_after_kimg=0.32)
    assert part.status == "incomplete"
    ckpt = load_torch(tmp_path / "part" / "train_state" / "checkpoint.pt")
    assert ckpt["sampler"]["count"] > 0 and ckpt["sampler"]["policy"] is not None
    train(cfg, tmp_path / "part", progress=False)
    a, b = load_torch(full.model_path), load_torch(tmp_path / "part" / "model.pt")
    for key in ("model", "ema"):
        for k in a[key]:
            assert torch.equal(a[key][k], b[key][k]), (key, k)
    sa = load_torch(tmp_path / "full" / "train_state" / "checkpoint.pt")["sampler"]
    sb = load_torch(tmp_path / "part" / "train_state" / "checkpoint.pt")["sampler"]
    state_equal(sa, sb)
    log = [json.loads(line) for line in (tmp_path / "part" / "train_log.jsonl").read_text().splitlines()]
    assert all(len(r["sampler"]["p_bins"]) == 10 for r in log)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["adaptive", "loss_second_moment"])
def test_two_process_gloo_run_matches_one_process(digits_dir, tmp_path, name):
    params = {"adaptive": {"update_every": 2, "stride": 5}, "loss_second_moment": {"history": 1}}[name]
    cfg = tiny_config(digits_dir, timesteps={"name": name, "params": params},
                      train={"total_kimg": 0.32, "log_every_kimg": 0.064, "batch_size": 32})
    dump_config(cfg, tmp_path / "run.yaml")
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    base = ["-m", "timestep_lab", "train", "--config", str(tmp_path / "run.yaml"), "--no-progress", "--threads", "1"]
    subprocess.run([sys.executable, *base, "--out", str(tmp_path / "one")], env=env, check=True, capture_output=True)
    two = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2", *base,
           "--out", str(tmp_path / "two")]
    r = subprocess.run(two, env=env, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-3000:]
    l1 = [x["loss"] for x in map(json.loads, (tmp_path / "one" / "train_log.jsonl").read_text().splitlines())]
    l2 = [x["loss"] for x in map(json.loads, (tmp_path / "two" / "train_log.jsonl").read_text().splitlines())]
    assert l1 == pytest.approx(l2, rel=1e-4)
    s1 = load_torch(tmp_path / "one" / "train_state" / "checkpoint.pt")["sampler"]
    s2 = load_torch(tmp_path / "two" / "train_state" / "checkpoint.pt")["sampler"]
    for k, v in s1.items():
        if isinstance(v, torch.Tensor) and v.is_floating_point():
            # buffers of loss *decreases* (differences of VLB sums, unclipped since the official
            # code does not clip): float32 reduction order changes them by ~1e-4 of the terms'
            # scale, so the absolute tolerance follows the buffer's scale, not each difference's
            scale = float(v.abs().max()) if v.numel() else 0.0
            torch.testing.assert_close(v, s2[k], rtol=1e-4, atol=max(1e-6, 1e-4 * scale))
        elif isinstance(v, torch.Tensor):
            assert torch.equal(v, s2[k]), k


def test_a_non_finite_loss_decrease_skips_the_update_instead_of_poisoning_the_policy():
    s = make_sampler("adaptive", num_timesteps=100, update_every=1)
    x0 = images((1, 8, 8), n=6)
    state = [1.0]
    run_updates(s, x0, 1, fake_vlb(state), state)
    before = [p.detach().clone() for p in s.policy.parameters()]
    count = s.count

    def inf_after(x0_, t, noise):  # e.g. a decoder NLL that overflowed
        out = fake_vlb(state)(x0_, t, noise)
        return out if state[0] > 0.5 else torch.full_like(out, float("inf"))

    state[0] = 0.4
    with pytest.warns(UserWarning, match="non-finite loss decrease"):
        s.before_update(step=5, nimg=0, x0=x0, vlb_fn=fake_vlb([1.0]))
        s.update(torch.zeros(6, dtype=torch.long), torch.ones(6), step=6, nimg=0, x0=x0, vlb_fn=inf_after)
    assert s.count == count
    assert all(torch.equal(a, b) for a, b in zip(before, s.policy.parameters()))
    t, _ = s.sample(6, gen(1), x0=x0)
    assert ((t >= 0) & (t < 100)).all()
