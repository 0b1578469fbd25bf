import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from conftest import tiny_config

from timestep_lab.artifacts.io import load_torch
from timestep_lab.config import dump_config, load_config
from timestep_lab.train import NonFiniteLossError, train


def read_log(path):
    return [json.loads(line) for line in Path(path).read_text().splitlines()]


def weights(path, key="model"):
    return load_torch(path)[key]


def assert_same_weights(a, b, exact=True):
    assert a.keys() == b.keys()
    for k in a:
        if exact:
            assert torch.equal(a[k], b[k]), k
        else:
            torch.testing.assert_close(a[k], b[k], atol=1e-5, rtol=1e-4, msg=k)


def test_train_writes_all_artifacts_and_loss_goes_down(tiny_cfg, tmp_path):
    res = train(tiny_cfg, tmp_path / "run", progress=False)
    out = tmp_path / "run"
    assert res.status == "ok" and res.nimg >= 640
    for f in ("config.yaml", "model.pt", "train_log.jsonl", "train_state/checkpoint.pt"):
        assert (out / f).is_file(), f
    assert load_config(out / "config.yaml") == tiny_cfg
    log = read_log(out / "train_log.jsonl")
    assert [r["nimg"] for r in log] == [160, 320, 480, 640]
    assert log[-1]["loss"] < log[0]["loss"]
    assert len(log[0]["loss_bins"]) == 10 and sum(log[0]["count_bins"]) == 160
    model = load_torch(out / "model.pt")
    assert model["status"] == "ok" and set(model) >= {"ema", "model", "config", "nimg"}


def test_stop_and_resume_is_bit_identical(tiny_cfg, tmp_path):
    full = train(tiny_cfg, tmp_path / "full", progress=False)
    part = train(tiny_cfg, tmp_path / "part", progress=False, stop_after_kimg=0.32)
    assert part.status == "incomplete" and not (tmp_path / "part" / "model.pt").exists()
    train(tiny_cfg, tmp_path / "part", progress=False)
    assert_same_weights(weights(full.model_path), weights(tmp_path / "part" / "model.pt"))
    assert_same_weights(weights(full.model_path, "ema"), weights(tmp_path / "part" / "model.pt", "ema"))
    lf = [(r["nimg"], r["loss"]) for r in read_log(tmp_path / "full" / "train_log.jsonl")]
    lp = [(r["nimg"], r["loss"]) for r in read_log(tmp_path / "part" / "train_log.jsonl")]
    assert lf == lp


def test_a_changed_config_sets_the_old_run_aside_and_starts_fresh(tiny_cfg, tmp_path, caplog):
    """The training state is keyed to its config: a changed optim.lr does not resume the old
    state (nor fail); that run moves to stale-<hash>/ and the new one starts from zero. The
    same config again resumes, to the weights of an uninterrupted run."""
    out = tmp_path / "r"
    train(tiny_cfg, out, progress=False, stop_after_kimg=0.32)
    changed = tiny_config(tiny_cfg.data.path, optim={"lr": 1e-3})
    with caplog.at_level("INFO", logger="timestep_lab"):
        part = train(changed, out, progress=False, stop_after_kimg=0.16)
    assert part.status == "incomplete" and part.nimg == 160  # from zero, not from the old 320
    assert "different config (optim.lr)" in caplog.text and "set aside in stale-" in caplog.text
    (stale,) = out.glob("stale-*")
    assert load_torch(stale / "train_state" / "checkpoint.pt")["config"]["optim"]["lr"] == tiny_cfg.optim.lr
    caplog.clear()
    with caplog.at_level("INFO", logger="timestep_lab"):
        train(changed, out, progress=False)  # unchanged now: resumes
    assert "resumed" in caplog.text and "set aside" not in caplog.text
    full = train(changed, tmp_path / "full", progress=False)
    assert_same_weights(weights(full.model_path), weights(out / "model.pt"))
    assert load_torch(out / "model.pt")["config"]["optim"]["lr"] == 1e-3


def _cli(*args, threads=1):
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    return [sys.executable, "-m", "timestep_lab", *args, "--threads", str(threads)], env


