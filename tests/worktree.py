"""A fresh copy of the repository for workflow tests (what `git clone` would give, plus
uncommitted work), and the environment its jobs run in."""

from __future__ import annotations

import os
import resource
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def copy_worktree(dst: Path) -> Path:
    """Copy the tracked and untracked-but-not-ignored files of the repo to ``dst`` (symlinks kept
    as links, so `profiles`, `cluster` and `params.yaml` resolve inside the copy). Ignored paths
    (results, reports, data, .venv, caches) are not copied: the copy starts from nothing."""
    files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=ROOT, check=True,
                           capture_output=True).stdout.decode().split("\0")
    dst.mkdir(parents=True, exist_ok=True)
    for rel in filter(None, files):
        src, out = ROOT / rel, dst / rel
        if not src.exists() and not src.is_symlink():
            continue  # deleted in the working tree
        out.parent.mkdir(parents=True, exist_ok=True)
        if src.is_symlink():
            os.symlink(os.readlink(src), out)
        else:
            shutil.copy2(src, out)
    return dst


PROFILE_ENV = ("TIMESTEP_LAB_SLURM_ACCOUNT", "TIMESTEP_LAB_SLURM_PARTITION", "TIMESTEP_LAB_GPU_MODEL",
               "TIMESTEP_LAB_JOBS", "TIMESTEP_LAB_SLURM_SIGNAL_S")  # site settings the cluster profile reads


def study_env(cluster=None) -> dict[str, str]:
    """Environment for snakemake and the jobs: the venv's bin first on PATH (jobs call
    `python -m timestep_lab`), then the cluster's client wrappers; no outer
    SLURM job's variables and no site settings from the caller's shell."""
    venv_bin = ROOT / ".venv" / "bin"
    if not (venv_bin / "snakemake").exists():
        venv_bin = Path(sys.executable).parent
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("SLURM_", "SBATCH_", "SRUN_", "SALLOC_")) and k not in PROFILE_ENV}
    path = env.get("PATH", "")
    if cluster is not None:
        env.update(cluster.env)
        path = cluster.env["PATH"]
        # the profile's partition setting, as a site would set it
        env["TIMESTEP_LAB_SLURM_PARTITION"] = cluster.partition
    env["PATH"] = os.pathsep.join([str(venv_bin), path])
    return env


def run(cmd: list[str], cwd: Path, env: dict[str, str] | None = None, timeout: float = 900,
        **kwargs) -> subprocess.CompletedProcess:
    """Run ``cmd`` in ``cwd``, output captured as text (stdout and stderr together)."""
    return subprocess.run(cmd, cwd=cwd, env=env or study_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True, timeout=timeout, **kwargs)


def children_cpu_s() -> float:
    """CPU seconds (user + system) of this process's finished, waited-for children so far: the
    difference around a ``subprocess.run`` is that command's whole CPU, whatever else runs."""
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime
