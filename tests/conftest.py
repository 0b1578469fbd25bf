"""Shared fixtures: a prepared digits folder and a tiny, fast run config."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

from timestep_lab.config import RunConfig, config_from_dict

# one intra-op thread: two threads on a loaded 2-core machine run many times slower
torch.set_num_threads(1)

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="session")
def digits_dir(tmp_path_factory) -> Path:
    from timestep_lab.data import prepare

    return prepare("digits", None, tmp_path_factory.mktemp("data") / "digits-train", split="train")


@pytest.fixture(scope="session")
def digits_test_dir(tmp_path_factory) -> Path:
    from timestep_lab.data import prepare

    return prepare("digits", None, tmp_path_factory.mktemp("data") / "digits-test", split="test")


def tiny_config(data_path: Path | str, **sections) -> RunConfig:
    """A run config small enough to train in seconds on a CPU."""
    base = {
        "data": {"name": "digits", "path": str(data_path)},
        "model": {"channels": 8, "channel_mult": [1, 2], "num_res_blocks": 1, "norm_groups": 4},
        "diffusion": {"num_timesteps": 100},
        "optim": {"lr": 2e-3},
        "train": {"batch_size": 32, "total_kimg": 0.64, "log_every_kimg": 0.16, "checkpoint_every_kimg": 0.32,
                  "ema_halflife_kimg": 0.1, "device": "cpu", "seed": 0},
        "sample": {"num_samples": 16, "steps": 10, "batch_size": 16},
    }
    for section, values in sections.items():
        base.setdefault(section, {}).update(values)
    return config_from_dict(base, "tiny_config")


@pytest.fixture
def tiny_cfg(digits_dir) -> RunConfig:
    return tiny_config(digits_dir)
