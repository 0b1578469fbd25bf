"""Rehearsals (`python -m timestep_lab rehearse`): the scaled-down config keeps every group,
sampler, weighting and analysis; the stand-ins are in their real formats and load where the
real inputs would; a real run's needs are named. The rehearsals of the three paper configs run
end to end through Snakemake in tests/test_paper_rehearsals.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from study_plans import study_plan
from worktree import ROOT

from timestep_lab.processes.solvers import respaced_timesteps
from timestep_lab.rehearsal.needs import real_run_needs
from timestep_lab.rehearsal.paths import RehearsalPaths
from timestep_lab.rehearsal.scale import SIZES, rehearsal_study
from timestep_lab.studies.contribution import contribution_arms
from timestep_lab.workflow import run_space, study_runs
from timestep_lab.workflow.spaces import pixel_study

PAPER_CONFIGS = ("cifar10", "celebahq", "imagenet")


@pytest.fixture(scope="module")
def plans():
    return {name: study_plan(name).study for name in PAPER_CONFIGS}


def _rehearsal(study, fast=True):
    return rehearsal_study(study, source=f"config/{study['study']}.yaml", paths=RehearsalPaths("rehearsal", study["study"]),
                           fast_features=fast)


def _arms(runs, group):
    """(sampler, weighting, prediction, schedule) of a group's runs, and how many batch sizes and seeds."""
    rs = [r for r in runs.values() if group in r.groups]
    return ({tuple(r.axes[a] for a in ("sampler", "weighting", "prediction", "schedule")) for r in rs},
            len({r.axes["batch_size"] for r in rs}), sorted({r.axes["seed"] for r in rs}))


@pytest.mark.parametrize("name", PAPER_CONFIGS)
def test_rehearsal_keeps_every_group_sampler_weighting_and_analysis(plans, name):
    study = plans[name]
    reh = _rehearsal(study)
    assert reh["study"] == f"{name}-rehearsal" and reh["rehearsal"]["of"] == f"config/{name}.yaml"
    for key in ("groups", "samplers", "weightings", "analyses"):
        assert set(reh[key]) == set(study[key]), key
    tc, small_tc = study["analyses"]["timestep_contribution"], reh["analyses"]["timestep_contribution"]
    assert small_tc["ranges"] == tc["ranges"]
    # its chain: the same method and eta, at most contribution_steps steps, and every paper range
    # still holds at least min_steps of them once the final step is left out (the real check)
    chain = small_tc["sample"]
    assert (chain["method"], chain["eta"]) == (tc["sample"]["method"], tc["sample"]["eta"])
    assert chain["steps"] <= SIZES.contribution_steps < (tc["sample"]["steps"] or 1000)
    T = study["base"]["diffusion"]["num_timesteps"]
    used = respaced_timesteps(T, chain["steps"], chain["spacing"]).tolist()
    arms = contribution_arms(small_tc["ranges"], T, used, min_steps=small_tc["min_steps"])
    assert len(arms) == 2 + len(tc["ranges"]) and min(a.steps for a in arms if a.kind == "range") >= 2
    runs, small = study_runs(study), study_runs(reh)
    for group, spec in study["groups"].items():
        arms, batches, seeds = _arms(runs, group)
        r_arms, r_batches, r_seeds = _arms(small, group)
        assert r_arms == arms and r_batches == batches, group
        # a group's seed list keeps its first two; list entries keep theirs (the consistency design)
        assert r_seeds == (sorted(spec["seeds"])[:2] if spec.get("seeds") else seeds), group
    assert _arms(small, "sampler_comparison")[2] == [0, 1]  # two paired seeds: every comparison has an interval
    # no run lost and none merged: only the sampler comparison's third seed is left out
    third = [r for r in runs.values() if r.groups == ("sampler_comparison",) and r.axes["seed"] >= 2]
    assert len(third) == 10 and len(small) == len(runs) - len(third)
    assert sum(1 for r in runs.values() if r.extra.get("slot")) == sum(1 for r in small.values() if r.extra.get("slot")) == 4
    # tiny, CPU, inputs pointing at the stand-ins, prepared beside them (never into data/prepared)
    assert reh["resources"]["device"] == "cpu" and reh["resources"]["gpus"] == 0
    assert max(r.config["train"]["total_kimg"] for r in small.values()) <= SIZES.kimg
    assert max(r.config["train"]["batch_size"] for r in small.values()) <= SIZES.max_batch
    assert reh["data"]["source"].startswith(f"rehearsal/{name}/raw/") and reh["data"]["prepared"] == f"rehearsal/{name}/prepared"
    assert reh["reference"]["pretrained"].startswith(f"rehearsal/{name}/pretrained/")
    assert reh["reference"]["format"] == study["reference"]["format"]
    assert reh["evaluation"]["extractor"] == "rehearsal-cnn"
    inception = _rehearsal(study, fast=False)["evaluation"]
    assert inception["extractor"] == "inception-v3" and inception["weights"] == "rehearsal/inception"
    # the batch-size analysis still compares a small and a large batch of the same images seen
    bs = reh["analyses"]["batch_size"]
    assert bs["small"] < bs["large"] and bs["small"] in reh["groups"]["batch_size"]["grid"]["batch_size"]
    # the consistency study's narrower network stays narrower
    def width(model):  # a UNet's channels, a DiT's hidden width (the latent studies)
        return model.get("channels") or model["params"]["hidden"]

    widths = {width(r.config["model"]) for r in small.values() if "consistency" in r.groups}
    assert len(widths) == 2 and min(widths) < width(reh["base"]["model"])
    if name != "cifar10":  # latent: a tiny DiT, the VAE stand-in, the pixel runs' UNet scaled as a pixel study's
        assert reh["latent"]["vae"] == f"rehearsal/{name}/vae" and reh["base"]["model"]["params"]["depth"] == 1
        assert reh["pixel"]["base"]["model"]["channel_mult"] == [1, 2] and "VAE sd-vae-ft-ema" in " ".join(
            reh["rehearsal"]["stand_ins"])
        assert {run_space(reh, r.config) for r in small.values() if r.groups and "reference" not in r.groups} == {"latent"}


