"""A latent, class-conditional study end to end through Snakemake at tiny sizes, as the paper
rehearsals run theirs (tests/test_paper_rehearsals.py): fake ImageNet in its on-disk layout (class
folders), a random AutoencoderKL saved in diffusers' format, the random rehearsal-cnn features;
prepare -> encode_latents -> train a 3-class DiT with label dropout -> sample with classifier-free
guidance -> decode through the VAE -> score, with the VAE and the guidance scale in the record."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest
import torch
import yaml
from worktree import copy_worktree, study_env

pytestmark = [pytest.mark.workflow, pytest.mark.slow]

diffusers = pytest.importorskip("diffusers")

STUDY = {
    "study": "latent-tiny",
    "reproducibility": "portable",
    "resources": {"device": "cpu", "threads": 1, "gpus": 0, "mem_mb": 1000, "runtime_min": 10},
    "data": {"dataset": "imagenet", "source": "stand-ins/imagenet", "resolution": 8, "train_split": "train",
             "test_split": None},
    "latent": {"vae": "stand-ins/vae", "scaling_factor": 0.18215},
    "evaluation": {"extractor": "rehearsal-cnn", "weights": "stand-ins/rehearsal-cnn.pt", "num_samples": 4,
                   "progress_num_samples": 4, "reference_max_images": 6,
                   "sample": {"method": "ddim", "steps": 3, "eta": 0.0, "guidance_scale": 1.5}},
    "base": {
        # the smallest DiT the code allows at 4x4x4 latents: one block, 8 channels in 2 heads, 4 tokens
        "model": {"name": "dit", "params": {"size": "S/2", "depth": 1, "hidden": 8, "heads": 2, "num_classes": 3,
                                            "class_dropout": 0.1}},
        "diffusion": {"schedule": "linear", "num_timesteps": 50, "prediction": "eps"},
        "data": {"hflip": True},
        "optim": {"lr": 2.0e-3},
        "train": {"batch_size": 4, "total_kimg": 0.008, "ema_halflife_kimg": 0.004, "log_every_kimg": 0.004,
                  "checkpoint_every_kimg": 0.008, "device": "cpu"},
        "sample": {"method": "ddim", "steps": 3, "eta": 0.0, "num_samples": 4, "batch_size": 4, "clip_x0": False,
                   "guidance_scale": 1.5},
    },
    "samplers": {"uniform": {"name": "uniform"}},
    "weightings": {"none": {"name": "none"}},
    "groups": {"sampler_comparison": {"grid": {"sampler": ["uniform"], "weighting": ["none"]}, "seeds": [0]}},
    "reference": {"pretrained": None, "format": "timestep_lab"},
}


def _stand_ins(repo):
    from timestep_lab.rehearsal.fake_data import write_imagenet
    from timestep_lab.rehearsal.fake_weights import write_rehearsal_cnn

    write_imagenet(repo / "stand-ins" / "imagenet", 12)  # train/<wnid>/*.JPEG over 3 classes
    write_rehearsal_cnn(repo / "stand-ins" / "rehearsal-cnn.pt", 3, seed=0)
    torch.manual_seed(0)  # sd-vae-ft-ema's family at tiny widths: 2 levels (8x8 images -> 4x4x4 latents)
    diffusers.AutoencoderKL(in_channels=3, out_channels=3, latent_channels=4, block_out_channels=(8, 16),
                            down_block_types=("DownEncoderBlock2D",) * 2, up_block_types=("UpDecoderBlock2D",) * 2,
                            layers_per_block=1, norm_num_groups=4, sample_size=8).save_pretrained(repo / "stand-ins" / "vae")


def test_a_class_conditional_latent_study_runs_end_to_end(tmp_path):
    from timestep_lab.artifacts.samples_file import load_samples
    from timestep_lab.workflow import study_runs

    repo = copy_worktree(tmp_path / "repo")
    _stand_ins(repo)
    (repo / "config" / "latent-tiny.yaml").write_text(yaml.safe_dump(STUDY, sort_keys=False))
    rid = next(r for r in study_runs(STUDY) if r != "reference")
    res = f"results/{STUDY['study']}"
    out = subprocess.run([sys.executable, "-m", "snakemake", f"{res}/runs/{rid}/metrics.json", "--cores", "1",
                          "--configfile", "config/latent-tiny.yaml"], cwd=repo, env=study_env(), capture_output=True, text=True,
                         timeout=600)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    latents = json.loads((repo / "data/prepared/imagenet-8-train-latents/manifest.json").read_text())
    assert latents["shape"] == [4, 4, 4] and latents["num_classes"] == 3 and latents["flip"]
    labels = np.load(repo / "data/prepared/imagenet-8-train-latents/labels.npy")
    assert sorted(set(labels.tolist())) == [0, 1, 2] and len(labels) == 12
    metrics = json.loads((repo / res / "runs" / rid / "metrics.json").read_text())
    proto = metrics["records"][0]
    assert proto["guidance_scale"] == 1.5 and proto["vae"]["sha256"] == latents["vae"]["sha256"]
    assert proto["feature_extractor"] == "rehearsal-cnn" and np.isfinite(metrics["fid"])
    images, _, meta = load_samples(repo / res / "runs" / rid / "samples.npz")
    assert images.shape == (4, 8, 8, 3)  # decoded from 4x4x4 latents through the VAE
    assert (meta["num_classes"], meta["guidance_scale"]) == (3, 1.5)
