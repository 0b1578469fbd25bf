"""Timestep samplers (docs/methods.md §1): marginals, importance weights, state, config errors, smoke runs.

Goodness of fit: draws are binned into consecutive t-ranges of about equal probability under the
sampler's ``probs()`` and compared with ``scipy.stats.chisquare``. Samplers whose draws inside a
batch are dependent (SpeeD's dual pairs, stratified slot_balanced) are tested on one uniformly
chosen position per batch, which is an i.i.d. draw from the batch-averaged marginal.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import tiny_config
from scipy.stats import chisquare

from timestep_lab.components import check_config
from timestep_lab.config import ConfigError
from timestep_lab.processes.schedules import get_schedule
from timestep_lab.timesteps import SAMPLERS, make_sampler
from timestep_lab.timesteps.slots import PAPER_SLOTS, default_slots
from timestep_lab.timesteps.speed import dual_offset
from timestep_lab.train import train

T = 1000
AB = get_schedule("linear", T)


def gen(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def draws(sampler, n_batches: int, batch: int, seed: int = 0, x0=None) -> torch.Tensor:
    g = gen(seed)
    return torch.cat([sampler.sample(batch, g, x0=x0)[0] for _ in range(n_batches)])


def one_position_per_batch(sampler, n_batches: int, batch: int, seed: int = 0, x0=None) -> torch.Tensor:
    """i.i.d. draws from the batch-averaged marginal: the t at a uniformly chosen position."""
    g, pick = gen(seed), gen(seed + 1)
    pos = torch.randint(0, batch, (n_batches,), generator=pick)
    return torch.stack([sampler.sample(batch, g, x0=x0)[0][j] for j in pos.tolist()])


def gof_pvalue(t: torch.Tensor, p: torch.Tensor, n_bins: int = 40) -> float:
    """Chi-square p-value of the draws ``t`` against ``p [T]`` on ~equal-probability bins."""
    p = p.double() / p.sum()
    counts = torch.bincount(t, minlength=len(p)).double()
    assert counts[p == 0].sum() == 0, "drew a timestep whose probability is 0"
    obs, exp, o, e = [], [], 0.0, 0.0
    for i in range(len(p)):
        o, e = o + counts[i].item(), e + p[i].item()
        if e >= 1.0 / n_bins:
            obs.append(o), exp.append(e)
            o, e = 0.0, 0.0
    if e > 0 or o > 0:
        obs[-1], exp[-1] = obs[-1] + o, exp[-1] + e
    exp = np.array(exp) / sum(exp) * len(t)
    assert exp.min() >= 5, exp.min()
    return float(chisquare(np.array(obs), exp).pvalue)


def warm_loss_second_moment(T: int = T, seed: int = 0, **params):
    """A loss_second_moment sampler whose history is full and far from uniform."""
    s = make_sampler("loss_second_moment", num_timesteps=T, **params)
    g = gen(seed)
    for _ in range(200):
        t = torch.randint(0, T, (256,), generator=g)
        loss = (1.0 + 9.0 * (t < T // 4)) * torch.rand(256, generator=g)  # small t: 10x the loss
        s.update(t, loss)
    assert bool((s.counts == s.history).all())
    return s


# ---------------------------------------------------------------------------- every sampler


def build(name: str, T: int = T):
    return make_sampler(name, num_timesteps=T, alpha_bar=get_schedule("linear", T))


@pytest.mark.parametrize("name", SAMPLERS.names())
def test_probs_is_a_distribution_and_sample_has_the_interface_shape(name):
    s = build(name)
    p = s.probs()
    assert p.shape == (T,) and p.dtype == torch.float64
    assert torch.all(p >= 0) and abs(p.sum().item() - 1.0) < 1e-9
    x0 = torch.rand(64, 1, 8, 8) * 2 - 1
    t, w = s.sample(64, gen(), x0=x0)
    assert t.dtype == torch.long and t.shape == (64,) and w.shape == (64,)
    assert 0 <= int(t.min()) and int(t.max()) < T
    torch.testing.assert_close(w.double(), s.importance_table()[t], rtol=1e-6, atol=0)
    assert abs((p * s.importance_table()).sum().item() - 1.0) < 1e-9  # mean importance weight 1, exactly


@pytest.mark.parametrize("name", SAMPLERS.names())
def test_sample_uses_only_the_given_generator(name):
    x0 = torch.rand(32, 1, 8, 8) * 2 - 1
    state = torch.get_rng_state()
    a = build(name).sample(32, gen(5), x0=x0)[0]
    b = build(name).sample(32, gen(5), x0=x0)[0]
    assert torch.equal(a, b)
    assert torch.equal(state, torch.get_rng_state()), "sample() touched the global RNG"


# ---------------------------------------------------------------------------- goodness of fit

IID_CASES = {  # case: (sampler, params, T)
    "uniform": ("uniform", {}, T),
    "speed_no_dual": ("speed", {"dual": False}, T),
    "toward_zero": ("toward_zero", {}, T),
    "toward_zero_scale40": ("toward_zero", {"scale": 40.0}, T),
    "logit_normal": ("logit_normal", {}, T),
    "logit_normal_shifted": ("logit_normal", {"m": 1.0, "s": 0.5}, T),
    "lognormal": ("lognormal", {}, T),
    "slots": ("slots", {"active": [3, 5, 7, 9]}, T),
    "slots_t100": ("slots", {"active": [1, 10]}, 100),
    "slot_balanced_iid": ("slot_balanced", {"stratified": False}, T),
    "mode": ("mode", {}, T),
    "mode_ends": ("mode", {"scale": -0.8}, T),
    "cosmap": ("cosmap", {}, T),
    "laplace": ("laplace", {}, T),
    "cauchy_shifted": ("cauchy", {"mu": 2.0, "gamma": 0.5}, T),
    "shift_uniform": ("shift", {"shift": 3.0}, T),
    "shift_logit_normal_down": ("shift", {"base": {"name": "logit_normal", "params": {"m": 0.5}}, "shift": 0.4}, 100),
    "curriculum": ("curriculum", {}, T),
}


#: samplers whose histogram is tested by a test of their own (draws inside a batch dependent, or a
#: state to build first), not through IID_CASES
OWN_HISTOGRAM_TESTS = {
    "loss_second_moment": "test_loss_second_moment_histogram_matches_probs",
    "clts": "test_clts_histogram_matches_probs_at_its_progress",
    "slot_balanced": "test_slot_balanced_stratified_histogram_matches_probs",
    "speed": "test_speed_dual_marginal_matches_draws_and_differs_from_the_plain_pdf",
    "adaptive": "tests/test_adaptive.py",
    "sigmoid": "tests/test_flow_trainers.py",
    "inverted_parabola": "tests/test_flow_trainers.py",
    "beta": "tests/test_flow_trainers.py",
    "truncate": "tests/test_flow_trainers.py",
}


@pytest.mark.parametrize("case", sorted(IID_CASES))
def test_histogram_matches_probs(case):
    name, params, n_t = IID_CASES[case]
    s = make_sampler(name, num_timesteps=n_t, alpha_bar=get_schedule("linear", n_t), **params)
    assert gof_pvalue(draws(s, 100, 400), s.probs()) > 1e-3


def test_lognormal_histogram_on_the_cosine_schedule():
    s = make_sampler("lognormal", num_timesteps=T, alpha_bar=get_schedule("cosine", T), P_mean=0.5, P_std=2.0)
    assert gof_pvalue(draws(s, 100, 400), s.probs()) > 1e-3


def test_loss_second_moment_histogram_matches_probs():
    s = warm_loss_second_moment()
    p = s.probs()
    assert p[: T // 4].mean() > 5 * p[T // 2:].mean()
    assert gof_pvalue(draws(s, 100, 400), p) > 1e-3


def test_clts_histogram_matches_probs_at_its_progress():
    s = make_sampler("clts", num_timesteps=T, horizon_kimg=10.0)
    s.update(torch.zeros(1, dtype=torch.long), torch.zeros(1), nimg=7_000)
    assert gof_pvalue(draws(s, 100, 400), s.probs()) > 1e-3


def test_slot_balanced_stratified_histogram_matches_probs():
    s = make_sampler("slot_balanced", num_timesteps=T)
    assert gof_pvalue(one_position_per_batch(s, 8_000, 13), s.probs()) > 1e-3


@pytest.mark.parametrize("batch", [6, 7, 64])
def test_speed_dual_marginal_matches_draws_and_differs_from_the_plain_pdf(batch):
    s = make_sampler("speed", num_timesteps=T, alpha_bar=AB)
    t = one_position_per_batch(s, 20_000, batch)
    assert gof_pvalue(t, s.probs(batch)) > 1e-3
    plain = make_sampler("speed", num_timesteps=T, dual=False).probs()
    assert (s.probs(batch) - plain).abs().sum() > 0.05
    assert gof_pvalue(t, plain) < 1e-6  # the test can tell the dual marginal from the undualised pdf


def test_speed_marginal_depends_on_batch_parity_and_is_the_last_batch_by_default():
    s = make_sampler("speed", num_timesteps=T, alpha_bar=AB)
    p6, p7, p64 = s.probs(6), s.probs(7), s.probs(64)
    assert (p6 - p7).abs().sum() > 0.01 and (p64 - p6).abs().sum() > 0.01
    s.sample(7, gen())
    torch.testing.assert_close(s.probs(), p7)
    # closed form: B = 6 keeps 4 draws and 2 partners, B = 7 keeps 4 and 3
    torch.testing.assert_close(p6, (4 * s.p + 2 * s.q) / 6)
    torch.testing.assert_close(p7, (4 * s.p + 3 * s.q) / 7)
    torch.testing.assert_close(s.probs(1), s.p)
    torch.testing.assert_close(s.probs(2), s.p)


def test_speed_pdf_pairing_and_threshold_follow_the_official_code():
    s = make_sampler("speed", num_timesteps=T, alpha_bar=AB)
    k, tau = 5.0, 700
    Z = T + tau * (k - 1)
    assert s.tau == tau and s.k == k and s.dual
    torch.testing.assert_close(s.p[:tau], torch.full((tau,), k / Z, dtype=torch.float64))
    torch.testing.assert_close(s.p[tau:], torch.full((T - tau,), 1 / Z, dtype=torch.float64))
    sqrt_1m = np.sqrt(1.0 - AB.double().numpy())
    m = int(np.argmax(np.gradient(sqrt_1m) < 1e-4)) + 1  # the official meaningful_steps
    assert dual_offset(AB) == m == s.m
    t = torch.tensor([0, 5, m - 1, m, m + 7, T - 1])
    assert s.pair[t].tolist() == [m, m - 5, 1, 0, 7, T - 1 - m]
    # the batch is [t, d(t)] truncated to B
    t, _ = s.sample(10, gen(3))
    first = t[:6]
    assert torch.equal(t[6:], s.pair[first][:4])
    # scaled default for other T; a schedule whose gradient never gets below 1e-4 uses m = T - 1
    assert make_sampler("speed", num_timesteps=100, alpha_bar=get_schedule("cosine", 100)).m == 99
    assert make_sampler("speed", num_timesteps=100, alpha_bar=get_schedule("linear", 100)).tau == 70


# ---------------------------------------------------------------------------- importance weights


@pytest.mark.parametrize("which", ["loss_second_moment", "slot_balanced", "slot_balanced_iid"])
def test_weighted_loss_is_unbiased_for_the_uniform_loss(which):
    if which == "loss_second_moment":
        s = warm_loss_second_moment()
    else:
        s = make_sampler("slot_balanced", num_timesteps=T, stratified=which == "slot_balanced")
    p, w = s.probs(), s.importance_table()
    assert not torch.allclose(p, torch.full_like(p, 1 / T))  # a non-trivial distribution
    L = 1.0 + torch.cos(torch.arange(T, dtype=torch.float64) / 50) + 30.0 * torch.exp(-torch.arange(T) / 20.0)
    assert abs((p * w).sum().item() - 1.0) < 1e-12
    assert abs((p * w * L).sum().item() - L.mean().item()) < 1e-9 * L.mean().item()
    # empirically, with the weights sample() returns
    g = gen(7)
    ws, wl = [], []
    for _ in range(200):
        t, wt = s.sample(500, g)
        ws.append(wt.double()), wl.append(wt.double() * L[t])
    ws, wl = torch.cat(ws), torch.cat(wl)
    assert abs(ws.mean().item() - 1.0) < 4 * ws.std().item() / len(ws) ** 0.5 + 1e-3
    assert abs(wl.mean().item() - L.mean().item()) < 4 * wl.std().item() / len(wl) ** 0.5


def test_slot_balanced_biased_variant_has_unit_weights():
    s = make_sampler("slot_balanced", num_timesteps=T, unbiased=False)
    assert torch.all(s.sample(50, gen())[1] == 1)


# ---------------------------------------------------------------------------- loss_second_moment


class ReferenceLossSecondMoment:
    """improved-diffusion's LossSecondMomentResampler, sequential, with int64 counts."""

    def __init__(self, T, history=10, uniform_prob=0.001):
        self.T, self.h, self.u = T, history, uniform_prob
        self.hist = np.zeros((T, history), dtype=np.float64)
        self.count = np.zeros(T, dtype=np.int64)

    def probs(self):
        if not (self.count == self.h).all():
            return np.full(self.T, 1.0 / self.T)
        w = np.sqrt(np.mean(self.hist**2, axis=-1))
        w = w / w.sum()
        return w * (1 - self.u) + self.u / self.T

    def update(self, ts, losses):
        for t, loss in zip(ts, losses):
            if self.count[t] == self.h:
                self.hist[t, :-1] = self.hist[t, 1:]
                self.hist[t, -1] = loss
            else:
                self.hist[t, self.count[t]] = loss
                self.count[t] += 1


