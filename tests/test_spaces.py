"""Each run's space in a latent study (timestep_lab.workflow.spaces, docs/methods.md 7.9): the paper
configs train their groups on latents and the seed paper's pixel models in pixels; a config that
mixes the spaces wrongly is one error naming the run and its space; the pixel studies are untouched;
a latent model's loss-profile bank is its split's scaled posterior means."""

from __future__ import annotations

import copy
from types import SimpleNamespace

import numpy as np
import pytest
import torch
import yaml
from conftest import ROOT

from timestep_lab.config import ConfigError
from timestep_lab.workflow import LATENT, PIXEL, latent_dir, prepared_dir, run_space, study_runs


def _study(name: str) -> dict:
    return yaml.safe_load((ROOT / "config" / f"{name}.yaml").read_text())


@pytest.mark.parametrize(("name", "pixel_model"), [("imagenet", "unet"), ("celebahq", "diffusers_unet2d")])
def test_the_paper_configs_train_groups_on_latents_and_the_papers_pixel_models_in_pixels(name, pixel_model):
    study = _study(name)
    runs = study_runs(study, name)
    spaces = {rid: run_space(study, r.config) for rid, r in runs.items()}
    pixel = {rid for rid, s in spaces.items() if s == PIXEL}
    assert pixel == {"reference", "superres", "finetune_uniform", *(f"finetune_slot{k}" for k in (3, 5, 7, 9))}
    latents, images = latent_dir(study["data"], "train"), prepared_dir(study["data"], "train")
    for rid, run in runs.items():
        model = run.config["model"]
        if spaces[rid] == LATENT:  # every group's run, the small-batch continuation included
            assert run.config["data"]["path"] == latents and model["name"] == "dit", rid
            assert run.groups or rid.startswith("toward_zero_from-"), rid
        else:
            assert run.config["data"]["path"] == images and model.get("name", "unet") != "dit", rid
            assert not run.groups or run.groups == ("reference",), rid
    # the fine-tunes train the pretrained model's own network; the SR model the pixel base's UNet, conditioned
    assert runs["finetune_slot3"].config["model"].get("name", "unet") == pixel_model
    assert runs["finetune_slot3"].init_from == "reference"
    assert runs["superres"].config["model"].get("name", "unet") == "unet"
    assert runs["superres"].config["conditioning"]["name"] == "lowres"
    assert runs["superres"].config["sample"]["clip_x0"] is True  # images are clipped, latents are not
    assert all(runs[r].config["sample"]["clip_x0"] is False for r in spaces if spaces[r] == LATENT)


def test_imagenet_dit_b_is_imagenet_with_dit_b():
    """config/imagenet-dit-b.yaml keeps imagenet.yaml's groups, analyses and pixel runs; only the
    study name, the DiT size, the width arm and the SR model's length differ."""
    xl, b = _study("imagenet"), _study("imagenet-dit-b")
    assert b["base"]["model"]["params"]["size"] == "B/2" and xl["base"]["model"]["params"]["size"] == "XL/2"
    for key in ("latent", "evaluation", "pixel", "samplers", "weightings", "reference", "resources", "data"):
        assert b[key] == xl[key], key
    assert list(b["groups"]) == list(xl["groups"]) and list(b["analyses"]) == list(xl["analyses"])
    assert {k: v for k, v in b["groups"].items() if k != "consistency"} == \
        {k: v for k, v in xl["groups"].items() if k != "consistency"}
    assert {k: v for k, v in b["analyses"].items() if k != "timestep_contribution"} == \
        {k: v for k, v in xl["analyses"].items() if k != "timestep_contribution"}


def test_a_pixel_study_has_no_latent_run():
    for name in ("smoke", "cifar10", "mnist"):
        study = _study(name)
        assert {run_space(study, r.config) for r in study_runs(study, name).values()} == {PIXEL}, name


def test_mixing_the_spaces_wrongly_is_one_error_naming_the_run_and_its_space():
    study = _study("imagenet")
    no_pixel = {k: v for k, v in study.items() if k != "pixel"}  # the guided-diffusion reference's runs get a DiT
    with pytest.raises(ConfigError, match=r"imagenet.yaml: run 'finetune_slot3' is in pixel space \(it starts from "
                                          r"the pixel reference\) but its model is dit.*pixel.base.model"):
        study_runs(no_pixel, "imagenet.yaml")
    # without a pixel section the SR model stays latent; with a pixel section lacking a model, it is a pixel DiT
    celeba = _study("celebahq")
    celeba["pixel"] = {"base": {"optim": {"lr": 2e-5}}}
    with pytest.raises(ConfigError, match=r"run 'superres' is in pixel space \(the contribution conditions it on "
                                          r"low-resolution images\) but its model is dit"):
        study_runs(celeba, "celebahq.yaml")
    # a group's run starting from the pixel reference would train on latents from a pixel model
    bad = copy.deepcopy(study)
    bad["groups"]["consistency"]["list"].append({"seed": 5, "init_from": "reference"})
    with pytest.raises(ConfigError, match=r"run 'uniform_none_eps_b256_linear_s5.*' trains on latents but starts "
                                          r"from 'reference', a pixel-space model"):
        study_runs(bad, "imagenet.yaml")
    optimal = copy.deepcopy(study)
    optimal["analyses"]["loss_profile"]["optimal"] = True
    with pytest.raises(ConfigError, match="imagenet.yaml: analyses.loss_profile.optimal: .* on latents"):
        study_runs(optimal, "imagenet.yaml")
    pixel_study = _study("cifar10")
    pixel_study["pixel"] = {"base": {}}
    with pytest.raises(ConfigError, match="cifar10.yaml: pixel: .* latent.vae is not set"):
        study_runs(pixel_study, "cifar10.yaml")


def test_a_latent_bank_is_the_scaled_posterior_means_by_row():
    """The profile bank of a latent model: x0 = s * mu of the drawn rows, float32 NCHW, the same rows
    and noise as a uint8 bank of the same size and seed (profile_bank's indices depend on N and seed)."""
    from timestep_lab.latents import LatentBank
    from timestep_lab.studies.profile import profile_bank

    mean = np.random.default_rng(0).standard_normal((10, 4, 2, 2)).astype(np.float16)
    bank = LatentBank(SimpleNamespace(arrays={"mean": mean}, scaling_factor=0.5))
    assert bank.shape == (10, 4, 2, 2) and len(bank) == 10
    x0, eps, idx = profile_bank(bank, 6, seed=3)
    assert x0.dtype == torch.float32 and tuple(x0.shape) == (6, 4, 2, 2) == tuple(eps.shape)
    torch.testing.assert_close(x0, 0.5 * torch.from_numpy(mean[idx.numpy()].astype(np.float32)))
    _, _, idx_images = profile_bank(np.zeros((10, 2, 2, 3), np.uint8), 6, seed=3)
    assert torch.equal(idx, idx_images)
