"""The conditioning registry (models/conditioning.py) and the contribution analysis on a
super-resolution chain (docs/methods.md §3.4, issue 42). Unit level: no training, no files."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from timestep_lab.components import build_model, check_config
from timestep_lab.config import ConfigError, RunConfig, config_from_dict, config_to_dict
from timestep_lab.data import to_uint8
from timestep_lab.generate.sampling import Chain, Denoiser
from timestep_lab.models.conditioning import NONE, lowres, make_conditioning
from timestep_lab.processes.diffusion import GaussianDiffusion
from timestep_lab.processes.predictions import make_prediction
from timestep_lab.processes.schedules import get_schedule
from timestep_lab.studies.contribution import blend_factor, branched_samples, contribution_arms, heldout_distance


def _sr_config(**params) -> RunConfig:
    d = config_to_dict(RunConfig())
    d["conditioning"] = {"name": "lowres", "params": params}
    d["model"].update(channels=8, norm_groups=4)
    return config_from_dict(d)


def test_lowres_shapes_values_and_determinism():
    g = torch.Generator().manual_seed(0)
    x0 = torch.rand(3, 2, 8, 8, generator=g) * 2 - 1
    c = make_conditioning("lowres", {"factor": 4})
    cond = c.condition(x0)
    assert cond.shape == x0.shape and c.extra_channels(2) == 2
    torch.testing.assert_close(cond, c.condition(x0.clone()), rtol=0, atol=0)  # a pure function of x0
    # nearest: each 4x4 block holds its own mean
    torch.testing.assert_close(cond[:, :, :4, :4], x0[:, :, :4, :4].mean((2, 3), keepdim=True).expand(-1, -1, 4, 4))
    smooth = lowres(x0, 2, "bilinear")  # bilinear keeps the block means' range
    assert smooth.shape == x0.shape and float(smooth.abs().max()) <= float(x0.abs().max()) + 1e-6
    with pytest.raises(ValueError, match=r"conditioning\.params\.factor: 3 does not divide"):
        lowres(x0, 3)


def test_none_leaves_the_input_and_a_conditioned_net_needs_its_condition():
    x = torch.randn(2, 1, 8, 8)
    assert NONE.network_input(x, None) is x and NONE.condition(x) is None and not NONE.conditioned
    with pytest.raises(ValueError, match="unconditioned"):
        NONE.network_input(x, x)
    cfg = _sr_config(factor=2)
    check_config(cfg)
    net = build_model(cfg, 8, 1)
    assert net.in_channels == 2 and net.out_channels == 1  # the image channels twice in, once out
    assert build_model(dataclasses.replace(cfg, conditioning=RunConfig().conditioning), 8, 1).in_channels == 1
    cond = make_conditioning("lowres", {"factor": 2})
    diffusion = GaussianDiffusion(get_schedule("linear", 100))
    den = Denoiser(net.eval(), make_prediction("eps", 100), diffusion, conditioning=cond)
    t = torch.tensor([10, 50])
    with pytest.raises(ValueError, match=r"conditioned \(conditioning lowres\): it needs the condition"):
        den(x, t)
    with pytest.raises(ValueError, match=r"the condition is \[2, 1, 4, 4\]"):
        den(x, t, cond=torch.zeros(2, 1, 4, 4))
    x0_hat, _ = den(x, t, cond=cond.condition(x.clamp(-1, 1)))
    assert x0_hat.shape == x.shape


@pytest.mark.parametrize("bad, key", [({"name": "lowress"}, "conditioning.name"),
                                      ({"name": "lowres", "params": {"factor": 1}}, "conditioning.params.factor"),
                                      ({"name": "lowres", "params": {"upsample": "cubic"}}, "conditioning.params.upsample")])
def test_a_bad_conditioning_is_one_error_naming_the_key(bad, key):
    d = config_to_dict(RunConfig())
    d["conditioning"] = bad
    with pytest.raises(ConfigError, match=rf"^run\.yaml: {key}") as exc:
        check_config(config_from_dict(d, "run.yaml"), "run.yaml")
    assert "\n" not in str(exc.value)


# ------------------------------------------------------------------ contribution on a super-resolution chain

T = 1000
RANGES = [[1, 500], [500, 1000], [10, 100], [100, 500], [1, 10]]
V = 0.09  # variance of an image's detail beyond its low-resolution copy


@pytest.fixture(scope="module")
def setup():
    """Analytic stand-ins: images ``x0 = c + d``, ``c`` the 2x2-block (factor 2) low-resolution copy,
    ``d ~ N(0, V)`` projected to zero block means. The super-resolution posterior mean is exact:
    ``c + V sqrt(ab) / (ab V + 1 - ab) P(x_t - sqrt(ab) c)`` (P: the detail projection); the
    unconditional stand-in is the Gaussian posterior mean of ``N(0, 0.3 I)``."""
    diffusion = GaussianDiffusion(get_schedule("linear", T))
    cond = make_conditioning("lowres", {"factor": 2})
    g = torch.Generator().manual_seed(0)
    c = torch.nn.functional.interpolate(torch.rand(32, 1, 4, 4, generator=g) * 1.6 - 0.8, size=(8, 8))
    det = torch.randn(32, 1, 8, 8, generator=g) * V ** 0.5
    x0 = (c + det - cond.condition(det)).clamp(-1, 1)

    def ab_of(t):
        return diffusion.alpha_bar[t].float()[:, None, None, None]

    def sr(x, t, cond=None):
        ab = ab_of(t)
        r = x - ab.sqrt() * cond
        x0_hat = cond + V * ab.sqrt() / (ab * V + 1 - ab) * (r - make_conditioning("lowres", {"factor": 2}).condition(r))
        return x0_hat, diffusion.eps_from_x0(x, t, x0_hat)

    def unconditional(x, t):
        ab = ab_of(t)
        x0_hat = 0.3 * ab.sqrt() / (ab * 0.3 + 1 - ab) * x
        return x0_hat, diffusion.eps_from_x0(x, t, x0_hat)

    used = [int(u) for u in Chain.of(diffusion, 100, "quadratic").used]
    arms = contribution_arms(RANGES, T, used, min_steps=3)
    held = to_uint8(x0).permute(0, 2, 3, 1).numpy()
    kw = dict(image_shape=(1, 8, 8), seeds=list(range(32)), gt_images=x0, method="ddim", steps=100, eta=0.0,
              spacing="quadratic")
    out = {"sr": branched_samples(sr, diffusion, arms, conds=cond.condition(x0), **kw),
           "shuffled": branched_samples(sr, diffusion, arms, conds=cond.condition(x0.roll(1, 0)), **kw),
           "unconditional": branched_samples(unconditional, diffusion, arms, **kw)}
    dist = {k: {a.label: float(heldout_distance(v[a.label], held)["rms"].mean()) for a in arms} for k, v in out.items()}
    return diffusion, used, arms, dist


def test_each_superres_chain_heads_to_the_image_it_is_given(setup):
    """The chain conditioned on image i's own low-resolution copy ends near image i (the model's own
    error); the same chains conditioned on the neighbour's copy, or unconditioned, end as far from
    it as an unrelated image: the distances of the unconditional design measure nothing of the model."""
    _, _, arms, dist = setup
    assert dist["sr"]["none"] < 0.6 * dist["shuffled"]["none"]
    assert dist["sr"]["none"] < 0.6 * dist["unconditional"]["none"]
    assert dist["sr"]["final"] == 0.0  # the control still returns the held-out images


def test_the_blend_factor_is_the_contraction_of_a_range_that_ends_at_the_last_step(setup):
    """The closed form of the unconditional artefact (issue 42: 0.249 x 0.371 = 0.092 for [1, 10]):
    on DDIM (eta 0) a range ending just above the final step contracts the residual to the injected
    image by ``sqrt((1 - ab_exit) / (1 - ab_enter))``; so [1, 10]'s distance is that factor times
    "none"'s in BOTH designs (it is arithmetic of the replacement, not of the model: docs/methods.md
    §3.4), while a range with the model's steps below it ([100, 500], [10, 100]) is not."""
    diffusion, used, arms, dist = setup
    by = {a.label: a for a in arms}
    f = {lab: blend_factor(diffusion, used, *by[lab].replaced) for lab in ("t1-10", "t10-100", "t100-500")}
    assert 0.2 < f["t1-10"] < 0.3 and 0.1 < f["t10-100"] < f["t1-10"] < f["t100-500"] < 1
    for design in ("sr", "unconditional"):
        ratio = {lab: dist[design][lab] / dist[design]["none"] for lab in f}
        assert ratio["t1-10"] == pytest.approx(f["t1-10"], rel=0.03), design
    # on the super-resolution chain the middle range sits well off its blend factor (the model's own
    # steps after it move the sample): the distance then says what the steps below 100 add
    assert dist["sr"]["t100-500"] / dist["sr"]["none"] > 1.5 * f["t100-500"]
    assert np.isfinite(list(dist["sr"].values())).all()


