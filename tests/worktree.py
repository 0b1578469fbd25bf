"""A fresh copy of the repository for workflow tests (what `git clone` would give, plus
uncommitted work), and the environment its jobs run in."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
VENV_BIN = Path(sys.executable).parent  # the venv the tests run in: snakemake, papermill, dvc


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


def job_env(root: Path = ROOT, **extra: str) -> dict[str, str]:
    """Environment for snakemake/dvc subprocesses in the copy ``root``: the test venv first on PATH
    (jobs call `python -m timestep_lab` and `papermill`), the copy's own sources importable."""
    env = {**os.environ, "PATH": f"{VENV_BIN}{os.pathsep}{os.environ.get('PATH', '')}",
           "PYTHONPATH": str(Path(root) / "src")}
    env.update(extra)
    return env


def run(cmd: list[str], cwd: Path, env: dict[str, str] | None = None, timeout: float = 900,
        **kwargs) -> subprocess.CompletedProcess:
    """Run ``cmd`` in ``cwd``, output captured as text (stdout and stderr together)."""
    return subprocess.run(cmd, cwd=cwd, env=env or job_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True, timeout=timeout, **kwargs)