def test_fake_data_prepares_with_the_real_preparers(tmp_path):
    from timestep_lab.data import PreparedData, prepare
    from timestep_lab.rehearsal.fake_data import FAKE_DATA

    tar, made = FAKE_DATA["cifar10"](tmp_path / "cifar-10-python.tar.gz", 10, 3, 0), time.time()
    with tarfile.open(tar) as t:
        blob = t.extractfile("cifar-10-batches-py/data_batch_1").read()
    assert blob.startswith(b"\x80\x02}(") and b"cnumpy.core.multiarray\n_reconstruct" in blob  # Python 2's cPickle
    train = PreparedData(prepare("cifar10", tar, tmp_path / "c-train"), verify=True)
    test = PreparedData(prepare("cifar10", tar, tmp_path / "c-test", split="test"))
    assert train.images.shape == (10, 32, 32, 3) and len(test) == 3 and train.labels.max() < 10
    celeb = PreparedData(prepare("celebahq", FAKE_DATA["celebahq"](tmp_path / "celeba", 7), tmp_path / "h", resolution=16))
    assert celeb.images.shape == (7, 16, 16, 3) and celeb.images.std() > 10
    imnet = PreparedData(prepare("imagenet", FAKE_DATA["imagenet"](tmp_path / "ILSVRC", 6), tmp_path / "i", resolution=16))
    assert imnet.images.shape == (6, 16, 16, 3) and sorted(set(imnet.labels.tolist())) == [0, 1, 2]
    assert FAKE_DATA["digits"] is None  # bundled with scikit-learn
    time.sleep(max(0.0, 1.05 - (time.time() - made)))  # a second later: a time in the gzip header would show
    again = FAKE_DATA["cifar10"](tmp_path / "again" / "cifar-10-python.tar.gz", 10, 3, 0)
    assert again.read_bytes() == tar.read_bytes()  # the same bytes every time


@pytest.mark.parametrize("name", ["cifar10", "imagenet"])
def test_fake_reference_is_read_in_its_format_and_fine_tunes_load_it(plans, name, tmp_path):
    """The pretrained reference the workflow samples, profiles and fine-tunes: diffusers folder
    (cifar10) or guided-diffusion state dict (imagenet), loadable both ways."""
    from timestep_lab.checkpoints import load_for_inference, load_init_weights
    from timestep_lab.components import build_model
    from timestep_lab.config import config_from_dict, load_yaml
    from timestep_lab.rehearsal.fake_weights import FAKE_REFERENCES
    from timestep_lab.workflow import write_run_config

    reh = _rehearsal(plans[name])
    fmt, res = reh["reference"]["format"], reh["data"]["resolution"] or 32
    base = pixel_study(reh)["base"]  # imagenet: the pixel runs' network (the groups train a DiT on latents)
    ref = FAKE_REFERENCES[fmt](tmp_path / Path(reh["reference"]["pretrained"]).name, base, res, 3, 0)
    loaded = load_for_inference(ref, fmt)
    assert loaded.info["format"] == fmt and loaded.diffusion.T == 1000 and loaded.info["nimg"] is None
    x = torch.randn(2, 3, res, res)
    with torch.no_grad():
        assert loaded.net(x, torch.tensor([0, 999])).shape == (2, 3, res, res)
    # the fine-tunes start from it: the uniform-t control's run config, as the workflow writes it
    run = next(r for r in study_runs(reh).values() if r.extra.get("control"))
    out = tmp_path / "run.yaml"
    write_run_config(run.config, str(out), init_from=str(ref))
    cfg = config_from_dict(load_yaml(out), "run.yaml")
    load_init_weights(build_model(cfg, res, 3), str(ref), use_ema=True)


