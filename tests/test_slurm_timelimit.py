"""A training job at its SLURM time limit (workflow/profiles/cluster) on the test cluster of the
`slurm_cluster` fixture (root only; CI): the job gets the time-limit warning, saves its state,
is resubmitted by Snakemake and resumes, ending with the very bytes of an uninterrupted run.

The warning is sent with ``scancel --signal=TERM <job>``: SLURM delivers it to the job's steps
exactly as it delivers the profile's ``--signal=TERM@<s>`` when the limit nears (SLURM's smallest
``--time`` is a minute, and it may send that signal up to a minute early: a real limit would cost
minutes and land anywhere). That the profile asks sbatch for the warning is checked on sbatch's
command line. One study of one run, its data copied in (no prepare job): 60-90 s on a loaded
2-core machine, most of it two SLURM job attempts (two Snakemake starts and a torch import each)
and the executor noticing each one's end (plugin 2.8.0 polls 2, 14, 36 s after a submission).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from conftest import copy_worktree, slurm_args, snakemake_command, study_env

pytestmark = [pytest.mark.slurm, pytest.mark.workflow, pytest.mark.slow]

STUDY = "timelimit"
RUN = "uniform_none_eps_b64_linear_s0"


def timelimit_config(root: Path) -> str:
    """config/smoke.yaml cut to one run (uniform, seed 0) as study `timelimit`: 40 steps of 64
    images, logged after every step, checkpointed only at the end (so a resumed run can only have
    resumed from the state the signal saved)."""
    cfg = yaml.safe_load((root / "config" / "smoke.yaml").read_text())
    cfg["study"] = STUDY
    cfg["groups"] = {"sampler_comparison": {"grid": {"sampler": ["uniform"], "weighting": ["none"]}, "seeds": [0]}}
    cfg["analyses"], cfg["reference"] = {}, {"pretrained": None, "format": "timestep_lab"}
    cfg["base"]["train"].update(total_kimg=2.56, log_every_kimg=0.064, checkpoint_every_kimg=2.56)
    path = root / "config" / f"{STUDY}.yaml"
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    return str(path.relative_to(root))


def _tail(text: str, n: int = 60) -> str:
    return "\n".join(text.splitlines()[-n:])


def test_train_job_signalled_at_its_time_limit_resumes_bit_exactly(slurm_cluster, digits_dir, tmp_path):
    root = copy_worktree(tmp_path / "repo")
    # the prepared digits of the session (what the prepare_data job would write): no SLURM job for it
    shutil.copytree(digits_dir, root / "data" / "prepared" / "digits-train")
    env = study_env(slurm_cluster)
    # sbatch as the executor calls it, recorded: the profile must ask for the warning
    spy, calls = tmp_path / "spy", tmp_path / "sbatch-calls.txt"
    spy.mkdir()
    (spy / "sbatch").write_text(f'#!/bin/sh\necho "$*" >> "{calls}"\nexec "{slurm_cluster.bin_dir}/sbatch" "$@"\n')
    (spy / "sbatch").chmod(0o755)
    env["PATH"] = f"{spy}{os.pathsep}{env['PATH']}"
    run_dir = root / "results" / STUDY / "runs" / RUN
    timelimit_config_path = timelimit_config(root)
    args = ["--configfile", timelimit_config_path, *slurm_args(slurm_cluster, groups=False),
            f"results/{STUDY}/runs/{RUN}/model.pt"]
    log_path = root / "timelimit.log"
    start = time.monotonic()
    with open(log_path, "w") as log_file:
        proc = subprocess.Popen([*snakemake_command(env, slurm=True), *args], cwd=root, env=env, stdout=log_file, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, text=True, start_new_session=True)
    try:
        # the train job has logged its first step: send it the time-limit warning
        first_log, deadline = run_dir / "train_state" / "train_log.jsonl", time.monotonic() + 240
        while not first_log.exists():
            assert proc.poll() is None, f"snakemake ended before training began:\n{_tail(log_path.read_text())}"
            assert time.monotonic() < deadline, f"training never began:\n{_tail(log_path.read_text())}"
            time.sleep(0.05)
        (victim,) = [j["id"] for j in slurm_cluster.squeue(states="RUNNING")
                     if j["comment"] == f"rule_train_wildcards_{RUN}"]
        slurm_cluster.run("scancel", "--signal=TERM", victim)
        signalled_at = time.monotonic() - start
        # the uninterrupted run, trained here while SLURM resubmits (same run.yaml, same data path,
        # the command the rule runs, at the study's reproducibility level as every job of it is)
        straight_cmd = [sys.executable, "-m", "timestep_lab", "train", f"--config={run_dir / 'run.yaml'}",
                        f"--out={tmp_path / 'straight'}", "--threads=1", "--set=train.on_nonfinite=record", "--no-progress"]
        level = yaml.safe_load((root / timelimit_config_path).read_text())["reproducibility"]
        straight = subprocess.run(straight_cmd, cwd=root, env={**study_env(), "TIMESTEP_LAB_ARITHMETIC": level},
                                  capture_output=True, text=True, timeout=300)
        rc = proc.wait(timeout=300)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)  # snakemake cancels its SLURM jobs on SIGTERM
            proc.wait(60)
    log = log_path.read_text()
    assert rc == 0, f"snakemake failed after the time-limit warning:\n{_tail(log)}"

    # both attempts asked SLURM for the warning (the profile's TIMESTEP_LAB_SLURM_SIGNAL_S: 300 s)
    sbatch = [line for line in calls.read_text().splitlines() if f"rule_train_wildcards_{RUN}" in line]
    assert len(sbatch) == 2 and all("--signal=TERM@300" in line for line in sbatch), sbatch
    # first attempt stopped by the signal (training exited 75: a failed job), then resubmitted
    m = re.search(r"SLURM run ID: (\S+)", log)
    assert m, _tail(log)
    trains = sorted((j for j in slurm_cluster.squeue("--name", m.group(1))
                     if j["comment"] == f"rule_train_wildcards_{RUN}"), key=lambda j: int(j["id"]))
    assert [j["state"] for j in trains] == ["FAILED", "COMPLETED"], (trains, _tail(log))
    assert trains[0]["id"] == victim and "Trying to restart job" in log
    # (its log, shown by Snakemake as a failed job's: show-failed-logs)
    assert re.search(r"stopped by SIGTERM at [\d.]+ kimg \(step \d+\); the state is saved in \S+: rerun to continue",
                     log), _tail(log)
    # ... and the second attempt resumed from the state the first one saved at the signal (the
    # only checkpoint of the config is the final one)
    train_log = (root / "logs" / STUDY / "train" / f"{RUN}.log").read_text()
    resumed = re.search(r"resumed \S+ at ([\d.]+) kimg \(step (\d+)\)", train_log)
    assert resumed, train_log[-3000:]
    assert 0 < int(resumed.group(2)) < 40, train_log[-3000:]

    # the same bytes as the uninterrupted run, and the same log
    assert straight.returncode == 0, straight.stderr[-3000:]
    assert (run_dir / "model.pt").read_bytes() == (tmp_path / "straight" / "model.pt").read_bytes()
    records = lambda p: [(r["nimg"], r["loss"], r["loss_bins"]) for r in map(json.loads, p.read_text().splitlines())]  # noqa: E731
    assert records(run_dir / "train_log.jsonl") == records(tmp_path / "straight" / "train_log.jsonl")
    # live curves of the run: in logs/, outside the run folder (a DVC out) and out of byte comparisons
    events = root / "logs" / STUDY / "tensorboard" / RUN
    assert len(list(events.glob("events.out.tfevents.*.train"))) == 2, sorted(os.listdir(events))
    assert not list(run_dir.rglob("events.out.tfevents.*"))
    print(f"signalled at {signalled_at:.0f} s (after step {resumed.group(2)}), finished after "
          f"{time.monotonic() - start:.0f} s")


def test_the_slurm_tests_snakemake_polls_at_most_every_few_seconds():
    """tests/snakemake_steady_poll.py caps the SLURM executor's back-off (it adds 10 s per status
    check that finds no job finished, up to 180 s): whatever the executor asks for, <= CAP_S."""
    from snakemake_executor_plugin_slurm import Executor
    from snakemake_steady_poll import CAP_S

    executor = Executor.__new__(Executor)  # the property alone: no workflow needed
    for asked, got in ((2, 2), (12, min(12, CAP_S)), (180, CAP_S)):
        executor.next_seconds_between_status_checks = asked
        assert executor._next_seconds_between_status_checks == got