def test_loss_second_moment_matches_the_sequential_reference_with_duplicates():
    n_t, H = 7, 3
    ours = make_sampler("loss_second_moment", num_timesteps=n_t, history=H, uniform_prob=0.01)
    ref = ReferenceLossSecondMoment(n_t, H, 0.01)
    g = gen(1)
    for step in range(40):
        b = int(torch.randint(1, 30, (1,), generator=g))
        t = torch.randint(0, n_t, (b,), generator=g)  # many duplicates, often more than H of one t
        loss = torch.rand(b, generator=g, dtype=torch.float64) * (1 + t)
        ours.update(t, loss)
        ref.update(t.tolist(), loss.tolist())
        np.testing.assert_allclose(ours.probs().numpy(), ref.probs(), rtol=1e-12, atol=1e-15)
        assert ours.counts.tolist() == ref.count.tolist() and ours.counts.dtype == torch.int64
        np.testing.assert_allclose(np.sort(ours.losses.numpy(), 1), np.sort(ref.hist, 1), rtol=0, atol=0)


def test_loss_second_moment_is_uniform_until_every_history_is_full():
    s = make_sampler("loss_second_moment", num_timesteps=5, history=2)
    s.update(torch.tensor([0, 0, 1, 1, 2, 2, 3, 3, 4]), torch.tensor([1.0, 1, 2, 2, 3, 3, 4, 4, 5]))
    torch.testing.assert_close(s.probs(), torch.full((5,), 0.2, dtype=torch.float64))
    s.update(torch.tensor([4]), torch.tensor([5.0]))
    expected = 0.999 * torch.arange(1, 6, dtype=torch.float64) / 15 + 0.001 / 5
    torch.testing.assert_close(s.probs(), expected)


