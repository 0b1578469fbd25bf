"""Hardening: identical runs write identical bytes (issue: reproducible artifacts and hashes)."""

from __future__ import annotations

import hashlib

from conftest import tiny_config
from timestep_lab.train import train


def _sha(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_identical_runs_write_byte_identical_model_and_checkpoint(digits_dir, tmp_path):
    cfg = tiny_config(digits_dir)
    for name in ("a", "b"):
        assert train(cfg, tmp_path / name, progress=False).status == "ok"
    assert _sha(tmp_path / "a" / "model.pt") == _sha(tmp_path / "b" / "model.pt")
    assert (tmp_path / "a" / "model.pt").read_bytes()[:64] == (tmp_path / "b" / "model.pt").read_bytes()[:64]


def test_save_torch_is_deterministic_and_loads_back(tmp_path):
    import zipfile

    import torch

    from timestep_lab.io import load_torch, save_torch

    obj = {"w": torch.arange(300, dtype=torch.float32).view(3, 100), "meta": {"nimg": 640, "name": "x"}}
    save_torch(obj, tmp_path / "a.pt")
    save_torch(obj, tmp_path / "b.pt")
    assert (tmp_path / "a.pt").read_bytes() == (tmp_path / "b.pt").read_bytes()
    assert zipfile.ZipFile(tmp_path / "a.pt").testzip() is None  # every CRC-32 still matches
    back = load_torch(tmp_path / "a.pt")
    assert torch.equal(back["w"], obj["w"]) and back["meta"] == obj["meta"]
    obj["w"][0, 0] = -1.0  # a different object gets a different serialization id and bytes
    save_torch(obj, tmp_path / "c.pt")
    assert (tmp_path / "c.pt").read_bytes() != (tmp_path / "a.pt").read_bytes()


def test_one_writer_per_run_folder_and_stale_lock_takeover(tmp_path, caplog):
    import json
    import socket
    import subprocess
    import sys

    import pytest

    from timestep_lab.runlock import RunLock, RunLockedError

    run = tmp_path / "run"
    # a live holder (another process on this host) keeps the folder
    holder = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        run.mkdir()
        (run / ".lock").write_text(json.dumps({"pid": holder.pid, "host": socket.gethostname()}))
        with pytest.raises(RunLockedError, match=f"pid {holder.pid}"):
            RunLock(run).__enter__()
    finally:
        holder.kill()
        holder.wait()
    # the same holder once dead is stale: taken over with a message, released on exit
    with caplog.at_level("WARNING", logger="timestep_lab"):
        with RunLock(run) as lock:
            assert json.loads((run / ".lock").read_text())["pid"] == lock.pid
            with pytest.raises(RunLockedError, match="already writes"):
                RunLock(run).__enter__()
    assert "stale lock" in caplog.text and not (run / ".lock").exists()
    # a lock from another host cannot be checked: refused, with what to do
    (run / ".lock").write_text(json.dumps({"pid": 1, "host": "elsewhere"}))
    with pytest.raises(RunLockedError, match="delete the lock file"):
        RunLock(run).__enter__()


def test_dvc_plans_and_reports_on_a_fresh_clone(tmp_path):
    """`dvc repro --dry`, `dvc exp run --dry` and `dvc metrics show` work before anything ran."""
    import subprocess

    from worktree import copy_worktree, run

    root = copy_worktree(tmp_path / "clone")
    subprocess.run(["git", "init", "-q"], cwd=root, check=True)  # DVC experiments need a git repo
    subprocess.run(["git", "add", "-A"], cwd=root, check=True)
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "clone"], cwd=root, check=True)
    for cmd in (["dvc", "repro", "--dry"], ["dvc", "exp", "run", "--dry"]):
        r = run(cmd, root, timeout=300)
        assert r.returncode == 0, r.stdout
        assert "snakemake all dvc_export" in r.stdout and "Errno" not in r.stdout
    r = run(["dvc", "metrics", "show"], root, timeout=300)
    assert r.returncode == 0 and "no results yet" in r.stdout and "failed" not in r.stdout, r.stdout
