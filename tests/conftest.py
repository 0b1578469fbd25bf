"""Shared fixtures: a prepared digits folder and a tiny, fast run config."""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
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


@dataclass(frozen=True)
class TinyArtifacts:
    """One of every artifact the pipeline writes and reads back, made once per session through
    the command line at tiny sizes (tests/test_artifacts.py, tests/test_cli_errors.py)."""

    config: Path  # run config of ``run``
    run: Path  # model.pt, snapshots/snapshot-*.pt, train_state/checkpoint.pt
    cnn: Path  # digits-CNN weights (train-features, 1 epoch)
    reference: Path  # reference statistics of 64 training images
    samples: Path  # 16 samples of run/model.pt
    profile: Path  # loss profile of run/model.pt (32 images, stride 10)
    slots: Path  # 3 slots of that profile


@pytest.fixture(scope="session")
def tiny_artifacts(digits_dir, digits_test_dir, tmp_path_factory) -> TinyArtifacts:
    from timestep_lab.cli import main
    from timestep_lab.config import dump_config

    root = tmp_path_factory.mktemp("artifacts")
    a = TinyArtifacts(root / "run.yaml", root / "run", root / "cnn.pt", root / "ref.npz", root / "samples.npz",
                      root / "profile.json", root / "slots.json")
    dump_config(tiny_config(digits_dir, train={"total_kimg": 0.32, "snapshot_every_kimg": 0.16}), a.config)
    common = ["--threads", "1", "--no-progress"]
    for argv in (["train", "--config", a.config, "--out", a.run, *common],
                 ["train-features", "--data", digits_dir, "--test-data", digits_test_dir, "--out", a.cnn, "--epochs", "1"],
                 ["reference-stats", "--data", digits_dir, "--extractor", "digits-cnn", "--weights", a.cnn, "--out",
                  a.reference, "--max-images", "64", *common],
                 ["sample", "--model", a.run / "model.pt", "--out", a.samples, "--set", "sample.num_samples=16",
                  "--set", "sample.steps=2", *common],
                 ["profile", "--model", a.run / "model.pt", "--data", digits_dir, "--out", a.profile, "--num-images",
                  "32", "--stride", "10", *common],
                 ["slots", "--profile", a.profile, "--n-slots", "3", "--out", a.slots]):
        assert main([str(x) for x in argv]) == 0, argv
    return a


# --------------------------------------------------------------------------------------------
# A throwaway single-node SLURM cluster and a paper-config rehearsal run through it once per
# session (locally when no cluster can be had): tests/test_slurm.py. The smoke study, run once
# per session locally: the workflow tests.


# `make test` runs two xdist workers: every test that uses slurm_cluster or cluster_rehearsal runs in
# one of them, first (xdist group "study"), every test that uses smoke_study in one (group "smoke"):
# tests/xdist_groups.py
from xdist_groups import once_per_run, pytest_collection_modifyitems  # noqa: E402,F401

# Test-only options of the SLURM executor (the profile holds what every cluster needs):
SLURM_TEST_ARGS = [
    # the README's cluster command: the cluster profile alone (profiles/default is for local
    # runs; snakemake would otherwise merge it in and its `cores: 2` would cap every job)
    "--workflow-profile", "none",
    # status from squeue: the test cluster has no slurmdbd, so no sacct (MinJobAge keeps
    # finished jobs visible to squeue for an hour)
    "--slurm-status-command", "squeue",
    # a tiny cluster answers at once: poll every 2 s instead of waiting 40 s (grows by 10 s
    # per poll that finds nothing finished, back to 2 s when one did)
    "--slurm-init-seconds-before-status-checks", "2",
    "--seconds-between-status-checks", "2",
    # no account: TIMESTEP_LAB_SLURM_ACCOUNT is unset (study_env), so sbatch gets no -A (a
    # given account would be validated with sacctmgr/sshare, which need slurmdbd). The plugin
    # (2.8.0) then tries to guess one with sacct, fails and goes on without; --slurm-no-account
    # says the same for plugin versions that read it (2.8.0 defines it but never reads it).
    "--slurm-no-account",
    # keep the SLURM log of every job, as evidence that the jobs ran under SLURM
    "--slurm-keep-successful-logs",
]
# The smoke study's ~100 cluster jobs each run snakemake twice inside SLURM (the job's
# slurm-jobstep and the srun step under it, each parsing the workflow and importing torch:
# ~10 s of CPU per job before the job's own command). The cluster profile groups the small
# CPU-only rules (prepare_data, the analyses' post-processing, reports: `groups` in
# workflow/profiles/cluster/config.yaml); on this CPU study the test also bundles the many small
# per-run evaluation jobs, as the profile's comment tells CPU studies to (a command-line
# --groups replaces the profile's list, so the profile's groups are repeated). Each group is a
# one-CPU job (`--cores 1`: a group's jobs run one after the other) so that two run side by
# side and a training job waits for one slot, not for the whole node. Training and profiling
# stay one SLURM job each: train cannot be grouped (fine-tuning runs start from the reference
# model through `slots`, which would make a group depend on itself), nor profile_losses.
CLUSTER_PROFILE = Path(__file__).resolve().parent.parent / "workflow" / "profiles" / "cluster" / "config.yaml"
CPU_STUDY_GROUPS = ["sample_score=eval", "evaluate_progress=progress"]
CPU_STUDY_COMPONENTS = ["eval=3", "progress=6"]