@pytest.mark.slow
def test_killed_run_resumes_to_the_same_weights(digits_dir, tmp_path):
    cfg = tiny_config(digits_dir, train={"total_kimg": 8, "checkpoint_every_kimg": 0.8, "log_every_kimg": 0.8})
    dump_config(cfg, tmp_path / "run.yaml")
    cmd, env = _cli("train", "--config", str(tmp_path / "run.yaml"), "--out", str(tmp_path / "killed"), "--no-progress")
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    ckpt = tmp_path / "killed" / "train_state" / "checkpoint.pt"
    deadline = time.time() + 120
    while not ckpt.exists() and time.time() < deadline and proc.poll() is None:
        time.sleep(0.05)
    time.sleep(0.3)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert proc.returncode == -signal.SIGKILL
    assert not (tmp_path / "killed" / "model.pt").exists(), "the run finished before it could be killed"
    assert 0 < load_torch(ckpt)["nimg"] < 8000
    cmd, env = _cli("train", "--config", str(tmp_path / "run.yaml"), "--out", str(tmp_path / "killed"), "--no-progress")
    subprocess.run(cmd, env=env, check=True, capture_output=True)
    cmd, env = _cli("train", "--config", str(tmp_path / "run.yaml"), "--out", str(tmp_path / "straight"), "--no-progress")
    subprocess.run(cmd, env=env, check=True, capture_output=True)
    assert_same_weights(weights(tmp_path / "straight" / "model.pt"), weights(tmp_path / "killed" / "model.pt"))
    log = read_log(tmp_path / "killed" / "train_log.jsonl")
    assert [r["nimg"] for r in log] == [r["nimg"] for r in read_log(tmp_path / "straight" / "train_log.jsonl")]


def test_nonfinite_loss_stops_with_step_and_timesteps(digits_dir, tmp_path):
    cfg = tiny_config(digits_dir, optim={"lr": 1e12, "grad_clip": None}, train={"total_kimg": 3.2})
    with pytest.raises(NonFiniteLossError, match=r"non-finite loss at optimizer step \d+ \(timesteps \d+"):
        train(cfg, tmp_path / "nan", progress=False)
    rec = tiny_config(digits_dir, optim={"lr": 1e12, "grad_clip": None}, train={"total_kimg": 3.2, "on_nonfinite": "record"})
    res = train(rec, tmp_path / "nan2", progress=False)
    assert res.status == "diverged" and "non-finite loss at optimizer step" in res.message
    assert load_torch(tmp_path / "nan2" / "model.pt")["status"] == "diverged"


def test_cli_reports_config_errors_without_traceback(tmp_path):
    (tmp_path / "bad.yaml").write_text("train:\n  batch_size: 0\n")
    cmd, env = _cli("train", "--config", str(tmp_path / "bad.yaml"), "--out", str(tmp_path / "o"))
    r = subprocess.run(cmd, env=env, capture_output=True, text=True)
    assert r.returncode == 2
    assert "bad.yaml: train.batch_size must be > 0, got 0" in r.stderr and "Traceback" not in r.stderr


@pytest.mark.slow
def test_ddp_two_processes_match_one_process(digits_dir, tmp_path):
    cfg = tiny_config(digits_dir, train={"total_kimg": 0.32, "log_every_kimg": 0.064, "batch_size": 32})
    dump_config(cfg, tmp_path / "run.yaml")
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    one = [sys.executable, "-m", "timestep_lab", "train", "--config", str(tmp_path / "run.yaml"), "--out",
           str(tmp_path / "one"), "--no-progress", "--threads", "1"]
    subprocess.run(one, env=env, check=True, capture_output=True)
    two = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2", "-m", "timestep_lab",
           "train", "--config", str(tmp_path / "run.yaml"), "--out", str(tmp_path / "two"), "--no-progress", "--threads", "1"]
    r = subprocess.run(two, env=env, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-3000:]
    l1 = [x["loss"] for x in read_log(tmp_path / "one" / "train_log.jsonl")]
    l2 = [x["loss"] for x in read_log(tmp_path / "two" / "train_log.jsonl")]
    assert len(l1) == len(l2) == 5
    assert l1 == pytest.approx(l2, rel=1e-5)
    assert_same_weights(weights(tmp_path / "one" / "model.pt"), weights(tmp_path / "two" / "model.pt"), exact=False)


# ------------------------------------------------------------------ the factored step, compile fallback, snapshots


