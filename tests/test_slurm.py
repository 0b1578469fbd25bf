"""The cluster profile (workflow/profiles/cluster, `--profile cluster`) on a real SLURM:
a throwaway single-node cluster started by the `slurm_cluster` fixture (root only; CI).

1. the rehearsal of config/cifar10.yaml (`cluster_rehearsal`: fake CIFAR-10 pickles, a random
   diffusers reference, every group and analysis) runs through SLURM end to end and renders
   every report, as tests/test_paper_rehearsals.py requires of every paper config;
2. a training job killed with scancel is resubmitted (the profile's `retries`) and the
   workflow still finishes with intact outputs.
"""

from __future__ import annotations

import json
import re
import subprocess
import time
from pathlib import Path

import pytest
import torch
import yaml
from conftest import CLUSTER_PAIRED, CLUSTER_REHEARSAL, copy_worktree, slurm_args, snakemake_command, study_env
from test_paper_rehearsals import check_rehearsal

pytestmark = [pytest.mark.slurm, pytest.mark.workflow, pytest.mark.slow]

SUBMITTED = re.compile(r"has been submitted with SLURM jobid (\d+) \(log: ([^)]+)\)")


def tail(text: str, n: int = 80) -> str:
    return "\n".join(text.splitlines()[-n:])


def run_id(log: str) -> str:
    m = re.search(r"SLURM run ID: (\S+)", log)
    assert m, f"no SLURM run ID in snakemake's output:\n{tail(log)}"
    return m.group(1)


def test_paper_rehearsal_through_slurm(slurm_cluster, cluster_rehearsal):
    study = cluster_rehearsal
    assert study.profile == "cluster"
    assert study.returncode == 0, f"rehearsal through SLURM failed after {study.seconds:.0f} s:\n{tail(study.log)}"

    # the jobs really went through sbatch: ids in snakemake's log, SLURM's own log files, and
    # slurmctld still knows them (MinJobAge) as jobs of this run, all completed, in the
    # partition that TIMESTEP_LAB_SLURM_PARTITION named
    submitted = SUBMITTED.findall(study.log)
    assert len(submitted) >= 6, tail(study.log)  # prep, run (2+), eval, post, report: the group kinds, checked below
    for _, slurm_log in submitted:
        assert Path(slurm_log).is_file(), slurm_log
    assert list((study.root / ".snakemake" / "slurm_logs").glob("group_run_*train*"))
    jobs = {j["id"]: j for j in slurm_cluster.squeue("--name", run_id(study.log))}
    ids = {jid for jid, _ in submitted}
    assert ids <= set(jobs), f"submitted {sorted(ids - set(jobs))} unknown to squeue"
    assert {jobs[i]["state"] for i in ids} == {"COMPLETED"}, {i: jobs[i]["state"] for i in ids}
    comments = {jobs[i]["comment"] for i in ids}
    # every job went in a group job (conftest.REHEARSAL_GROUPS): training with what lies between two
    # trainings, the scoring, the preparation, the cluster profile's own groups (the reports and the
    # analyses' post-processing), none as one SLURM job per rule instance; the pretrained reference
    # is never trained (check_rehearsal: no training log of it)
    for group in ("rule_run_", "rule_eval_", "rule_prep_", "rule_report_", "rule_post_"):
        assert any(c.startswith(group) for c in comments), (group, comments)
    assert any(c.startswith("rule_run_") and "train" in c for c in comments), comments
    assert not any(c.startswith(("rule_train", "rule_sample_score", "rule_interference", "rule_estimate"))
                   for c in comments), comments
    # warm start only inside group jobs (workflow/rules/warmstart.smk): the submitting snakemake
    # started no server (here the jobs run on this very host, so its socket would have been
    # reachable); each group job's snakemake started one in its allocation for the group's
    # commands: one server log per group job, and the group's commands forked from it
    logs = study.root / "logs" / f"{CLUSTER_REHEARSAL}-rehearsal"
    assert not (logs / "warm_start.log").exists(), study.warm
    servers = sorted((logs / "warm_start").glob("slurm-*.log"))
    server_jobs = [re.fullmatch(r"slurm-(\d+)\.log", p.name).group(1) for p in servers]
    assert servers and set(server_jobs) <= ids and len(set(server_jobs)) == len(servers), server_jobs
    assert all("warm-start server usage" in p.read_text() for p in servers), servers
    warm = {Path(p).parent.name for p in study.warm if "start=warm" in (logs / p).read_text(errors="replace")}
    assert warm >= {"train", "sample_score", "evaluate_progress", "report"}, study.warm
    partitions = {slurm_cluster.run("squeue", "--noheader", "--states=all", "--jobs", i, "--format=%P").stdout.strip()
                  for i in sorted(ids)[:3]}
    assert partitions == {slurm_cluster.partition}

    # every report, the index with its banner, a verdict per claim, the reference read in its format
    check_rehearsal(study.root, CLUSTER_REHEARSAL, CLUSTER_PAIRED)
    print(f"rehearsal of config/{CLUSTER_REHEARSAL}.yaml through SLURM: {study.seconds:.0f} s, {len(ids)} SLURM jobs")