def cluster_profile_option(key: str):
    """One option of the cluster profile (a YTE file; the keys read here are plain YAML)."""
    import yaml

    return yaml.safe_load(CLUSTER_PROFILE.read_text())[key]


SLURM_SMOKE_GROUPS = [
    "--groups", *cluster_profile_option("groups"), *CPU_STUDY_GROUPS,
    "--group-components", *cluster_profile_option("group-components"), *CPU_STUDY_COMPONENTS,
    "--cores", "1",
]


def slurm_args(cluster=None, groups: bool = True) -> list[str]:
    """``--profile cluster`` and the test-only options (with the group jobs)."""
    return ["--profile", "cluster", *SLURM_TEST_ARGS, *(SLURM_SMOKE_GROUPS if groups else [])]


# The cluster rehearsal (164 jobs, 123 of them commands) bundles further. Inside SLURM every job
# pays snakemake starts (~1.4 CPU-s each; 7 SLURM jobs cost 19.3 CPU-s more than the same 7
# commands run locally) and, run alone, a fresh process's imports (2.6-3.1 CPU-s); a group job
# pays one snakemake start for the group, and a group of 3 or more jobs forks their commands from
# one warm-start server inside its allocation (workflow/rules/warmstart.smk). So training is
# grouped with what lies between two trainings (a run's config; the profiles and slots that
# derived runs start from: a group may not depend on itself through jobs outside it), the per-run
# scoring in one group, data preparation with the reference statistics and the floor, and the
# contribution and prediction-type profiles with the analyses' post-processing.
# Measured alone on 2 idle cores, the whole run: 777 CPU-s and 530 s wall with SLURM_SMOKE_GROUPS
# (71 SLURM jobs), 688 and 491 s in 13 group jobs, 500 and 435 s in 13 warm group jobs; larger
# groups leave fewer servers to start (each imports for ~5-6 CPU-s), but inside a group job the jobs
# run one after the other (each through srun and a snakemake start, ~2.5 s besides its command), so
# a group's size is its wall time: the scoring and the reports go in two groups each, which the
# one-node cluster runs side by side (eval=11, report=5; 21 cold scoring jobs took 125 s in one
# group). The cut study below (17 trainings): warm 265 s unsplit; cold 402 s unsplit, 309 s split
# (alone on 2 idle cores), 408 s in the suite's CI, which with it took 949 s: so warm start stays
# in the cluster's group jobs until the suite has room (issue 39). A group
# sums its jobs' resources and a string resource must agree across them: the training jobs'
# time-limit signal (`slurm_extra`) is off here (TIMESTEP_LAB_SLURM_SIGNAL_S=0;
# tests/test_slurm_timelimit.py tests the signal on a training job of its own).
REHEARSAL_GROUPS = [
    "--groups", *cluster_profile_option("groups"), "reference_stats=prep", "floor=prep",
    "sample_score=eval", "evaluate_progress=eval", "contribution=post", "profile_predictions=post",
    "train=run", "run_config=run", "profile_losses=run", "slots=run",
    "--group-components", *[f"{k}={v}" for k, v in {
        **dict(c.split("=") for c in cluster_profile_option("group-components")),
        "prep": 3, "post": 7, "eval": 11, "run": 12, "report": 5}.items()],
    "--cores", "1",
]
REHEARSAL_ENV = {"TIMESTEP_LAB_SLURM_SIGNAL_S": "0"}
# Through SLURM every group job pays its own snakemake starts and its warm-start server's imports,
# and the one-node test cluster runs two group jobs at a time, so the cluster rehearses a smaller
# study: the test is of the cluster path (submission, groups, resources, retries, every rule kind
# once), not of the science, which the local rehearsals of config/celebahq.yaml (the same cut but for
# the sampler comparison's baseline, SpeeD, adaptive and CLTS, each claim with two paired seeds) and
# config/imagenet.yaml (cut the same way) run end to end.
# Cut: the sampler comparison to the baseline and SpeeD's sampler + weighting (its list entry), the
# one claim the cluster checks with two paired seeds (speed_faster: CLUSTER_PAIRED; each of the six
# arms cut cost ~5 jobs, each job ~2.5 s of snakemake start inside its group job, ~90 s of the
# rehearsal's 390); the schedules group to uniform and SpeeD on the linear and cosine schedules; the
# prediction types to eps and the mixed head (the mixed_heads claims' arms: 2 trainings and 2 scores
# fewer); the slot fine-tunes to slots 3 and 9 (an interference matrix still has off-diagonal
# cells). Every group, analysis, rule kind and report stays.
CLUSTER_SAMPLERS = ["uniform"]
CLUSTER_LIST = [{"sampler": "speed", "weighting": "speed"}]
CLUSTER_SCHEDULES = {"sampler": ["uniform", "speed"], "schedule": ["linear", "cosine"]}
CLUSTER_PREDICTIONS = ["eps", "mixed"]
CLUSTER_SLOTS = [3, 9]
CLUSTER_PAIRED = ("speed_faster",)


