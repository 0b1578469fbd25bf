"""The seed paper's analyses (timestep_lab.studies): slots, loss profile, interference matrix,
posterior coefficients, replacement ranges, prediction-type x0 errors and consistency distances."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch
from torch import nn

from timestep_lab.artifacts.io import ArtifactError
from timestep_lab.models.unet import UNet
from timestep_lab.processes.diffusion import GaussianDiffusion
from timestep_lab.processes.predictions import make_prediction
from timestep_lab.processes.schedules import get_schedule
from timestep_lab.studies import (
    PAPER_SLOTS,
    equal_loss_slots,
    full_profile,
    interference_matrix,
    load_profile,
    loss_profile,
    paired_distance,
    posterior_coefficients,
    replacement_ranges,
    save_profile,
    scale_slots,
    slot_sums,
    x0_error_profile,
)
from timestep_lab.studies.profile import profile_bank, profile_timesteps

T_SMALL = 100


@pytest.fixture(scope="module")
def diffusion() -> GaussianDiffusion:
    return GaussianDiffusion(get_schedule("linear", T_SMALL))


@pytest.fixture(scope="module")
def images() -> np.ndarray:
    return np.random.default_rng(0).integers(0, 256, size=(40, 8, 8, 1), dtype=np.uint8)


def _cover_ok(slots, T):
    assert slots[0][0] == 0 and slots[-1][1] == T - 1
    for (a, b), (c, _) in zip(slots, slots[1:]):
        assert c == b + 1
    assert all(lo <= hi for lo, hi in slots)


# ------------------------------------------------------------------------------ slots


def test_equal_loss_slots_constant_loss_gives_equal_widths():
    slots = equal_loss_slots(np.ones(1000), 10)
    assert slots == [(100 * k, 100 * k + 99) for k in range(10)]
    odd = equal_loss_slots(np.full(1003, 0.7), 10)
    _cover_ok(odd, 1003)
    widths = [hi - lo + 1 for lo, hi in odd]
    assert max(widths) - min(widths) <= 1
    # a torch tensor works too, and n = 1 / n = T are the edge cases
    assert equal_loss_slots(torch.ones(50), 1) == [(0, 49)]
    assert equal_loss_slots(np.ones(5), 5) == [(i, i) for i in range(5)]


def test_equal_loss_slots_decaying_loss_narrow_early_and_balanced():
    t = np.arange(1000)
    loss = np.exp(-t / 30.0) + 0.01
    slots = equal_loss_slots(loss, 10)
    _cover_ok(slots, 1000)
    widths = [hi - lo + 1 for lo, hi in slots]
    assert widths[0] < 10 and widths[-1] > 300
    assert all(w2 >= w1 for w1, w2 in zip(widths, widths[1:]))  # loss decreases -> slots widen
    sums = slot_sums(loss, slots)
    assert abs(sum(sums) - loss.sum()) < 1e-9
    for s in sums:
        assert abs(s - loss.sum() / 10) <= loss.max()
    assert equal_loss_slots(loss, 10) == slots  # deterministic


def test_equal_loss_slots_keeps_every_slot_non_empty_and_zero_total():
    loss = np.zeros(20)
    loss[0] = 100.0  # all the loss in one timestep
    slots = equal_loss_slots(loss, 5)
    _cover_ok(slots, 20)
    assert len(slots) == 5
    assert equal_loss_slots(np.zeros(10), 5) == [(0, 1), (2, 3), (4, 5), (6, 7), (8, 9)]


@pytest.mark.parametrize("loss, n, match", [
    (np.ones((10, 2)), 2, "1-D"),
    (np.array([1.0, np.nan, 1.0]), 2, "finite"),
    (np.array([1.0, -0.1, 1.0]), 2, "non-negative"),
    (np.ones(3), 4, "T = 3"),
    (np.ones(3), 0, "positive integer"),
    (np.ones(3), 1.5, "positive integer"),
    (np.array([]), 1, "empty"),
])
def test_equal_loss_slots_rejects_bad_input(loss, n, match):
    with pytest.raises(ValueError, match=match):
        equal_loss_slots(loss, n)


def test_paper_slots_and_scaling():
    from timestep_lab.timesteps.slots import PAPER_SLOTS as SAMPLER_SLOTS
    from timestep_lab.timesteps.slots import default_slots

    assert [tuple(s) for s in PAPER_SLOTS] == [tuple(s) for s in SAMPLER_SLOTS]
    _cover_ok(list(PAPER_SLOTS), 1000)
    assert scale_slots(PAPER_SLOTS, 1000, 1000) == list(PAPER_SLOTS)
    assert scale_slots(PAPER_SLOTS, 1000, 100) == list(default_slots(100))
    small = scale_slots(PAPER_SLOTS, 1000, 10)
    assert small == [(i, i) for i in range(10)]
    with pytest.raises(ValueError):
        scale_slots(PAPER_SLOTS, 1000, 9)
    with pytest.raises(ValueError, match="start"):
        scale_slots([(0, 4), (6, 999)], 1000, 100)


# ------------------------------------------------------------------------------ interference


def _profile(values, T, seed=1234, stride=1):
    ts = profile_timesteps(T, stride)
    return {"T": T, "seed": seed, "num_images": 8, "timesteps": ts, "eps_mse": [float(values[t]) for t in ts]}


def test_interference_matrix_known_answer():
    T = 100
    ref = np.exp(-np.arange(T) / 10.0) + 0.05
    slots = equal_loss_slots(ref, 5)
    lo3, hi3 = slots[2]  # slot 3 (1-based)
    ft3 = ref * 2.0
    ft3[lo3 : hi3 + 1] = ref[lo3 : hi3 + 1] * 0.5
    lo1, hi1 = slots[0]
    ft1 = ref * 1.1
    ft1[lo1 : hi1 + 1] = ref[lo1 : hi1 + 1] * 0.9
    res = interference_matrix(_profile(ref, T), {3: _profile(ft3, T), "1": _profile(ft1, T)}, slots)
    assert res["trained"] == [1, 3] and res["evaluated"] == [1, 2, 3, 4, 5]
    m = np.asarray(res["matrix"])
    assert m.shape == (2, 5)
    np.testing.assert_allclose(m[1], [1.0, 1.0, -0.5, 1.0, 1.0], atol=1e-12)
    np.testing.assert_allclose(m[0], [-0.1, 0.1, 0.1, 0.1, 0.1], atol=1e-12)
    np.testing.assert_allclose(res["diagonal"], [-0.1, -0.5], atol=1e-12)
    assert res["trained_improved"] == [True, True]
    big = res["largest_off_diagonal"]
    assert big["trained"] == 3 and big["evaluated"] in (1, 2, 4, 5) and big["value"] == pytest.approx(1.0)
    assert res["max_off_diagonal_increase"]["value"] == pytest.approx(1.0)
    np.testing.assert_allclose(res["before"], slot_sums(ref, slots))


def test_interference_against_the_uniform_control_through_the_cli(tmp_path, capsys):
    """Seeds 0..2; the control scales every slot by 1 + c_s; fine-tuning slot 1 scales slot 1 by
    (1 + c_s) exp(-0.2) and slot 2 by (1 + c_s) exp(0.5 + e_s): the log-ratio against the control
    is 0.5 + e_s per seed off the diagonal and -0.2 on it."""
    from timestep_lab.artifacts.io import read_json
    from timestep_lab.cli import main
    from timestep_lab.studies.profile import PROFILE_FORMAT

    T, slots = 100, [(0, 49), (50, 99)]
    ref = np.ones(T)

    def write(name, values):
        path = tmp_path / f"{name}.json"
        save_profile(path, {**_profile(values, T), "format": PROFILE_FORMAT})
        return str(path)

    finetuned, controls = [], []
    for seed, c, e in ((0, 0.1, 0.0), (1, 0.2, 0.1), (2, 0.3, -0.1)):
        ft = (1 + c) * np.concatenate([np.full(50, math.exp(-0.2)), np.full(50, math.exp(0.5 + e))])
        finetuned.append(f"{seed}:1=" + write(f"ft{seed}", ft))
        controls.append(f"{seed}=" + write(f"ctl{seed}", ref * (1 + c)))
    (tmp_path / "slots.json").write_text(json.dumps({"slots": [list(s) for s in slots]}))
    out = tmp_path / "interference_control.json"
    assert main(["interference-control", "--reference", write("ref", ref), "--finetuned", *finetuned,
                 "--controls", *controls, "--slots", str(tmp_path / "slots.json"), "--out", str(out)]) == 0
    res = read_json(out)
    assert res["seeds"] == [0, 1, 2] and res["trained"] == [1] and res["evaluated"] == [1, 2]
    half_width = 4.302652729911275 * 0.1 / math.sqrt(3)  # t_{0.975, 2} * sd / sqrt(n)
    off = res["off_diagonal"]
    assert off["n"] == 3 and off["diff"] == pytest.approx(0.5)
    assert (off["ci_low"], off["ci_high"]) == (pytest.approx(0.5 - half_width), pytest.approx(0.5 + half_width))
    assert res["diagonal"]["diff"] == pytest.approx(-0.2) and res["diagonal"]["sd"] == pytest.approx(0, abs=1e-9)
    assert res["excess"][0][1]["diff"] == pytest.approx(0.5)
    assert [r[0][1] for r in res["per_seed"].values()] == pytest.approx([0.5, 0.6, 0.4])  # straight from the seeds
    np.testing.assert_allclose(res["control"], [0.2, 0.2])
    assert main(["interference-control", "--reference", write("ref", ref), "--finetuned", "1=" + write("x", ref),
                 "--controls", *controls, "--slots", str(tmp_path / "slots.json"), "--out", str(out)]) == 2
    assert "SEED:SLOT=PATH" in capsys.readouterr().err


def test_interference_matrix_interpolates_strided_profiles_and_checks_inputs():
    T = 100
    ref = 1.0 + np.arange(T) / 10.0  # linear: interpolation of a strided profile is exact
    slots = [(0, 49), (50, 99)]
    after = ref * 0.8
    res = interference_matrix(_profile(ref, T, stride=7), {1: _profile(after, T, stride=10)}, slots)
    np.testing.assert_allclose(res["matrix"][0], [-0.2, -0.2], atol=1e-12)
    with pytest.raises(ValueError, match="seed"):
        interference_matrix(_profile(ref, T), {1: _profile(after, T, seed=1)}, slots)
    with pytest.raises(ValueError, match="1-based"):
        interference_matrix(_profile(ref, T), {0: _profile(after, T)}, slots)
    with pytest.raises(ValueError, match="T - 1"):
        interference_matrix(_profile(ref, T), {1: _profile(after, T)}, [(0, 49), (50, 98)])


def test_full_profile_linear_interpolation():
    out = full_profile([0, 10, 20], [0.0, 1.0, 3.0], 25)
    assert out.shape == (25,)
    assert out[5] == pytest.approx(0.5) and out[15] == pytest.approx(2.0)
    assert out[24] == pytest.approx(3.0)  # constant beyond the last point
    with pytest.raises(ValueError):
        full_profile([0, 0, 1], [1, 2, 3], 5)


# ------------------------------------------------------------------------------ contribution


def test_posterior_coefficients_closed_form(diffusion):
    pc = posterior_coefficients(diffusion)
    ab = get_schedule("linear", T_SMALL).numpy()
    ab_prev = np.concatenate([[1.0], ab[:-1]])
    beta = 1.0 - ab / ab_prev
    c1 = beta * np.sqrt(ab_prev) / (1.0 - ab)
    c2 = (1.0 - ab_prev) * np.sqrt(1.0 - beta) / (1.0 - ab)
    np.testing.assert_allclose(pc["c1"], c1, rtol=1e-12)
    np.testing.assert_allclose(pc["c2"], c2, rtol=1e-12, atol=1e-15)
    assert pc["c1"][0] == pytest.approx(1.0) and pc["c2"][0] == pytest.approx(0.0)
    # posterior mean identity: c1 + c2 sqrt(ab_t) = sqrt(ab_{t-1}); the x0 share falls with t
    np.testing.assert_allclose(np.asarray(pc["c1"]) + np.asarray(pc["c2"]) * np.sqrt(ab), np.sqrt(ab_prev), rtol=1e-12)
    share = np.asarray(pc["x0_share"])
    np.testing.assert_allclose(share, beta / (1.0 - ab), rtol=1e-12)  # = c1 / sqrt(ab_{t-1})
    assert share[0] == pytest.approx(1.0) and share[T_SMALL // 2] < 0.2
    # the same coefficients the diffusion's posterior mean uses
    x0, xt, t = torch.randn(3, 1, 2, 2), torch.randn(3, 1, 2, 2), torch.tensor([0, 40, 99])
    mean, _, _ = diffusion.q_posterior(x0, xt, t)
    c1t = torch.tensor(c1, dtype=torch.float32)[t].view(-1, 1, 1, 1)
    c2t = torch.tensor(c2, dtype=torch.float32)[t].view(-1, 1, 1, 1)
    torch.testing.assert_close(mean, c1t * x0 + c2t * xt)


def test_replacement_ranges_T1000_and_T100():
    paper = [[1, 500], [500, 1000], [10, 100], [100, 500], [1, 10]]
    r1000 = replacement_ranges(paper, 1000)
    assert [r["label"] for r in r1000] == ["[1,500]", "[500,1000]", "[10,100]", "[100,500]", "[1,10]"]
    assert [r["range"] for r in r1000] == [[0, 499], [499, 999], [9, 99], [99, 499], [0, 9]]
    assert [r["range"] for r in replacement_ranges(paper, 100)] == [[0, 49], [50, 99], [1, 9], [10, 49], [0, 0]]
    assert replacement_ranges(paper, 100)[1]["paper"] == [500, 1000]
    with pytest.raises(ValueError):
        replacement_ranges([[0, 10]], 100)


# ------------------------------------------------------------------------------ consistency


def test_paired_distance_identical_and_noisy():
    rng = np.random.default_rng(1)
    a = rng.integers(0, 256, size=(12, 6, 6, 3), dtype=np.uint8)
    same = paired_distance(a, a.copy())
    assert same["pixel"]["paired"] == 0.0 and same["pixel"]["ratio"] == 0.0
    assert same["pixel"]["unpaired"] > 0.2 and same["pixel"]["deranged"] > 0.2
    b = np.clip(a.astype(int) + rng.integers(-8, 9, size=a.shape), 0, 255).astype(np.uint8)

    def mean_colour(x):
        return x.reshape(len(x), -1, 3).mean(axis=1) / 255.0

    res = paired_distance(a, b, features=mean_colour, seed=3, chunk=5)
    px = res["pixel"]
    assert 0 < px["paired"] < 8 / 255 and px["paired"] < px["unpaired"] and px["paired"] < px["deranged"]
    assert px["ratio"] < 0.2
    assert res["feature"]["paired"] < res["feature"]["unpaired"]
    # the RMS is in [0, 1] units: a black vs a white image is distance 1
    bw = paired_distance(np.zeros((2, 2, 2, 1), np.uint8), np.full((2, 2, 2, 1), 255, np.uint8))
    assert bw["pixel"]["paired"] == pytest.approx(1.0)
    with pytest.raises(ValueError):
        paired_distance(a, b[:5])


# ------------------------------------------------------------------------------ loss profile


def _tiny_unet(out_channels: int = 1, seed: int = 0) -> nn.Module:
    torch.manual_seed(seed)
    net = UNet(image_size=8, in_channels=1, out_channels=out_channels, channels=8, channel_mult=(1, 2),
               num_res_blocks=1, attention_resolutions=(), norm_groups=4)
    with torch.no_grad():
        for p in net.out.parameters():  # the output layer starts at zero: make the net non-trivial
            p.normal_(0.0, 0.1)
    return net


class Zero(nn.Module):
    def __init__(self, channels: int = 1):
        super().__init__()
        self.channels = channels
        self.dummy = nn.Parameter(torch.zeros(()))

    def forward(self, x, t):
        return torch.zeros(x.shape[0], self.channels, *x.shape[2:]) + 0.0 * self.dummy


class Oracle(nn.Module):
    """Knows the (single) bank image, hence the exact eps of any x_t built from it."""

    def __init__(self, x0: torch.Tensor, diffusion: GaussianDiffusion):
        super().__init__()
        self.x0, self.diffusion = x0, diffusion

    def forward(self, x, t):
        return self.diffusion.eps_from_x0(x, t, self.x0.expand_as(x))


def test_loss_profile_tiny_unet_deterministic_with_grad_variance(diffusion, images):
    net = _tiny_unet()
    net.train()
    eps = make_prediction("eps", T_SMALL)
    kw = dict(num_images=8, stride=10, seed=7)
    p1 = loss_profile(net, diffusion, eps, images, grad_timesteps=3, grad_samples=3, batch_size=48, **kw)
    assert net.training  # mode restored
    assert p1["timesteps"] == [0, 10, 20, 30, 40, 50, 60, 70, 80, 90, 99]
    assert p1["T"] == T_SMALL and p1["stride"] == 10 and p1["num_images"] == 8 and p1["seed"] == 7
    assert p1["image_shape"] == [1, 8, 8]
    for key in ("eps_mse", "x0_mse", "vlb_bpd", "loss", "eps_mse_sem"):
        assert len(p1[key]) == 11 and all(math.isfinite(v) for v in p1[key]), key
    np.testing.assert_allclose(p1["loss"], p1["eps_mse"], rtol=1e-6)  # eps-prediction: the same quantity
    g = p1["grad"]
    assert g["timesteps"] == [0, 50, 99] and g["samples"] == 3
    assert len(g["norm_mean"]) == 3 and all(v > 0 for v in g["norm_mean"]) and all(v >= 0 for v in g["norm_var"])
    assert all(p.requires_grad for p in net.parameters())
    # the trace of the gradients' covariance (issue 42), brute force at t = 50: per-coordinate variance, summed
    x0, noise, _ = profile_bank(images, 8, 7)
    rows = []
    net.eval()
    for i in range(3):
        t = torch.full((1,), 50, dtype=torch.long)
        x_t = diffusion.q_sample(x0[i:i + 1], t, noise[i:i + 1])
        loss = eps.loss(net(x_t, t).float(), x0[i:i + 1], noise[i:i + 1], x_t, t, diffusion).loss.sum()
        rows.append(torch.cat([q.reshape(-1) for q in torch.autograd.grad(loss, list(net.parameters()))]).double())
    net.train()
    G = torch.stack(rows)
    assert g["cov_trace"][1] == pytest.approx(float(G.var(0, unbiased=True).sum()), rel=1e-5)
    assert g["mean_sq_norm"][1] == pytest.approx(float(G.mean(0).pow(2).sum()), rel=1e-5)
    assert g["norm_mean"][1] == pytest.approx(float(G.norm(dim=1).mean()), rel=1e-5)
    p2 = loss_profile(net, diffusion, eps, images, batch_size=30, **kw)  # other batching, same numbers
    np.testing.assert_allclose(p2["eps_mse"], p1["eps_mse"], rtol=1e-5)
    p3 = loss_profile(net, diffusion, eps, images, grad_timesteps=3, grad_samples=3, batch_size=48, **kw)
    assert p3 == p1  # fixed bank and noise


def test_loss_profile_zero_and_oracle_networks(diffusion, images, tmp_path):
    eps_pred = make_prediction("eps", T_SMALL)
    x0, noise, idx = profile_bank(images, 32, 5)
    assert len(set(idx.tolist())) == 32
    torch.testing.assert_close(x0[0], torch.from_numpy(images[int(idx[0])]).permute(2, 0, 1).float() / 127.5 - 1)
    prof = loss_profile(Zero(), diffusion, eps_pred, images, num_images=32, stride=20, seed=5)
    m_eps = float(noise.double().pow(2).mean())
    np.testing.assert_allclose(prof["eps_mse"], m_eps, rtol=1e-5)  # eps_hat = 0 -> mean eps^2 ~ 1
    assert abs(m_eps - 1.0) < 0.15
    ab = diffusion.alpha_bar.numpy()[prof["timesteps"]]
    np.testing.assert_allclose(prof["x0_mse"], (1 - ab) / ab * m_eps, rtol=1e-4)  # x0_hat = x_t / sqrt(ab)
    # an oracle that knows the single bank image has zero error
    bank1 = profile_bank(images, 1, 5)[0]
    oracle = loss_profile(Oracle(bank1, diffusion), diffusion, eps_pred, images, num_images=1, stride=20, seed=5)
    assert max(oracle["eps_mse"]) < 1e-6 and max(oracle["x0_mse"]) < 1e-6
    # with the exact mean only the variance mismatch (fixed_large: beta_t vs posterior beta~_t) is left
    t = np.asarray(oracle["timesteps"][1:])
    beta, post_var = diffusion.betas.numpy()[t], diffusion._coefs64["post_var"].numpy()[t]
    kl_var = 0.5 * (-1.0 + np.log(beta / post_var) + post_var / beta) / math.log(2.0)
    np.testing.assert_allclose(oracle["vlb_bpd"][1:], kl_var, rtol=1e-3, atol=1e-7)
    assert all(o < z for o, z in zip(oracle["vlb_bpd"][1:], prof["vlb_bpd"][1:]))
    # round trip through a file
    save_profile(tmp_path / "p.json", prof)
    assert load_profile(tmp_path / "p.json") == prof
    (tmp_path / "bad.json").write_text('{"T": 3}')
    with pytest.raises(ArtifactError, match="not a loss profile"):
        load_profile(tmp_path / "bad.json")


# ------------------------------------------------------------------------------ prediction types


class Mixed(nn.Module):
    """Three heads: eps head 0, x0 head 0, v head 0."""

    def forward(self, x, t):
        return torch.zeros(x.shape[0], 3 * x.shape[1], *x.shape[2:])


def test_x0_error_profile_picks_the_lower_error(diffusion, images):
    models = {"eps": (Zero(), make_prediction("eps", T_SMALL)), "x0": (Zero(), make_prediction("x0", T_SMALL))}
    res = x0_error_profile(models, diffusion, images, num_images=24, stride=5, seed=11)
    x0, noise, _ = profile_bank(images, 24, 11)
    ts = res["timesteps"]
    ab = diffusion.alpha_bar.numpy()[ts]
    m_eps, m_x0 = float(noise.double().pow(2).mean()), float(x0.double().pow(2).mean())
    err_eps = (1 - ab) / ab * m_eps  # zero eps: x0_hat = x_t / sqrt(ab), error grows with t
    np.testing.assert_allclose(res["x0_mse"]["eps"], err_eps, rtol=1e-4)
    np.testing.assert_allclose(res["x0_mse"]["x0"], m_x0, rtol=1e-5)  # zero x0: error = mean x0^2, flat
    assert res["winner"] == ["eps" if e < m_x0 else "x0" for e in err_eps]
    cross = next(t for t, e in zip(ts, err_eps) if e >= m_x0)
    assert 0 < cross < T_SMALL - 1
    assert res["wins"] == [{"winner": "eps", "lo": 0, "hi": ts[ts.index(cross) - 1]},
                           {"winner": "x0", "lo": cross, "hi": T_SMALL - 1}]
    assert res["win_counts"] == {"eps": ts.index(cross), "x0": len(ts) - ts.index(cross)}
    assert res["predictions"] == {"eps": "eps", "x0": "x0"} and res["heads"] == {}
    assert (res["T"], res["stride"], res["num_images"], res["seed"]) == (T_SMALL, 5, 24, 11)


def test_x0_error_profile_mixed_heads(diffusion, images):
    models = {"eps": (Zero(), make_prediction("eps", T_SMALL)), "mix": (Mixed(), make_prediction("mixed", T_SMALL))}
    res = x0_error_profile(models, diffusion, images, num_images=24, stride=5, seed=11)
    np.testing.assert_allclose(res["x0_mse"]["mix/eps"], res["x0_mse"]["eps"], rtol=1e-5)
    x0 = profile_bank(images, 24, 11)[0]
    np.testing.assert_allclose(res["x0_mse"]["mix/x0"], float(x0.double().pow(2).mean()), rtol=1e-5)
    np.testing.assert_allclose(res["x0_mse"]["mix"], res["x0_mse"]["mix/v"], rtol=1e-6)  # default head: v
    heads = res["heads"]["mix"]
    per_head = np.asarray([res["x0_mse"][f"mix/{h}"] for h in ("eps", "x0", "v")])
    assert heads["winner"] == [("eps", "x0", "v")[i] for i in per_head.argmin(axis=0)]
    assert len(heads["head_per_t"]) == T_SMALL and set(heads["head_per_t"]) <= {0, 1, 2}
    grid = {t: ("eps", "x0", "v").index(w) for t, w in zip(res["timesteps"], heads["winner"])}
    assert all(heads["head_per_t"][t] == h for t, h in grid.items())
    assert sum(heads["win_counts"].values()) == len(res["timesteps"])
    assert res["predictions"]["mix"] == "mixed"


# ------------------------------------------------------------------------------ optimal denoiser


def test_optimal_denoiser_is_the_softmax_mean_and_the_floor_under_a_network(diffusion, images):
    from timestep_lab.studies.optimal import EmpiricalDenoiser, GaussianDenoiser, optimal_profile

    train = images[:12]
    den = EmpiricalDenoiser(train, diffusion, chunk=3)
    y = torch.from_numpy(train).permute(0, 3, 1, 2).double().div(127.5).sub(1).reshape(12, -1)
    g = torch.Generator().manual_seed(0)
    x_t, t = torch.randn(5, 1, 8, 8, generator=g, dtype=torch.float64), torch.tensor([0, 3, 20, 60, 99])
    ab = diffusion.alpha_bar[t]
    for i in range(5):  # brute force: weights of every training image, normalised in float64
        d2 = ((x_t[i].reshape(1, -1) - ab[i].sqrt() * y) ** 2).sum(1)
        w = torch.softmax(-d2 / (2 * (1 - ab[i])), 0)
        torch.testing.assert_close(den.x0(x_t, t)[i].reshape(-1), w @ y)
    prof = optimal_profile(train, diffusion, num_images=8, stride=10, seed=3)
    a = diffusion.alpha_bar.numpy()[prof["timesteps"]]
    np.testing.assert_allclose(prof["eps_mse"], np.asarray(prof["x0_mse"]) * a / (1 - a), rtol=1e-9)
    assert prof["eps_mse"][0] < 1e-8  # at t = 0 the posterior finds the one image x_t came from
    # held out (issue 42): the leave-one-out denoiser cannot find it; at t = 0 it returns the nearest other
    # image, so its x0 error is the squared distance to that image; never below the training floor
    ho = prof["heldout"]
    _, _, idx = profile_bank(train, 8, 3)
    nearest = [min(float(((y[i] - y[j]) ** 2).mean()) for j in range(12) if j != i) for i in idx.tolist()]
    assert ho["x0_mse"][0] == pytest.approx(np.mean(nearest), rel=1e-3) and ho["eps_mse"][0] > 1e3 * prof["eps_mse"][0]
    assert all(h >= f - 1e-12 for h, f in zip(ho["eps_mse"], prof["eps_mse"]))
    other = optimal_profile(train, diffusion, images[12:24], num_images=8, stride=10, seed=3)  # a bank it never saw
    assert other["heldout"]["eps_mse"] == other["eps_mse"]
    assert prof["x0_mse"][-1] > 0.5 * prof["x0_mse"][-1] + 0.0 and prof["x0_mse"][0] < prof["x0_mse"][-1]
    # no network beats it: here a random tiny UNet and the zero network, on the same bank and noise
    for net in (_tiny_unet(), Zero()):
        p = loss_profile(net, diffusion, make_prediction("eps", T_SMALL), train, num_images=8, stride=10, seed=3)
        assert all(m >= o - 1e-9 for m, o in zip(p["eps_mse"], prof["eps_mse"]))
    # the Gaussian denoiser: a point at the data mean stays there; t = T-1 returns about the mean
    gd = GaussianDenoiser(train, diffusion)
    mu = y.mean(0).reshape(1, 1, 8, 8)
    t0 = torch.tensor([50])
    torch.testing.assert_close(gd.x0(diffusion.alpha_bar[50].sqrt() * mu, t0), mu)
    x0_hat, eps_hat = gd(x_t[:1].float(), torch.tensor([99]))
    assert x0_hat.shape == (1, 1, 8, 8) and eps_hat.dtype == torch.float32


# ------------------------------------------------------------------------------ timestep contribution


def test_branched_contribution_samples_equal_one_chain_per_arm(diffusion, images):
    """Every arm forked from the shared chain is byte for byte the sample of its own chain with the
    same range replaced; the final-step control returns the held-out images themselves."""
    from timestep_lab.data import to_uint8
    from timestep_lab.generate.sampling import GroundTruth, StackedGenerator, respaced_timesteps, reverse_loop
    from timestep_lab.studies.contribution import branched_samples, contribution_arms, heldout_distance, heldout_float
    from timestep_lab.studies.optimal import GaussianDenoiser

    den = GaussianDenoiser(images[6:], diffusion)  # a cheap stand-in for a network
    held = images[:6]
    gt = heldout_float(held, 6)
    for method, steps, spacing, eta in (("ddpm", 40, "uniform", 1.0), ("ddim", 30, "quadratic", 0.0)):
        used = respaced_timesteps(T_SMALL, steps, spacing).tolist()
        arms = contribution_arms([[1, 500], [500, 1000], [100, 500]], T_SMALL, used, min_steps=2)
        assert [a.label for a in arms] == ["none", "final", "t1-500", "t500-1000", "t100-500"]
        assert arms[1].replaced == (0, 0) and arms[2].replaced[0] == 1  # the final step is left out
        out = branched_samples(den, diffusion, arms, image_shape=(1, 8, 8), seeds=list(range(6)), gt_images=gt,
                               method=method, steps=steps, eta=eta, spacing=spacing, batch_size=4)
        for arm in arms:
            want = [reverse_loop(den, diffusion, StackedGenerator(list(s)), (1, 8, 8), method=method, eta=eta,
                                 steps=steps, spacing=spacing,
                                 gt=GroundTruth(gt[s.start:s.stop], *arm.replaced) if arm.replaced else None)
                    for s in (range(0, 4), range(4, 6))]
            np.testing.assert_array_equal(out[arm.label], to_uint8(torch.cat(want)).permute(0, 2, 3, 1).numpy(),
                                          err_msg=f"{method} {arm.label}")
        assert heldout_distance(out["final"], held)["copy"].all()  # the control: the held-out images
        assert not heldout_distance(out["none"], held)["copy"].any()
    with pytest.raises(ValueError, match=r"\[1, 10\].*holds 0 step"):
        contribution_arms([[1, 10]], T_SMALL, respaced_timesteps(T_SMALL, 10).tolist())


# ------------------------------------------------------------------------------ consistency over models


def test_consistency_test_counts_models_and_separates_the_shared_solution():
    from timestep_lab.studies.consistency import consistency_test, jackknife_over_models

    rng = np.random.default_rng(0)
    base = rng.integers(0, 256, size=(40, 4, 4, 1)).astype(float)  # what every model maps noise i to

    def model(spread):
        return np.clip(base + rng.normal(0, spread, base.shape), 0, 255).astype(np.uint8)

    sets = {f"m{i}": model(10) for i in range(4)}
    control = {"shared": np.clip(base, 0, 255).astype(np.uint8), "far": model(80)}
    res = consistency_test(sets, control, permutations=99, seed=1)
    t = res["pixel"]["test"]
    assert t["n"] == 4 and t["unit"] == "models" and t["pairs"] == 6  # models, not pairs
    assert t["ci_low"] < t["diff"] < t["ci_high"] < 0 and t["p_less"] == pytest.approx(1 / 100)
    assert t["alternative"] == "two-sided" and t["p"] == pytest.approx(2 / 100) and t["p_greater"] == 1.0
    assert len(t["per_pair"]) == 6
    # every model is closer to the shared solution than to the others: that explains the pairing
    assert res["pixel"]["controls"]["shared"]["closer_to_each_other"]["diff"] > 0
    assert res["pixel"]["controls"]["far"]["closer_to_each_other"]["ci_high"] < 0
    # unrelated models: no pairing effect, the permutation p is not small
    null = consistency_test({f"m{i}": rng.integers(0, 256, size=(40, 4, 4, 1), dtype=np.uint8) for i in range(3)},
                            permutations=99, seed=2)["pixel"]["test"]
    assert null["p"] > 0.05 and null["n"] == 3
    # models whose paired samples are further apart than unpaired ones: the small p is on the other side
    # (a model and its negative: the same noise gives opposite images)
    far = consistency_test({"m0": base.astype(np.uint8), "m1": (255 - base).astype(np.uint8)}, permutations=99,
                           seed=3)["pixel"]["test"]
    assert far["diff"] > 0 and far["p_greater"] == pytest.approx(1 / 100) and far["p"] == pytest.approx(2 / 100)
    # the jackknife: leaving one model out of 3 leaves one pair; known answer
    jk = jackknife_over_models(["a", "b", "c"], {("a", "b"): 1.0, ("a", "c"): 2.0, ("b", "c"): 3.0})
    assert jk["diff"] == pytest.approx(2.0) and jk["se"] == pytest.approx(math.sqrt(2 / 3 * 2.0))


@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # clean-fid passes scipy's deprecated disp=
def test_bootstrap_fid_is_paired_and_centred_on_the_full_sample():
    from types import SimpleNamespace

    from cleanfid.fid import frechet_distance

    from timestep_lab.metrics import bootstrap_fid

    rng = np.random.default_rng(0)
    ref = SimpleNamespace(arrays={"tf_mu": np.zeros(4), "tf_sigma": np.eye(4)})
    a = rng.normal(0.5, 1.0, (300, 4))
    b = a + rng.normal(0.0, 0.05, a.shape)  # nearly the same samples: a paired difference is tight
    res = bootstrap_fid({"a": a, "b": b, "c": a}, ref, replicates=60, seed=1)
    fa = res["fid"]["a"]
    assert fa["value"] == pytest.approx(frechet_distance(a.mean(0), np.cov(a, rowvar=False), np.zeros(4), np.eye(4)))
    assert fa["ci"][0] <= fa["value"] <= fa["ci"][1] and fa["bias"] > 0  # resampling inflates FID
    assert res["diff"]["a-c"] == {"value": 0.0, "ci": [0.0, 0.0], "sd": 0.0, "bias": 0.0}  # identical sets
    width = lambda d: d["ci"][1] - d["ci"][0]  # noqa: E731
    assert width(res["diff"]["b-a"]) < 0.5 * width(fa)  # pairing removes the shared sampling noise
    assert res["n"] == 300 and res["replicates"] == 60