RUN = "uniform_none_eps_b64_linear_s0"


def scancel_config(root: Path) -> str:
    """The smoke study as study `scancel` (its own results/logs folders), with training long
    enough (~20 s of steps) to be cancelled in the middle."""
    cfg = yaml.safe_load((root / "config" / "smoke.yaml").read_text())
    cfg["study"] = "scancel"
    cfg["base"]["train"].update(total_kimg=16, log_every_kimg=2, checkpoint_every_kimg=4)
    path = root / "config" / "scancel.yaml"
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    return str(path.relative_to(root))


def test_scancel_train_job_is_retried(slurm_cluster, tmp_path):
    root = copy_worktree(tmp_path / "repo")
    env = study_env(slurm_cluster)
    configfile = scancel_config(root)
    run_dir = root / "results" / "scancel" / "runs" / RUN
    targets = [f"results/scancel/runs/{RUN}/model.pt", f"results/scancel/runs/{RUN}/metrics.json"]
    args = ["--configfile", configfile, *slurm_args(slurm_cluster), *targets]
    log_path = root / "scancel.log"
    start = time.monotonic()
    with open(log_path, "w") as log_file:
        proc = subprocess.Popen([*snakemake_command(env, slurm=True), *args], cwd=root, env=env, stdout=log_file, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, text=True, start_new_session=True)
    try:
        # wait until the train job runs and training has begun (train_log.jsonl), then kill it
        train_log = root / "logs" / "scancel" / "train" / f"{RUN}.log"
        victim = None
        deadline = time.monotonic() + 300
        while victim is None:
            assert proc.poll() is None, f"snakemake ended before the train job ran:\n{tail(log_path.read_text())}"
            assert time.monotonic() < deadline, f"no running train job:\n{tail(log_path.read_text())}"
            running = [j for j in slurm_cluster.squeue(states="RUNNING")
                       if j["comment"] == f"rule_train_wildcards_{RUN}"]
            if running and (run_dir / "train_log.jsonl").exists():
                victim = running[0]["id"]
            else:
                time.sleep(0.5)
        slurm_cluster.run("scancel", victim)
        cancelled_at = time.monotonic() - start
        rc = proc.wait(timeout=420)
    finally:
        if proc.poll() is None:
            proc.terminate()
            proc.wait(60)
    log = log_path.read_text()
    assert rc == 0, f"snakemake failed after the scancel:\n{tail(log)}"

    # SLURM saw the cancel, snakemake resubmitted, the second attempt completed
    state = {j["id"]: j for j in slurm_cluster.squeue("--name", run_id(log))}
    assert state[victim]["state"] == "CANCELLED", state[victim]
    trains = [j for j in state.values() if j["comment"] == f"rule_train_wildcards_{RUN}"]
    assert [j["state"] for j in sorted(trains, key=lambda j: int(j["id"]))] == ["CANCELLED", "COMPLETED"], trains
    assert f"SLURM-job '{victim}' failed, SLURM status is: 'CANCELLED'" in log
    assert "Trying to restart job" in log
    assert train_log.read_text().count("ok after") == 1, train_log.read_text()[-2000:]

    # outputs intact
    state_dict = torch.load(run_dir / "model.pt", map_location="cpu", weights_only=True)
    assert state_dict
    steps = [json.loads(line) for line in (run_dir / "train_log.jsonl").read_text().splitlines() if line.strip()]
    assert steps[-1]["kimg"] >= 16
    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert metrics
    print(f"scancel at {cancelled_at:.0f} s, finished after {time.monotonic() - start:.0f} s")