def trim_rehearsal(config: Path, samplers: list[str] = CLUSTER_SAMPLERS) -> None:
    """The rehearsal config at ``config`` cut to the cluster's study (CLUSTER_*, above; the local
    imagenet rehearsal is cut the same way: tests/test_paper_rehearsals.py), the sampler
    comparison's grid to ``samplers``. A paper config has the same keys: the local celebahq
    rehearsal cuts config/celebahq.yaml itself before `rehearse` derives its rehearsal."""
    import yaml

    cfg = yaml.safe_load(config.read_text())
    groups = cfg["groups"]
    grid = groups["sampler_comparison"]["grid"]
    assert set(samplers) < set(grid["sampler"]), grid  # a cut, never an arm of its own
    grid["sampler"] = list(samplers)
    assert all(e in groups["sampler_comparison"]["list"] for e in CLUSTER_LIST), groups["sampler_comparison"]
    groups["sampler_comparison"]["list"] = [dict(e) for e in CLUSTER_LIST]
    for key, values in CLUSTER_SCHEDULES.items():
        assert set(values) < set(groups["schedules"]["grid"][key]), groups["schedules"]
        groups["schedules"]["grid"][key] = list(values)
    predictions = groups["prediction_types"]["grid"]
    assert set(CLUSTER_PREDICTIONS) < set(predictions["prediction"]), predictions
    predictions["prediction"] = list(CLUSTER_PREDICTIONS)
    slots = cfg["analyses"]["slots"]
    assert set(CLUSTER_SLOTS) < set(slots["finetune"]), slots
    slots["finetune"] = list(CLUSTER_SLOTS)
    config.write_text(yaml.safe_dump(cfg, sort_keys=False))


@pytest.fixture(scope="session")
def slurm_cluster(tmp_path_factory):
    """A running single-node SLURM cluster (munged, slurmctld, slurmd on loopback) for the
    session; skips when not root or SLURM cannot be installed. ``cluster.env`` is what clients
    need (SLURM_CONF, PATH with wrappers)."""
    import shutil
    import tempfile

    from slurm_cluster import SlurmCluster, ensure_installed

    reason = ensure_installed()
    if reason:
        pytest.skip(reason)
    once_per_run(tmp_path_factory, "slurm_cluster")  # two clusters on one host would collide
    root = Path(tempfile.mkdtemp(prefix="tlab-slurm-"))  # short: the munge socket path has a limit
    cluster = SlurmCluster.start(root)
    try:
        yield cluster
    finally:
        cluster.stop()
        shutil.rmtree(root, ignore_errors=True)


from worktree import copy_worktree, study_env  # noqa: E402,F401  (one copy and one env for every workflow test)

STEADY_POLL = Path(__file__).resolve().parent / "snakemake_steady_poll.py"


def snakemake_command(env: dict[str, str], slurm: bool = False) -> list[str]:
    """The snakemake of ``env``'s first PATH entry (the venv); ``slurm``: this interpreter running
    tests/snakemake_steady_poll.py, whose SLURM executor checks job states every few seconds
    instead of backing off to minutes."""
    if slurm:  # this interpreter: the venv's (a test may put a spy folder first on PATH)
        return [sys.executable, str(STEADY_POLL)]
    exe = Path(env["PATH"].split(os.pathsep)[0]) / "snakemake"
    return [str(exe) if exe.exists() else "snakemake"]