def test_the_vae_stand_in_is_a_tiny_autoencoder_kl_in_diffusers_format(tmp_path):
    """rehearsal/<name>/vae: a random AutoencoderKL of sd-vae-ft-ema's family (2 levels) that the
    latent path loads from its folder, 8x8 images -> 4x4x4 latents; the tiny DiT's width table is
    DiT's published one."""
    pytest.importorskip("diffusers")
    from timestep_lab.latents import encode_moments, load_vae
    from timestep_lab.models.dit import DIT_SIZES
    from timestep_lab.rehearsal.latent import DIT_HIDDEN, tiny_hidden, write_vae

    vae, info = load_vae(write_vae(tmp_path / "vae", seed=0))
    mean, std = encode_moments(vae, torch.zeros(1, 3, 8, 8))
    assert mean.shape == std.shape == (1, 4, 4, 4) and info.scaling_factor == pytest.approx(0.18215)
    assert DIT_HIDDEN == {k: v.hidden for k, v in DIT_SIZES.items()}
    xl = {"params": {"size": "XL/2"}}
    assert tiny_hidden(864, xl) == 12 and tiny_hidden(1152 * 2, xl) == 32 and tiny_hidden(1100, xl) == 12


def test_rehearsal_cnn_gives_both_tools_the_same_features(tmp_path):
    from timestep_lab.metrics import load_feature_extractor
    from timestep_lab.metrics.fid import cf_features, tf_features
    from timestep_lab.rehearsal.fake_weights import write_rehearsal_cnn

    path = write_rehearsal_cnn(tmp_path / "rehearsal-cnn.pt", 3, seed=0)
    spec = load_feature_extractor("rehearsal-cnn", path)
    assert spec.label == "FID (rehearsal stand-in features)" and spec.feature_dim == 32
    images = np.random.default_rng(0).integers(0, 256, (5, 16, 16, 3), dtype=np.uint8)
    tf, cf = (f(images, spec, torch.device("cpu"), 4) for f in (tf_features, cf_features))
    assert tf.shape == (5, 32) and tf.std() > 1e-3
    np.testing.assert_allclose(tf, cf, rtol=1e-5, atol=1e-6)  # the same pixels into the same network
    assert write_rehearsal_cnn(tmp_path / "again.pt", 3, seed=0).read_bytes() == path.read_bytes()


def test_real_run_needs_name_every_missing_input_and_the_gpus(plans, tmp_path):
    cifar = real_run_needs(plans["cifar10"], tmp_path)
    text = "\n".join(cifar)
    assert "data/raw/cifar-10-python.tar.gz (cifar10, MISSING)" in text
    assert "weights-inception-2015-12-05-6726825d.pth (MISSING)" in text and "inception-2015-12-05.pt (MISSING)" in text
    assert "data/pretrained/ddpm-cifar10-32 (diffusers format, MISSING)" in text
    assert "GPUs: 1 GPU(s) per training job" in text and "8 CPU threads" in text
    (tmp_path / "data" / "raw").mkdir(parents=True)
    (tmp_path / "data" / "raw" / "cifar-10-python.tar.gz").write_bytes(b"x")
    assert "(cifar10, present)" in "\n".join(real_run_needs(plans["cifar10"], tmp_path))
    imagenet = "\n".join(real_run_needs(plans["imagenet"], tmp_path))
    assert "guided_diffusion format" in imagenet and "8 GPU(s) per training job under torchrun" in imagenet


def _cli(args, cwd):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")])}
    return subprocess.run([sys.executable, "-m", "timestep_lab", "rehearse", *args], cwd=cwd, capture_output=True,
                          text=True, env=env, timeout=300)


def test_rehearse_refuses_what_it_cannot_rehearse_with_one_line(tmp_path):
    r = _cli([str(ROOT / "config" / "cifar10.yaml")], tmp_path)  # not the project root
    assert r.returncode == 2 and r.stderr.strip().splitlines()[-1].startswith("error:") and "Snakefile" in r.stderr
    assert "Traceback" not in r.stderr
    r = _cli(["config/nope.yaml", "--prepare-only"], ROOT)
    assert r.returncode == 2 and "config/nope.yaml: no such study config" in r.stderr
    again = tmp_path / "rehearsal.yaml"
    study = _rehearsal(study_plan("cifar10").study)
    again.write_text(json.dumps(study))
    r = _cli([str(again), "--prepare-only"], ROOT)
    assert r.returncode == 2 and "is itself a rehearsal (of config/cifar10.yaml)" in r.stderr