def test_loss_second_moment_state_round_trips_through_a_weights_only_checkpoint(tmp_path):
    s = warm_loss_second_moment(T=50)
    torch.save(s.state_dict(), tmp_path / "s.pt")
    r = make_sampler("loss_second_moment", num_timesteps=50)
    r.load_state_dict(torch.load(tmp_path / "s.pt", weights_only=True))
    torch.testing.assert_close(r.probs(), s.probs(), rtol=0, atol=0)
    assert torch.equal(r.sample(100, gen(2))[0], s.sample(100, gen(2))[0])


def run_ranks(world: int, fn):
    """Run ``fn(rank, gather)`` in ``world`` threads; ``gather`` concatenates every rank's
    tensor in rank order (what ``World.gather`` does across processes)."""
    barrier, slots, results, errors = threading.Barrier(world), [None] * world, [None] * world, []

    def gather(x):
        rank = threading.current_thread().rank
        slots[rank] = x.clone()
        barrier.wait()
        out = torch.cat(slots)
        barrier.wait()
        return out

    def target(rank):
        threading.current_thread().rank = rank
        try:
            results[rank] = fn(rank, gather)
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)
            barrier.abort()

    threads = [threading.Thread(target=target, args=(r,)) for r in range(world)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    if errors:
        raise errors[0]
    return results


def test_loss_second_moment_ddp_ranks_apply_the_same_update_as_one_process():
    B, world, n_t = 48, 2, 20
    g = gen(4)
    batches = [(torch.randint(0, n_t, (B,), generator=g), torch.rand(B, generator=g)) for _ in range(30)]

    def rank_fn(rank, gather):
        s = make_sampler("loss_second_moment", num_timesteps=n_t, history=4)
        shard = slice(rank * B // world, (rank + 1) * B // world)
        for t, loss in batches:
            s.update(t[shard], loss[shard], gather=gather, world_size=world, shard=shard)
        return s

    r0, r1 = run_ranks(world, rank_fn)
    single = make_sampler("loss_second_moment", num_timesteps=n_t, history=4)
    for t, loss in batches:
        single.update(t, loss)
    for s in (r0, r1):
        assert torch.equal(s.losses, single.losses) and torch.equal(s.seen, single.seen)
    assert not torch.allclose(single.probs(), torch.full((n_t,), 1 / n_t, dtype=torch.float64))


# ---------------------------------------------------------------------------- clts, slots, others


def test_clts_follows_its_curriculum_and_caps_the_mixing_weight():
    s = make_sampler("clts", num_timesteps=T, horizon_kimg=10.0)
    torch.testing.assert_close(s.probs(), torch.full((T,), 1 / T, dtype=torch.float64))
    t = torch.arange(T, dtype=torch.float64)
    gauss = torch.exp(-0.5 * ((t - 300) / 200) ** 2)
    gauss /= gauss.sum()
    for nimg, lam in ((5_000, 0.4), (10_000, 0.8), (50_000, 0.8)):
        s.update(torch.zeros(1, dtype=torch.long), torch.zeros(1), nimg=nimg)
        torch.testing.assert_close(s.probs(), (1 - lam) / T + lam * gauss)
    assert s.probs()[-1] < s.probs()[300] / 5  # timesteps near T are drawn less and less
    r = make_sampler("clts", num_timesteps=T, horizon_kimg=10.0)
    r.load_state_dict(s.state_dict())
    torch.testing.assert_close(r.probs(), s.probs())


def test_paper_slots_are_the_default_and_scale_to_other_T():
    assert default_slots(1000) == PAPER_SLOTS
    for n_t in (10, 100, 250, 4000):
        slots = default_slots(n_t)
        assert slots[0][0] == 0 and slots[-1][1] == n_t - 1 and len(slots) == 10
        assert all(b[0] == a[1] + 1 and a[0] <= a[1] for a, b in zip(slots, slots[1:]))
    s = make_sampler("slots", num_timesteps=T, active=[1, 3])  # 1-based
    support = torch.nonzero(s.probs()).flatten().tolist()
    assert support == list(range(0, 5)) + list(range(13, 23))
    custom = make_sampler("slots", num_timesteps=100, slots=[[0, 9], [50, 59]], active=[2])
    assert torch.nonzero(custom.probs()).flatten().tolist() == list(range(50, 60))


def test_slot_balanced_covers_every_slot_evenly_in_each_batch():
    s = make_sampler("slot_balanced", num_timesteps=T)
    g = gen(2)
    edges = torch.tensor([lo for lo, _ in PAPER_SLOTS[1:]])
    for batch in (10, 13, 64, 7):
        t, w = s.sample(batch, g)
        counts = torch.bincount(torch.bucketize(t, edges, right=True), minlength=10)
        assert counts.max() - counts.min() <= 1 and counts.sum() == batch
    sizes = torch.tensor([hi - lo + 1 for lo, hi in PAPER_SLOTS], dtype=torch.float64)
    expected = torch.repeat_interleave(1.0 / (10 * sizes), sizes.long())
    torch.testing.assert_close(s.probs(), expected)
    torch.testing.assert_close(s.importance_table(), 1.0 / (T * expected))


def test_toward_zero_logit_normal_and_lognormal_follow_their_formulas():
    from scipy.stats import norm

    tz = make_sampler("toward_zero", num_timesteps=T, scale=150.0)
    e = np.exp(-np.arange(T) / 150.0)
    np.testing.assert_allclose(tz.probs().numpy(), e / e.sum(), rtol=1e-12)
    assert make_sampler("toward_zero", num_timesteps=T).scale == 150.0

    ln = make_sampler("logit_normal", num_timesteps=T, m=0.3, s=0.8)
    i = np.arange(T)
    with np.errstate(divide="ignore"):
        lo, hi = np.log(i / T) - np.log1p(-i / T), np.log((i + 1) / T) - np.log1p(-(i + 1) / T)
    np.testing.assert_allclose(ln.probs().numpy(), norm.cdf((hi - 0.3) / 0.8) - norm.cdf((lo - 0.3) / 0.8), atol=1e-12)

    edm = make_sampler("lognormal", num_timesteps=T, alpha_bar=AB)
    ab = AB.double().numpy()
    log_sigma = 0.5 * np.log((1 - ab) / ab)
    g = gen(9)
    ln_sigma = -1.2 + 1.2 * torch.randn(2000, generator=gen(9), dtype=torch.float64)
    nearest = np.abs(ln_sigma.numpy()[:, None] - log_sigma[None, :]).argmin(1)
    assert edm.sample(2000, g)[0].tolist() == nearest.tolist()  # nearest t in log-sigma space
    assert edm.probs()[0] > 0 and edm.probs()[-1] > 0  # tails collected at both ends


# ---------------------------------------------------------------------------- config errors


@pytest.mark.parametrize("timesteps, weighting, message", [
    ({"name": "unifrom"}, None, r"timesteps\.name: unknown timestep sampler 'unifrom'.*did you mean 'uniform'"),
    ({"name": "speed", "params": {"k": 0}}, None, r"timesteps\.params\.k must be in \(0\.0, inf"),
    ({"name": "speed", "params": {"k": -1.0}}, None, r"timesteps\.params\.k must be in"),
    ({"name": "speed", "params": {"lam": 0.6}}, None, r"unknown key 'timesteps\.params\.lam'"),
    ({"name": "speed", "params": {"tau": 101}}, None, r"timesteps\.params: tau must be <= num_timesteps=100"),
    ({"name": "uniform"}, {"name": "speed", "params": {"lam": 1.5}}, r"weighting\.params\.lam must be in \[0\.5, 1\.0\]"),
    ({"name": "uniform"}, {"name": "speed", "params": {"lam": 0.4}}, r"weighting\.params\.lam must be in \[0\.5, 1\.0\]"),
    ({"name": "slots", "params": {"active": []}}, None, r"timesteps\.params\.active must name at least one slot"),
    ({"name": "slots", "params": {"active": [0]}}, None, r"timesteps\.params\.active must be in \[1, 10\], got 0"),
    ({"name": "slots", "params": {"active": [11]}}, None, r"timesteps\.params\.active must be in \[1, 10\]"),
    ({"name": "slots", "params": {"active": [1], "slots": [[0, 9], [5, 20]]}}, None,
     r"timesteps\.params\.slots must be sorted and non-overlapping"),
    ({"name": "slots", "params": {"active": [1], "slots": [[5, 2]]}}, None, r"timesteps\.params\.slots must be inclusive"),
    ({"name": "slots", "params": {"active": [1], "slots": [[0, 150]]}}, None,
     r"timesteps\.params: slots must lie in \[0, T-1\] = \[0, 99\]"),
    ({"name": "slot_balanced", "params": {"slots": [[0, 9], [20, 99]]}}, None,
     r"timesteps\.params: slots must cover \[0, 99\] without gaps"),
    ({"name": "slot_balanced", "params": {"slots": "all"}}, None, r"timesteps\.params\.slots: expected"),
    ({"name": "loss_second_moment", "params": {"history": 0}}, None, r"timesteps\.params\.history must be in \[1, inf\]"),
    ({"name": "loss_second_moment", "params": {"uniform_prob": 1.5}}, None, r"timesteps\.params\.uniform_prob must be in"),
    ({"name": "clts", "params": {"lambda_max": 1.2}}, None, r"timesteps\.params\.lambda_max must be in \[0\.0, 1\.0\]"),
    ({"name": "clts", "params": {"horizon_kimg": 0}}, None, r"timesteps\.params\.horizon_kimg must be in \(0\.0"),
    ({"name": "clts", "params": {"sigma": -1}}, None, r"timesteps\.params\.sigma must be in"),
    ({"name": "toward_zero", "params": {"scale": 0}}, None, r"timesteps\.params\.scale must be in"),
    ({"name": "logit_normal", "params": {"s": 0}}, None, r"timesteps\.params\.s must be in"),
    ({"name": "lognormal", "params": {"P_std": -1}}, None, r"timesteps\.params\.P_std must be in"),
    ({"name": "adaptive", "params": {"update_every": 0}}, None, r"timesteps\.params\.update_every must be in \[1, inf\]"),
    ({"name": "adaptive", "params": {"capacity": 1}}, None, r"timesteps\.params\.capacity must be in \[2, inf\]"),
    ({"name": "adaptive", "params": {"stride": 50}}, None, r"timesteps\.params: subset_size must be <="),
])
def test_bad_sampler_parameters_fail_at_config_load_naming_the_key(digits_dir, timesteps, weighting, message):
    sections = {"timesteps": timesteps}
    if weighting:
        sections["weighting"] = weighting
    cfg = tiny_config(digits_dir, **sections)  # T = 100
    with pytest.raises(ConfigError, match=message):
        check_config(cfg, "run.yaml")


# ---------------------------------------------------------------------------- the docs and the tests know it

ROOT = Path(__file__).resolve().parents[1]


def _table_names() -> set[str]:
    """The first column of the table in ``timesteps/__init__.py``'s docstring."""
    import timestep_lab.timesteps as pkg

    rows = pkg.__doc__.split("==\n", 2)[2].split("\n==")[0]  # between the header's rule and the closing rule
    return {line.split()[0] for line in rows.splitlines() if line.strip() and not line.startswith("=")}


def _methods_sampler_text() -> str:
    """docs/methods.md §1 (timestep samplers) and §12.2-12.3 (the flow trainers' options)."""
    md = (ROOT / "docs" / "methods.md").read_text()
    return md[md.index("## 1 Timestep samplers"):md.index("## 2 Loss weightings")] + \
        md[md.index("### 12.2 "):md.index("### 12.4 ")]


@pytest.mark.parametrize("name", SAMPLERS.names())
def test_every_sampler_is_in_the_docs_table_methods_and_a_histogram_test(name):
    assert name in _table_names(), f"{name}: no row in the table of src/timestep_lab/timesteps/__init__.py"
    assert f"`{name}`" in _methods_sampler_text(), f"{name}: not in docs/methods.md §1 or §12.2-12.3"
    assert name in {case[0] for case in IID_CASES.values()} | set(OWN_HISTOGRAM_TESTS), \
        f"{name}: no case in IID_CASES and no entry in OWN_HISTOGRAM_TESTS"


def test_the_docs_table_names_only_registered_samplers():
    assert _table_names() == set(SAMPLERS.names())


def test_own_histogram_tests_exist():
    for name, test in OWN_HISTOGRAM_TESTS.items():
        assert test.startswith("tests/") and (ROOT / test).exists() or test in globals(), (name, test)


# ---------------------------------------------------------------------------- training smoke runs

SMOKE_PARAMS = {"adaptive": {"update_every": 5}}
#: samplers the training loop sees as the same object as another's (the same class, or the same base
#: class differing only in a stateless table, cdf or map): one short run covers both (suite time)
SMOKE_SHARED = {"sigmoid": "beta", "inverted_parabola": "beta", "cauchy": "laplace", "truncate": "shift"}


def test_smoke_shared_samplers_are_the_same_kind_of_object():
    for name, other in SMOKE_SHARED.items():
        a, b = build(name), build(other)
        assert type(a).__mro__[1:] == type(b).__mro__[1:] or type(a) is type(b), (name, other)
        assert not a.stateful and not b.stateful and other not in SMOKE_SHARED


@pytest.mark.parametrize("name", [n for n in SAMPLERS.names() if n not in SMOKE_SHARED])
def test_short_digits_run_with_every_sampler_learns_and_logs_p(digits_dir, tmp_path, name):
    cfg = tiny_config(digits_dir, timesteps={"name": name, "params": SMOKE_PARAMS.get(name, {})})
    res = train(cfg, tmp_path / name, progress=False)
    assert res.status == "ok"
    log = [json.loads(line) for line in (tmp_path / name / "train_log.jsonl").read_text().splitlines()]
    assert log[-1]["loss"] < log[0]["loss"]
    if build(name, 100).stateful:
        for rec in log:
            bins = rec["sampler"]["p_bins"]
            assert len(bins) == 10 and abs(sum(bins) - 1) < 1e-6
    else:
        assert "sampler" not in log[-1]


@pytest.mark.slow
def test_overhead_benchmark_quick_mode_writes_a_ratio_per_sampler(tmp_path):
    import subprocess
    import sys
    from pathlib import Path

    script = Path(__file__).resolve().parents[1] / "benchmarks" / "sampler_overhead.py"
    r = subprocess.run([sys.executable, str(script), "--quick", "--json", str(tmp_path / "r.json")],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    ratios = json.loads((tmp_path / "r.json").read_text())
    assert set(ratios) == set(SAMPLERS.names()) and ratios["uniform"] == 1.0
    assert all(0.2 < v < 20 for v in ratios.values())
    assert "adaptive" in r.stdout and "ratio" in r.stdout