def test_train_runs_the_factored_step_bit_identically(digits_dir, tmp_path):
    """train() and build_train_step().step() are one code path: same per-step losses and weights, bitwise."""
    from timestep_lab.train import build_train_step

    cfg = tiny_config(digits_dir, train={"total_kimg": 0.16, "log_every_kimg": 0.032, "checkpoint_every_kimg": 0.16})
    res = train(cfg, tmp_path / "run", progress=False)
    logged = [r["loss"] for r in read_log(tmp_path / "run" / "train_log.jsonl")]
    assert res.step == len(logged) == 5

    ts = build_train_step(cfg)
    stepped = [float(ts.step().loss) for _ in range(5)]
    assert stepped == logged  # exact: a one-step log interval reports the step's loss
    assert ts.nimg == res.nimg and ts.steps_done == res.step
    final = load_torch(res.model_path)
    assert_same_weights(final["model"], {k: v.detach() for k, v in ts.net.state_dict().items()})
    assert all(torch.equal(a, b) for a, b in zip(final["ema"].values(), ts.ema.params))


def _eager_reference(cfg, tmp_path):
    train(cfg, tmp_path / "eager", progress=False)
    return weights(tmp_path / "eager" / "model.pt"), [r["loss"] for r in read_log(tmp_path / "eager" / "train_log.jsonl")]


def test_compile_failing_at_once_falls_back_to_eager(digits_dir, tmp_path, monkeypatch, caplog):
    cfg = tiny_config(digits_dir, train={"total_kimg": 0.128, "log_every_kimg": 0.064})
    ref_weights, ref_losses = _eager_reference(cfg, tmp_path)

    def broken_compile(model, *args, **kwargs):
        raise RuntimeError("no C++ compiler (simulated)")

    monkeypatch.setattr(torch, "compile", broken_compile)
    compiled_cfg = tiny_config(digits_dir, train={"total_kimg": 0.128, "log_every_kimg": 0.064, "compile": True})
    with caplog.at_level("WARNING", logger="timestep_lab.train"):
        res = train(compiled_cfg, tmp_path / "run", progress=False)
    assert res.status == "ok"
    assert any("torch.compile failed" in r.getMessage() and "simulated" in r.getMessage() for r in caplog.records)
    assert [r["loss"] for r in read_log(tmp_path / "run" / "train_log.jsonl")] == ref_losses
    assert_same_weights(weights(res.model_path), ref_weights)


def test_compile_failing_at_the_first_step_falls_back_to_eager(digits_dir, tmp_path, monkeypatch, caplog):
    """torch.compile is lazy: most backend failures raise at the first forward. The first step
    is redone eagerly (gradients dropped, RNG rewound), so the run equals an eager one bitwise."""
    cfg = tiny_config(digits_dir, model={"dropout": 0.1}, train={"total_kimg": 0.128, "log_every_kimg": 0.064})
    ref_weights, ref_losses = _eager_reference(cfg, tmp_path)
    calls = []

    class LazilyBroken(torch.nn.Module):
        def __init__(self, inner):
            super().__init__()
            self.inner = inner

        def forward(self, x, t):
            calls.append(1)
            torch.rand(3)  # consume global RNG (as a compiled dropout would) before failing
            self.inner(x, t).sum().backward()  # leave partial gradients behind
            raise RuntimeError("BackendCompilerFailed: inductor could not build a kernel (simulated)")

    monkeypatch.setattr(torch, "compile", lambda model, *a, **k: LazilyBroken(model))
    compiled_cfg = tiny_config(digits_dir, model={"dropout": 0.1},
                               train={"total_kimg": 0.128, "log_every_kimg": 0.064, "compile": True})
    with caplog.at_level("WARNING", logger="timestep_lab.train"):
        res = train(compiled_cfg, tmp_path / "run", progress=False)
    assert res.status == "ok" and len(calls) == 1  # tried once, then eager for good
    assert any("at the first training step" in r.getMessage() and "BackendCompilerFailed" in r.getMessage()
               for r in caplog.records)
    assert [r["loss"] for r in read_log(tmp_path / "run" / "train_log.jsonl")] == ref_losses
    assert_same_weights(weights(res.model_path), ref_weights)


