"""Faults and bad input at the artifact level: corrupted checkpoints and samples, a full disk,
pickles that would run code. (Workflow-level faults, SIGKILL and diverging runs, are in
test_pipeline.py.)"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import ROOT, tiny_config

from timestep_lab.artifacts.io import ArtifactError, UnsafeCheckpointError, load_torch, peek_torch, save_torch, sha256_file
from timestep_lab.generate.sampling import load_samples, save_samples
from timestep_lab.train import train


def _cli(*args: str, preexec=None) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    return subprocess.run([sys.executable, "-m", "timestep_lab", *args], env=env, capture_output=True, text=True,
                          preexec_fn=preexec, timeout=300)


@pytest.fixture(scope="module")
def trained(digits_dir, tmp_path_factory) -> Path:
    """A finished tiny run (model.pt)."""
    out = tmp_path_factory.mktemp("faults") / "run"
    train(tiny_config(digits_dir, train={"total_kimg": 0.32}), out, progress=False)
    return out


def test_truncated_model_is_refused_by_name_and_nothing_is_written(trained, tmp_path):
    bad = tmp_path / "model.pt"
    raw = (trained / "model.pt").read_bytes()
    bad.write_bytes(raw[: len(raw) // 2])
    r = _cli("sample", "--model", str(bad), "--out", str(tmp_path / "s.npz"), "--set", "sample.num_samples=4",
             "--no-progress")
    assert r.returncode == 2, r.stderr
    assert f"error: {bad}" in r.stderr and "Traceback" not in r.stderr
    assert not (tmp_path / "s.npz").exists()


def test_sample_settings_are_peeked_without_the_weights_and_the_full_load_still_checks_the_file(trained, tmp_path):
    """``sample`` reads the model's ``sample:`` settings with peek_torch (tensors mapped, not read),
    then loads the file once in full: a file whose weights were changed after it was written
    still fails on its checksum, naming the file, before any sample is written."""
    full, peek = load_torch(trained / "model.pt"), peek_torch(trained / "model.pt")
    assert peek["config"] == full["config"] and set(peek) == set(full)
    assert all(torch.equal(peek["ema"][k], v) for k, v in full["ema"].items())
    obj = torch.load(trained / "model.pt", weights_only=True)
    next(iter(obj["ema"].values())).add_(1.0)  # damaged weights behind an intact checksum entry
    bad = tmp_path / "model.pt"
    torch.save(obj, bad)
    assert peek_torch(bad)["config"] == full["config"]
    r = _cli("sample", "--model", str(bad), "--out", str(tmp_path / "s.npz"), "--set", "sample.num_samples=4",
             "--no-progress")
    assert r.returncode == 2 and f"error: {bad}: corrupted" in r.stderr and "Traceback" not in r.stderr, r.stderr
    assert not (tmp_path / "s.npz").exists()
    with pytest.raises(ArtifactError, match="truncated"):
        (tmp_path / "cut.pt").write_bytes((trained / "model.pt").read_bytes()[:1000])
        peek_torch(tmp_path / "cut.pt")


def test_corrupted_resume_checkpoint_is_named_not_silently_restarted(digits_dir, tmp_path):
    cfg = tiny_config(digits_dir, train={"total_kimg": 0.64})
    out = tmp_path / "run"
    train(cfg, out, progress=False, stop_after_kimg=0.32)
    ckpt = out / "train_state" / "checkpoint.pt"
    assert ckpt.exists()
    ckpt.write_bytes(ckpt.read_bytes()[:1000])
    with pytest.raises(ArtifactError, match="checkpoint.pt"):
        train(cfg, out, progress=False)
    assert not (out / "model.pt").exists()


def test_corrupted_samples_file_is_refused_by_name(tmp_path):
    imgs = np.zeros((4, 8, 8, 1), np.uint8)
    save_samples(tmp_path / "samples.npz", imgs, range(4), {"method": "ddim"})
    raw = (tmp_path / "samples.npz").read_bytes()
    for name, data in {"truncated.npz": raw[:-200], "flipped.npz": raw[:100] + bytes([raw[100] ^ 0xFF]) + raw[101:]}.items():
        (tmp_path / name).write_bytes(data)
        with pytest.raises(ArtifactError, match=name):
            load_samples(tmp_path / name)


def test_disk_full_write_fails_loudly_and_keeps_the_previous_artifact(tmp_path):
    """RLIMIT_FSIZE makes every write past 64 KiB fail with EFBIG, as a full disk fails with ENOSPC."""
    target = tmp_path / "model.pt"
    save_torch({"w": torch.ones(4)}, target)
    before = sha256_file(target)
    script = textwrap.dedent(f"""
        import resource, signal, sys, torch
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # get EFBIG instead of being killed
        resource.setrlimit(resource.RLIMIT_FSIZE, (65536, 65536))
        from timestep_lab.artifacts.io import save_torch, ArtifactError
        try:
            save_torch({{"w": torch.zeros(1_000_000)}}, {str(target)!r})
        except ArtifactError as exc:
            print(exc); sys.exit(7)
        sys.exit(0)
    """)
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                       env={**os.environ, "PYTHONPATH": str(ROOT / "src")}, timeout=120)
    assert r.returncode == 7, r.stdout + r.stderr
    assert f"{target}: write failed" in r.stdout and "previous file is unchanged" in r.stdout
    assert sha256_file(target) == before and torch.load(target, weights_only=True)["w"].sum() == 4
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model.pt"]  # no temp file left behind


def test_disk_full_during_sampling_cli_names_the_file(trained, tmp_path):
    out = tmp_path / "samples.npz"
    save_samples(out, np.zeros((2, 8, 8, 1), np.uint8), [0, 1], {"method": "old"})
    before = sha256_file(out)

    def limit():
        import resource
        import signal

        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (2048, 2048))

    r = _cli("sample", "--model", str(trained / "model.pt"), "--out", str(out), "--set", "sample.num_samples=64",
             "--set", "sample.steps=2", "--no-progress", preexec=limit)
    assert r.returncode == 2, r.stderr
    assert f"error: {out}: write failed" in r.stderr and "Traceback" not in r.stderr
    assert sha256_file(out) == before
    assert load_samples(out)[2] == {"method": "old"}


class _RunsCode:
    def __reduce__(self):
        return (os.system, (f"touch {_RunsCode.marker}",))


def test_pickle_that_runs_code_is_refused_everywhere(trained, digits_dir, tmp_path):
    _RunsCode.marker = str(tmp_path / "pwned")
    evil = tmp_path / "model.pt"
    state = torch.load(trained / "model.pt", weights_only=True)
    state["extra"] = _RunsCode()
    torch.save(state, evil)
    with pytest.raises(UnsafeCheckpointError, match="model.pt"):
        load_torch(evil)
    r = _cli("sample", "--model", str(evil), "--out", str(tmp_path / "s.npz"), "--no-progress")
    assert r.returncode == 2 and "refused to load" in r.stderr and "Traceback" not in r.stderr
    # and as a fine-tuning source
    cfg = tiny_config(digits_dir, train={"init_from": str(evil), "total_kimg": 0.032})
    with pytest.raises(UnsafeCheckpointError):
        train(cfg, tmp_path / "ft", progress=False)
    assert not Path(_RunsCode.marker).exists()  # nothing ran
