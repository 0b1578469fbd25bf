"""A longer run continued from a shorter run of its config (timestep_lab.train.continuation): the
same final weights and log as the longer run trained from image 0, and only a shorter run of the
very same config is taken."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys

import pytest
import torch
from conftest import tiny_config
from test_train import assert_same_weights, read_log, weights

from timestep_lab.arithmetic import LEVEL_ENV
from timestep_lab.artifacts.io import ArtifactError, load_torch
from timestep_lab.config import dump_config
from timestep_lab.train import train
from timestep_lab.train.continuation import seed_state
from timestep_lab.train.files import RunPaths

# a stateful sampler (its loss history is part of the state), warm-up and EMA in images, snapshots
# on both sides of the shorter run's end: everything that must carry over does
SECTIONS = {"optim": {"lr": 2e-3, "warmup_kimg": 0.2},
            "timesteps": {"name": "loss_second_moment", "params": {"history": 2, "uniform_prob": 0.1}}}
TRAIN = {"log_every_kimg": 0.16, "checkpoint_every_kimg": 0.32, "snapshot_every_kimg": 0.16}


def _cfg(digits_dir, kimg, **train_extra):
    return tiny_config(digits_dir, **SECTIONS, train={**TRAIN, "total_kimg": kimg, **train_extra})


def _sha(path):
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_a_continued_run_ends_with_the_weights_of_the_longer_run_trained_from_scratch(digits_dir, tmp_path):
    short, long = _cfg(digits_dir, 0.32), _cfg(digits_dir, 0.64)
    train(short, tmp_path / "short", progress=False)
    scratch = train(long, tmp_path / "scratch", progress=False)
    short_model = _sha(tmp_path / "short" / "model.pt")
    cont = train(long, tmp_path / "cont", progress=False, continue_from=tmp_path / "short")
    assert cont.status == "ok" and cont.nimg == scratch.nimg == 640
    for key in ("model", "ema"):
        assert_same_weights(weights(scratch.model_path, key), weights(cont.model_path, key))
    assert load_torch(cont.model_path)["config"] == load_torch(scratch.model_path)["config"]
    ls = [(r["nimg"], r["loss"]) for r in read_log(tmp_path / "scratch" / "train_log.jsonl")]
    lc = [(r["nimg"], r["loss"]) for r in read_log(tmp_path / "cont" / "train_log.jsonl")]
    assert ls == lc and [n for n, _ in ls] == [160, 320, 480, 640]
    # every snapshot of the longer run, the shorter run's included (theirs name its length: a snapshot
    # of a run may come from a shorter run of it, timestep_lab.checkpoints.provenance)
    snaps = sorted(p.name for p in (tmp_path / "scratch" / "snapshots").glob("*.pt"))
    assert snaps == sorted(p.name for p in (tmp_path / "cont" / "snapshots").glob("*.pt")) and len(snaps) == 4
    for name in snaps:
        a, b = load_torch(tmp_path / "scratch" / "snapshots" / name), load_torch(tmp_path / "cont" / "snapshots" / name)
        assert a["nimg"] == b["nimg"] and all(torch.equal(a["ema"][k], b["ema"][k]) for k in a["ema"]), name
    # the shorter run is read by the claims judged at its length: none of its files changed
    assert _sha(tmp_path / "short" / "model.pt") == short_model
    assert load_torch(tmp_path / "short" / "train_state" / "checkpoint.pt")["nimg"] == 320
    assert len(read_log(tmp_path / "short" / "train_state" / "train_log.jsonl")) == 2


def test_only_a_shorter_run_of_the_same_run_is_continued(digits_dir, tmp_path):
    train(_cfg(digits_dir, 0.32), tmp_path / "short", progress=False)
    long = _cfg(digits_dir, 0.64)
    other_lr = tiny_config(digits_dir, **{**SECTIONS, "optim": {"lr": 1e-3, "warmup_kimg": 0.2}}, train={**TRAIN, "total_kimg": 0.64})
    refused = {"other": (other_lr, r"short: not a shorter run of .*other: its train_state/ was written with a "
                                   r"different config \(optim\.lr\)"),
               "shorter": (_cfg(digits_dir, 0.16), r"its train_state/ is at 0\.32 kimg, past train\.total_kimg=0\.16")}
    for name, (cfg, message) in refused.items():
        with pytest.raises(ArtifactError, match=message):
            train(cfg, tmp_path / name, progress=False, continue_from=tmp_path / "short")
        assert not (tmp_path / name / "model.pt").exists() and not list((tmp_path / name).glob("stale-*")), name
    with pytest.raises(ArtifactError, match=r"nothing/train_state/checkpoint\.pt: no training state to continue from"):
        train(long, tmp_path / "x", progress=False, continue_from=tmp_path / "nothing")
    # computed at another reproducibility level: the same config, another arithmetic
    with pytest.raises(ArtifactError, match=r"its train_state/ was computed at another reproducibility level "
                                            r"\(None, now portable\)"):
        train(long, tmp_path / "level", progress=False, continue_from=tmp_path / "short",
              code={"arithmetic": {"level": "portable"}})
    # logging and checkpoint spacing are not the run: a state written with other spacing continues
    spaced = tiny_config(digits_dir, **SECTIONS, train={**TRAIN, "total_kimg": 0.64, "log_every_kimg": 0.32})
    inputs = load_torch(tmp_path / "short" / "train_state" / "checkpoint.pt")["inputs"]  # the same data and level
    assert seed_state(RunPaths(tmp_path / "spaced"), tmp_path / "short", spaced, inputs)
    # the log is the copy's own (a resumed run truncates and appends to it), never a link to the shorter run's
    assert not (tmp_path / "spaced" / "train_state" / "train_log.jsonl").samefile(
        tmp_path / "short" / "train_state" / "train_log.jsonl")
    assert sorted(p.name for p in (tmp_path / "spaced" / "train_state").rglob("*")) == \
        sorted(p.name for p in (tmp_path / "short" / "train_state").rglob("*"))
    # a folder with a state of its own keeps it (and resumes it)
    train(long, tmp_path / "own", progress=False, stop_after_kimg=0.16)
    before = _sha(tmp_path / "own" / "train_state" / "checkpoint.pt")
    assert not seed_state(RunPaths(tmp_path / "own"), tmp_path / "short", long, inputs)
    assert _sha(tmp_path / "own" / "train_state" / "checkpoint.pt") == before


def test_the_command_line_continues_a_run_and_refuses_it_without_resuming(digits_dir, tmp_path):
    # the shorter run as the command computes it (its reproducibility level named), the longer one by the command
    train(_cfg(digits_dir, 0.32), tmp_path / "short", progress=False, code={"arithmetic": {"level": "native"}})
    dump_config(_cfg(digits_dir, 0.64), tmp_path / "long.yaml")
    env = {**os.environ, LEVEL_ENV: "native"}
    cmd = [sys.executable, "-m", "timestep_lab", "train", "--no-progress", "--threads", "1", "--config",
           str(tmp_path / "long.yaml"), "--continue-from", str(tmp_path / "short")]
    r = subprocess.run([*cmd, "--out", str(tmp_path / "a"), "--no-resume"], capture_output=True, text=True, env=env)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert r.stderr.startswith("error: --continue-from resumes the shorter run's state: it cannot be combined with "
                               "--no-resume")
    r = subprocess.run([*cmd, "--out", str(tmp_path / "b")], capture_output=True, text=True, env=env)
    assert r.returncode == 0, r.stderr
    assert f"{tmp_path / 'b'}: continues {tmp_path / 'short'} from 0.3 kimg" in r.stderr
    assert f"resumed {tmp_path / 'b'} at 0.3 kimg" in r.stderr
    assert load_torch(tmp_path / "b" / "model.pt")["nimg"] == 640