def test_snapshots_closer_than_one_kimg_do_not_collide(digits_dir, tmp_path):
    from timestep_lab.train import snapshot_name

    cfg = tiny_config(digits_dir, train={"total_kimg": 0.64, "snapshot_every_kimg": 0.16})
    train(cfg, tmp_path / "run", progress=False)
    snaps = sorted((tmp_path / "run" / "snapshots").glob("snapshot-*.pt"))
    assert [p.name for p in snaps] == [snapshot_name(n) for n in (160, 320, 480, 640)]
    assert [load_torch(p)["nimg"] for p in snaps] == [160, 320, 480, 640]  # consumers read nimg from metadata
    assert snapshot_name(1_500) < snapshot_name(12_000) < snapshot_name(100_000_000)  # names sort by images seen


# ------------------------------------------------------------------ a signal (SLURM's time-limit warning) stops it


def _signal_at_step(monkeypatch, step: int, sig=signal.SIGTERM):
    """Make the training process receive ``sig`` right after optimizer step ``step``."""
    from timestep_lab.train import TrainStep

    original = TrainStep.step

    def stepped(self):
        out = original(self)
        if self.steps_done == step:
            os.kill(os.getpid(), sig)
        return out

    monkeypatch.setattr(TrainStep, "step", stepped)


def test_a_signal_stops_after_the_step_with_the_state_saved_and_resume_is_bit_exact(tiny_cfg, tmp_path, monkeypatch):
    """SIGTERM mid-interval (step 7: between the log at 5 and the checkpoint at 10 steps) ends
    the step, saves the whole state there and exits 75 (resumable); the rerun ends with the
    bytes and the log of an uninterrupted run. The signal's previous handler is back afterwards."""
    from timestep_lab.cli import main
    from timestep_lab.errors import EXIT_RESUMABLE

    dump_config(tiny_cfg, tmp_path / "run.yaml")
    before = signal.getsignal(signal.SIGTERM)
    _signal_at_step(monkeypatch, 7)
    status = main(["train", "--config", str(tmp_path / "run.yaml"), "--out", str(tmp_path / "part"), "--no-progress",
                   "--no-events"])
    assert status == EXIT_RESUMABLE == 75
    assert signal.getsignal(signal.SIGTERM) is before
    assert not (tmp_path / "part" / "model.pt").exists()
    ckpt = load_torch(tmp_path / "part" / "train_state" / "checkpoint.pt")
    assert (ckpt["nimg"], ckpt["step"]) == (7 * 32, 7)
    monkeypatch.undo()

    resumed = train(tiny_cfg, tmp_path / "part", progress=False)
    straight = train(tiny_cfg, tmp_path / "straight", progress=False)
    assert resumed.status == "ok" and resumed.step == straight.step == 20
    assert (tmp_path / "part" / "model.pt").read_bytes() == (tmp_path / "straight" / "model.pt").read_bytes()
    # the same records but for timings, and the code identity the CLI (the first part) adds to each record
    def same(rec):
        return {k: v for k, v in rec.items() if k not in ("wall_time_s", "sec_per_step", "code")}
    part, whole = read_log(tmp_path / "part" / "train_log.jsonl"), read_log(tmp_path / "straight" / "train_log.jsonl")
    assert len(part) == len(whole) and [same(r) for r in part] == [same(r) for r in whole]


def test_sigusr1_also_stops_and_the_result_says_so(tiny_cfg, tmp_path, monkeypatch):
    _signal_at_step(monkeypatch, 3, signal.SIGUSR1)
    res = train(tiny_cfg, tmp_path / "run", progress=False)
    assert res.status == "interrupted" and res.nimg == 96
    assert "stopped by SIGUSR1 at 0.096 kimg (step 3)" in res.message and "rerun to continue" in res.message


def test_mixed_snapshots_carry_their_head_table_and_sample(digits_dir, tmp_path):
    """A mixed model's snapshot is sampled like model.pt (its own measured per-t head table), so
    its FID can be followed during training."""
    from timestep_lab.checkpoints import load_for_inference

    cfg = tiny_config(digits_dir, diffusion={"num_timesteps": 100, "prediction": "mixed"},
                      train={"total_kimg": 0.32, "snapshot_every_kimg": 0.16})
    train(cfg, tmp_path / "run", progress=False)
    snap = sorted((tmp_path / "run" / "snapshots").glob("snapshot-*.pt"))[0]
    obj = load_torch(snap)
    assert obj["mixed_head_per_t"].shape == (100,) and obj["mixed_head_errors"].shape == (3, 100)
    loaded = load_for_inference(snap)  # no "mixed model without a measured per-t head table"
    assert loaded.prediction.head_per_t.tolist() == obj["mixed_head_per_t"].tolist()