def test_a_superres_run_trains_conditioned_and_its_file_says_so(digits_dir, tmp_path):
    """A tiny lowres run (0.16 kimg): its resolved config names the conditioning, its network takes
    2 channels, the loaded model carries the conditioning, sampling it without a condition fails
    with the reason, and the contribution's branched chains sample it conditioned."""
    from conftest import tiny_config

    from timestep_lab.checkpoints import load_for_inference
    from timestep_lab.config import load_config
    from timestep_lab.studies.contribution import heldout_float
    from timestep_lab.train import train

    cfg = tiny_config(digits_dir, conditioning={"name": "lowres", "params": {"factor": 2}},
                      train={"total_kimg": 0.16, "log_every_kimg": 0.16, "checkpoint_every_kimg": 0.16})
    assert train(cfg, tmp_path / "sr", progress=False).status == "ok"
    assert load_config(tmp_path / "sr" / "config.yaml").conditioning.params == {"factor": 2}
    m = load_for_inference(tmp_path / "sr" / "model.pt")
    assert m.conditioning.name == "lowres" and m.net.in_channels == 2
    den = Denoiser(m.net, m.prediction, m.diffusion, conditioning=m.conditioning)
    x = torch.randn(4, 1, 8, 8)
    with pytest.raises(ValueError, match="needs the condition"):
        den(x, torch.full((4,), 50))
    held = np.stack([np.full((8, 8, 1), v, np.uint8) for v in (0, 80, 160, 240)])
    gt = heldout_float(held, 4)
    arms = contribution_arms([[1, 500]], 100, list(range(100)), min_steps=2)
    out = branched_samples(den, m.diffusion, arms, image_shape=(1, 8, 8), seeds=[0, 1, 2, 3], gt_images=gt,
                           method="ddim", steps=None, eta=0.0, conds=m.conditioning.condition(gt))
    assert out["none"].shape == (4, 8, 8, 1) and heldout_distance(out["final"], held)["copy"].all()
