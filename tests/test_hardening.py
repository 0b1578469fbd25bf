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

    from timestep_lab.artifacts.io import load_torch, save_torch

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

    from timestep_lab.artifacts.runlock import RunLock, RunLockedError

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


# ------------------------------------------------------------------------------- the command line

def _cli(*args: str, cwd=None):
    """``python -m timestep_lab ARGS`` in a fresh process: (exit status, stderr)."""
    import os
    import subprocess
    import sys

    r = subprocess.run([sys.executable, "-m", "timestep_lab", *args], cwd=cwd, capture_output=True, text=True,
                       timeout=300, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    return r.returncode, r.stderr


def _one_error_line(rc: int, stderr: str) -> str:
    errors = [ln for ln in stderr.splitlines() if ln.startswith("error:")]
    assert rc == 2 and len(errors) == 1 and "Traceback" not in stderr, (rc, stderr)
    return errors[0]


def _cli_failure_cases(tmp, digits_dir) -> dict:
    from timestep_lab.config import dump_yaml

    (tmp / "inf.yaml").write_text(dump_yaml({"data": {"path": str(digits_dir)}, "train": {"total_kimg": float("inf")}}))
    (tmp / "binary.bin").write_bytes(bytes(range(256)) * 4)
    (tmp / "a-file").write_text("not a folder\n")
    return {  # case: (arguments, what the error line must name)
        "infinite total_kimg": (["train", "--config", tmp / "inf.yaml", "--out", tmp / "r"], "train.total_kimg"),
        "binary --config": (["train", "--config", tmp / "binary.bin", "--out", tmp / "r"], "binary.bin"),
        "binary slots --profile": (["slots", "--profile", tmp / "binary.bin", "--out", tmp / "s.json"], "binary.bin"),
        # the model does not exist either: the output is checked first, before any work
        "sample --out under a file": (["sample", "--model", tmp / "none.pt", "--out", tmp / "a-file" / "s.npz"],
                                      "a-file"),
        "train --out under a file": (["train", "--out", tmp / "a-file" / "run"], "a-file"),
        # neither the model nor the reference exists: --metrics is checked first too
        "sample-score --metrics under a file": (["sample-score", "--model", tmp / "none.pt", "--out", tmp / "s.npz",
                                                 "--reference", tmp / "none.npz", "--metrics",
                                                 tmp / "a-file" / "m.json"], "a-file"),
        "missing report --notebook": (["report", "--notebook", tmp / "nb.py", "--out", tmp / "r.html"], "nb.py"),
        "sample --set of an unused key": (["sample", "--model", tmp / "none.pt", "--out", tmp / "s.npz",
                                           "--set", "train.batch_size=1"], "train.batch_size"),
    }


CLI_CASES = ["infinite total_kimg", "binary --config", "binary slots --profile", "sample --out under a file",
             "train --out under a file", "sample-score --metrics under a file", "missing report --notebook",
             "sample --set of an unused key"]


def test_every_cli_failure_is_one_error_line_naming_the_file_or_key(digits_dir, tmp_path):
    cases = _cli_failure_cases(tmp_path, digits_dir)
    assert sorted(cases) == sorted(CLI_CASES)
    for case, (args, named) in cases.items():
        line = _one_error_line(*_cli(*map(str, args)))
        assert named in line, (case, line)
    assert "did you mean sample.batch_size" in line  # the unused key's error says what was meant
    assert not (tmp_path / "r").exists() and not (tmp_path / "s.json").exists()


def test_one_writer_per_run_folder_through_the_cli(digits_dir, tmp_path):
    """Two `train` into one --out: the second fails at once naming the holder (exit 2); once the
    holder is killed its lock is stale and taken over; a changed --set then starts fresh."""
    import signal
    import subprocess
    import sys
    import time

    from conftest import tiny_config

    from timestep_lab.config import dump_config

    dump_config(tiny_config(digits_dir, train={"total_kimg": 64.0}), tmp_path / "run.yaml")
    out = tmp_path / "run"
    args = ["train", "--config", str(tmp_path / "run.yaml"), "--out", str(out), "--no-progress", "--threads", "1"]
    first = subprocess.Popen([sys.executable, "-m", "timestep_lab", *args], stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL)
    try:
        deadline = time.time() + 120
        while not (out / "train_state" / "checkpoint.pt").exists() and time.time() < deadline:
            assert first.poll() is None, "the first writer ended early"
            time.sleep(0.1)
        line = _one_error_line(*_cli(*args))
        assert f"pid {first.pid}" in line and str(out) in line
    finally:
        first.send_signal(signal.SIGKILL)
        first.wait()
    assert (out / ".lock").exists()  # left behind by the killed writer
    rc, err = _cli(*args, "--set", "optim.lr=1e-3", "--stop-after-kimg", "0.064")
    assert rc == 0, err
    assert "stale lock" in err and "different config (optim.lr)" in err and "set aside" in err
    assert not (out / ".lock").exists()  # released on exit


def test_training_bar_ends_at_100_percent_without_a_warning(digits_dir, tmp_path, capsys):
    import warnings

    from conftest import tiny_config

    cfg = tiny_config(digits_dir, train={"total_kimg": 0.65})  # 650 images, batches of 32: the last overshoots
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        train(cfg, tmp_path / "r", progress=True)
    assert not [w for w in caught if "tqdm" in type(w.message).__name__.lower()], [str(w.message) for w in caught]
    bar = capsys.readouterr().err.replace("\r", "\n").strip().splitlines()[-1]
    assert "100%" in bar and "650/650" in bar, bar


def test_evaluate_and_reference_stats_show_a_progress_bar(digits_dir, digits_test_dir, tmp_path, capsys):
    import numpy as np

    from timestep_lab.artifacts.samples_file import save_samples
    from timestep_lab.cli import main
    from timestep_lab.data import PreparedData

    cnn, ref, samples = tmp_path / "cnn.pt", tmp_path / "ref.npz", tmp_path / "samples.npz"
    assert main(["train-features", "--data", str(digits_dir), "--test-data", str(digits_test_dir), "--out", str(cnn),
                 "--epochs", "1"]) == 0
    save_samples(samples, np.asarray(PreparedData(digits_test_dir).images[:64]), list(range(64)), {})
    capsys.readouterr()
    common = ["--weights", str(cnn), "--threads", "1"]
    assert main(["reference-stats", "--data", str(digits_dir), "--extractor", "digits-cnn", "--out", str(ref),
                 "--max-images", "64", *common]) == 0
    assert "reference: 100%" in capsys.readouterr().err
    assert main(["evaluate", "--samples", str(samples), "--reference", str(ref), "--out", str(tmp_path / "m.json"),
                 "--set", "eval.num_samples=64", *common]) == 0
    assert "evaluate: 100%" in capsys.readouterr().err
    assert main(["evaluate", "--samples", str(samples), "--reference", str(ref), "--out", str(tmp_path / "m.json"),
                 "--set", "eval.num_samples=64", "--no-progress", *common]) == 0
    assert "evaluate:" not in capsys.readouterr().err


def _readme_library_block() -> list[str]:
    """The commands of the README's library block (continuation lines joined, comments dropped)."""
    import shlex

    from worktree import ROOT

    text = (ROOT / "README.md").read_text()
    start = text.index("```bash", text.index("The library is usable without Snakemake")) + len("```bash")
    block = text[start:text.index("```", start)].replace("\\\n", " ")
    return [" ".join(shlex.split(line, comments=True)) for line in block.splitlines() if line.split("#")[0].strip()]


def test_readme_library_block_runs_on_a_fresh_clone_and_leaves_the_root_clean(tmp_path):
    """The README's library commands, in order, on a fresh copy of the repo: the test split that
    train-features needs is prepared, and every file goes under data/ or results/ (git-ignored).
    Run length, sampler steps and CNN epochs are cut here; paths and flags are the README's."""
    import os
    import re
    import shlex
    import subprocess

    from worktree import copy_worktree, run

    root = copy_worktree(tmp_path / "clone")
    subprocess.run(["git", "init", "-q"], cwd=root, check=True)
    subprocess.run(["git", "add", "-A"], cwd=root, check=True)
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "clone"], cwd=root, check=True)
    before = set(os.listdir(root))
    commands = _readme_library_block()
    assert any(" prepare digits --split test " in f" {c} " for c in commands), commands
    for cmd in commands:
        fast = re.sub(r"train\.total_kimg=\S+", "train.total_kimg=0.256", cmd)
        fast = re.sub(r"sample\.steps=\d+", "sample.steps=5", fast)
        fast += " --epochs 1" if " train-features " in fast else ""
        r = run(shlex.split(fast), root, timeout=300)
        assert r.returncode == 0, f"{cmd}\n{r.stdout[-3000:]}"
    assert set(os.listdir(root)) - before <= {"data", "results"}, set(os.listdir(root)) - before
    status = subprocess.run(["git", "status", "--porcelain"], cwd=root, capture_output=True, text=True).stdout
    assert status == "", status  # nothing written outside the ignored folders
    assert (root / "results" / "digits-run" / "metrics.json").is_file()
