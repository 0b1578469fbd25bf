"""Which space each run of a study trains and is scored in: pixels or the VAE's latents.

A study is latent when ``latent.vae`` names a VAE (:func:`timestep_lab.workflow.runs.is_latent`):
the groups' runs train on the encoded split and their samples are decoded before scoring. A
latent study may still hold pixel runs, decided per run, never study-wide (docs/methods.md 7.9):

* ``reference``, when it is a pretrained checkpoint in a pixel format (``reference.format``
  ``diffusers`` or ``guided_diffusion``: the seed paper's released UNets), and every run that
  starts from it (the slot fine-tunes and their controls): the loss profile, its slots, the
  interference analysis and the posterior read pixel models on the prepared images;
* ``superres``, the timestep-contribution model, when the study has a ``pixel`` section: it is
  conditioned on a low-resolution copy of a held-out image and that image is injected into its
  chain, as the paper ran it on guided-diffusion's pixel SR model.

A pixel run's config is ``base`` with ``pixel.base`` merged over it, its ``model`` section
replaced whole by ``pixel.base.model`` (a DiT's fields do not apply to a UNet), on the prepared
split. :func:`check_spaces` fails, naming the run and its space, where a config mixes them:
a pixel run given a latent network (DiT), a latent run starting from a pixel run or from a pixel
checkpoint. Pure functions of dicts: no Snakemake, no torch, no files.
"""

from __future__ import annotations

import copy
from typing import Any, Mapping

from timestep_lab.config import ConfigError
from timestep_lab.workflow.runs import Run, deep_merge, is_latent, latent_dir

__all__ = ["PIXEL", "LATENT", "PIXEL_FORMATS", "LATENT_MODELS", "pixel_study", "reference_in_pixels",
           "superres_in_pixels", "run_space", "check_spaces"]

PIXEL, LATENT = "pixel", "latent"
#: checkpoint formats that hold pixel-space networks (the seed paper's released UNets)
PIXEL_FORMATS = ("diffusers", "guided_diffusion")
#: networks built for the VAE's latents only (models/dit.py)
LATENT_MODELS = ("dit",)


def pixel_study(study: Mapping[str, Any]) -> dict[str, Any]:
    """``study`` as its pixel runs see it: no ``latent`` section (their data are the prepared
    split), ``base`` with ``pixel.base`` merged over it and ``base.model`` replaced whole by
    ``pixel.base.model`` when given."""
    out = {k: v for k, v in study.items() if k != "latent"}
    delta = dict((study.get("pixel") or {}).get("base") or {})
    base = copy.deepcopy(dict(study.get("base") or {}))
    if "model" in delta:
        base["model"] = copy.deepcopy(delta.pop("model"))
    out["base"] = deep_merge(base, delta)
    return out


def reference_in_pixels(study: Mapping[str, Any]) -> bool:
    """Whether a latent study's reference is a pixel model: a pretrained checkpoint in a pixel
    format (:data:`PIXEL_FORMATS`)."""
    ref = study.get("reference") or {}
    return is_latent(study) and bool(ref.get("pretrained")) and ref.get("format") in PIXEL_FORMATS


def superres_in_pixels(study: Mapping[str, Any]) -> bool:
    """Whether a latent study's super-resolution model is a pixel model: it has a ``pixel`` section."""
    return is_latent(study) and bool(study.get("pixel"))


def run_space(study: Mapping[str, Any], config: Mapping[str, Any]) -> str:
    """:data:`LATENT` when the run config trains on the study's encoded split, else :data:`PIXEL`."""
    if not is_latent(study):
        return PIXEL
    path = (config.get("data") or {}).get("path")
    return LATENT if path == latent_dir(study["data"], study["data"].get("train_split", "train")) else PIXEL


def _why_pixel(rid: str, run: Run) -> str:
    if rid == "reference":
        return "the pretrained pixel reference"
    if run.init_from == "reference":
        return "it starts from the pixel reference"
    return "the contribution conditions it on low-resolution images" if run.extra.get("superres") else "its data"


def check_spaces(study: Mapping[str, Any], runs: Mapping[str, Run], source: str = "study") -> None:
    """Fail, naming the run and its space, where a study mixes the spaces wrongly (module
    docstring); a ``pixel`` section in a pixel study is refused too (it would change nothing), and
    the optimal-denoiser profile (images) beside latent runs' profiles."""
    if study.get("pixel") and not is_latent(study):
        raise ConfigError(f"{source}: pixel: the pixel runs' section of a latent study, but latent.vae is not set "
                          f"(every run of this study is in pixel space); delete the section")
    spaces = {rid: run_space(study, run.config) for rid, run in runs.items()}
    profiled = [r for r, run in runs.items() if {"batch_size", "prediction_types"} & set(run.groups)]
    if ((study.get("analyses") or {}).get("loss_profile") or {}).get("optimal") and \
            any(spaces[r] == LATENT for r in profiled):  # its excess would subtract an image-space floor
        raise ConfigError(f"{source}: analyses.loss_profile.optimal: the optimal denoiser is profiled on the images; "
                          f"the batch-size and prediction-type profiles of this study's latent runs are on latents "
                          f"(docs/methods.md 7.9); set it false")
    loaded = reference_in_pixels(study)  # the pretrained reference's network is its checkpoint's, not its config's
    for rid, run in runs.items():
        model = run.config.get("model") or {}
        if is_latent(study) and spaces[rid] == PIXEL and model.get("name") in LATENT_MODELS and \
                not (loaded and rid == "reference"):
            raise ConfigError(f"{source}: run '{rid}' is in pixel space ({_why_pixel(rid, run)}) but its model is "
                              f"{model.get('name')}, a network of the VAE's latents: set pixel.base.model to the "
                              f"pixel network (docs/methods.md 7.9)")
        if spaces[rid] == LATENT and run.init_from and spaces.get(run.init_from) == PIXEL:
            raise ConfigError(f"{source}: run '{rid}' trains on latents but starts from '{run.init_from}', a pixel-space "
                              f"model: start it from a latent run")
        if spaces[rid] == LATENT and model.get("pretrained") and model.get("pretrained_format") in PIXEL_FORMATS:
            raise ConfigError(f"{source}: run '{rid}' trains on latents but its model.pretrained "
                              f"({model.get('pretrained_format')}) is a pixel-space checkpoint")