def run_snakemake(args: list[str], cwd: Path, env: dict[str, str], timeout: float, log_path: Path | None = None):
    """snakemake ``args`` in ``cwd``; (returncode, combined output, seconds). Never raises on
    failure or timeout (a timeout kills the process group and returns 124)."""
    import signal
    import subprocess
    import time

    cmd = [*snakemake_command(env, slurm="cluster" in args), *args]
    start = time.monotonic()
    proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            stdin=subprocess.DEVNULL, text=True, start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=timeout)
        rc = proc.returncode
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGTERM)  # snakemake cancels its SLURM jobs on SIGTERM
        try:
            out, _ = proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            out, _ = proc.communicate()
        out += f"\n[timed out after {timeout:.0f} s]\n"
        rc = 124
    seconds = time.monotonic() - start
    log = f"$ {' '.join(cmd)}\n{out}"
    if log_path is not None:
        log_path.write_text(log)
    return rc, log, seconds


@dataclass
class StudyRun:
    """A study run once in a copy of the working tree."""

    root: Path  # the copy: results/<study>, reports/<study>, logs/<study>, .snakemake
    profile: str  # "cluster" (through SLURM) or "default" (local)
    env: dict  # environment for subprocesses in ``root`` (PATH, SLURM_CONF when on SLURM)
    returncode: int
    log: str  # snakemake's combined output
    seconds: float
    # what ran warm (the warm-start server's log, job logs with "start=warm"), read right after
    # the study: later tests rerun jobs locally in ``root`` (the DVC test reruns the estimate)
    warm: list[str]
    cpu_s: float = 0.0  # CPU of snakemake and every job it waited for (0 through SLURM: slurmd's children)


def _warm_logs(root: Path, study: str) -> list[str]:
    logs = root / "logs" / study
    return [str(p.relative_to(logs)) for p in sorted(logs.rglob("*.log"))
            if p.name == "warm_start.log" or "start=warm" in p.read_text(errors="replace")]


@pytest.fixture(scope="session")
def smoke_study(tmp_path_factory) -> StudyRun:
    """config/smoke.yaml run end to end in a fresh copy of the working tree with the default
    (local) profile: its jobs forked from the warm-start server. Never raises when snakemake
    fails: tests assert on ``returncode``. (The cluster profile runs a paper-config rehearsal:
    ``cluster_rehearsal``.)"""
    from worktree import children_cpu_s

    once_per_run(tmp_path_factory, "smoke_study")
    root = copy_worktree(tmp_path_factory.mktemp("smoke") / "repo")
    env = study_env()
    cpu0 = children_cpu_s()
    rc, log, seconds = run_snakemake(["--configfile", "config/smoke.yaml"], root, env, timeout=3600,
                                     log_path=root / "smoke-study.log")
    return StudyRun(root=root, profile="default", env=env, returncode=rc, log=log, seconds=seconds,
                    warm=_warm_logs(root, "smoke"), cpu_s=children_cpu_s() - cpu0)


#: the paper config the cluster rehearses (tests/test_slurm.py, tests/test_paper_rehearsals.py rehearse the others)
CLUSTER_REHEARSAL = "cifar10"


@pytest.fixture(scope="session")
def cluster_rehearsal(request, tmp_path_factory) -> StudyRun:
    """config/cifar10.yaml rehearsed (``rehearse --fast-features --prepare-only`` writes the
    scaled-down config and its stand-ins) and run end to end through `--profile cluster` on the
    test SLURM cluster when there is one, else with the default (local) profile. Never raises
    when snakemake fails: tests assert on ``returncode``."""
    import subprocess
    import sys

    once_per_run(tmp_path_factory, "cluster_rehearsal")
    try:
        cluster = request.getfixturevalue("slurm_cluster")
    except pytest.skip.Exception:
        cluster = None
    root = copy_worktree(tmp_path_factory.mktemp("rehearsal") / "repo")
    env = study_env(cluster)
    prepare = subprocess.run([sys.executable, "-m", "timestep_lab", "rehearse", f"config/{CLUSTER_REHEARSAL}.yaml",
                              "--fast-features", "--prepare-only", "--no-estimate"], cwd=root, env=env,
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=600)
    args = ["--configfile", f"rehearsal/{CLUSTER_REHEARSAL}/config.yaml"]
    if cluster is not None:
        args += [*slurm_args(cluster, groups=False), *REHEARSAL_GROUPS]
        env.update(REHEARSAL_ENV)
        if prepare.returncode == 0:
            trim_rehearsal(root / "rehearsal" / CLUSTER_REHEARSAL / "config.yaml")
    if prepare.returncode != 0:
        rc, log, seconds = prepare.returncode, prepare.stdout, 0.0
    else:
        rc, log, seconds = run_snakemake(args, root, env, timeout=3600, log_path=root / "rehearsal.log")
    return StudyRun(root=root, profile="cluster" if cluster is not None else "default", env=env, returncode=rc,
                    log=log, seconds=seconds, warm=_warm_logs(root, f"{CLUSTER_REHEARSAL}-rehearsal"))
