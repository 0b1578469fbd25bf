"""The workflow's side of warm start: one server per local run or cluster group job
(:func:`group_job_size`), started and stopped by the workflow's own rule file
(``workflow/rules/warmstart.smk``); the study table (:mod:`timestep_lab.workflow`) knows nothing of it.

Stdlib only: the Snakefile imports it when it builds the DAG. ``workflow/rules/warmstart.smk``
starts the server when the jobs begin (``onstart``) and stops it when they end (``onsuccess`` /
``onerror``); the server also ends by itself when the ``snakemake`` process does, however it
ends (its standard input is a pipe from that process). ``start`` returns once the server
listens (its imports take 6-7 CPU-s), so every job of the run is forked; if it is not ready
within :data:`READY_TIMEOUT_S`, or fails, jobs find no socket and start fresh, as they do with
warm start off.

The socket lives in a temporary folder ``tlab-warm-<pid of snakemake>-*`` that ``stop`` removes,
and the server too when it ends (a killed ``snakemake`` never calls ``stop``); one left behind
all the same (both killed) is removed by the next ``start`` once that pid is gone
(:func:`clear_stale_folders`).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from timestep_lab.warmstart import SOCKET_ENV

__all__ = ["WarmStart", "supported", "clear_stale_folders", "group_job_size", "ENTRY", "MIN_JOBS", "READY_TIMEOUT_S",
           "FOLDER_PREFIX"]

#: what each worker runs: ``python -m timestep_lab``'s command line, usage line included
ENTRY = "timestep_lab.cli:run_command"

#: a run of fewer commands starts them fresh: the server's imports (5-7 CPU-s) cost about what
#: two fresh starts do (2-3.5 CPU-s each), and waiting for them would delay a one-job rerun
MIN_JOBS = 3

#: how long ``start`` waits for the server to listen (it needs ~7 s on an idle 2-core machine)
READY_TIMEOUT_S = 120.0


#: the socket folders' name prefix; the pid of the process that made the folder follows
FOLDER_PREFIX = "tlab-warm-"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


def clear_stale_folders(root: str | Path | None = None) -> list[str]:
    """Remove this user's socket folders under ``root`` (default: the temp folder) whose maker
    (the pid in the name) has ended: a ``snakemake`` and its server both killed. Returns them."""
    root = Path(root or tempfile.gettempdir())
    pattern = re.compile(rf"^{re.escape(FOLDER_PREFIX)}(\d+)-")
    removed = []
    try:
        entries = list(os.scandir(root))
    except OSError:
        return removed
    for entry in entries:
        m = pattern.match(entry.name)
        try:
            mine = entry.is_dir(follow_symlinks=False) and entry.stat(follow_symlinks=False).st_uid == os.getuid()
        except OSError:
            continue
        if m and mine and not _alive(int(m.group(1))):
            shutil.rmtree(entry.path, ignore_errors=True)
            removed.append(entry.path)
    return removed


def group_job_size(argv: list[str], remote: bool) -> int:
    """How many jobs a snakemake with command line ``argv`` runs as a cluster group job's: the
    number of its ``--target-jobs`` when it runs in remote mode with ``--local-groupid`` (only the
    snakemake a group job's batch script runs gets both; it runs each job through ``srun
    snakemake`` with that one job), else 0 (the submitting snakemake, one running a single job,
    a local run)."""
    if not remote or "--local-groupid" not in argv or "--target-jobs" not in argv:
        return 0
    rest = argv[argv.index("--target-jobs") + 1:]
    return next((i for i, arg in enumerate(rest) if arg.startswith("--")), len(rest))


def supported() -> bool:
    """Warm start needs ``fork`` and ``pidfd_open`` (Linux 5.3+)."""
    return hasattr(os, "fork") and hasattr(os, "pidfd_open")


class WarmStart:
    """The server of one ``snakemake`` run, logging to ``log``; a no-op unless ``enabled``.
    ``tmp_dir``: where its socket folder goes (default: the temp folder); ``preload=False``: the
    server imports nothing ahead (tests)."""

    def __init__(self, log: str | Path, enabled: bool = True, tmp_dir: str | Path | None = None,
                 preload: bool = True):
        self.log, self.enabled = Path(log), enabled and supported()
        self.tmp_dir, self.preload = tmp_dir, preload
        self.proc: subprocess.Popen | None = None
        self.dir: str | None = None

    def start(self, ready_timeout_s: float = READY_TIMEOUT_S) -> None:
        """Start the server, wait until it listens (at most ``ready_timeout_s``), and give its
        socket to every job started from now on (:data:`SOCKET_ENV`).

        Waiting costs no CPU, and a job started meanwhile would pay its own imports (2-3.5
        CPU-s) besides the server's; it also makes where a job runs not depend on timing."""
        if not self.enabled or self.proc is not None:
            return
        clear_stale_folders(self.tmp_dir)
        # short: a socket path has at most 107 bytes
        self.dir = tempfile.mkdtemp(prefix=f"{FOLDER_PREFIX}{os.getpid()}-", dir=self.tmp_dir)
        path = os.path.join(self.dir, "socket")
        self.log.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log, "a") as log:
            # its own session: a Ctrl-C reaches the jobs (through their clients), not the server
            self.proc = subprocess.Popen([sys.executable, "-m", "timestep_lab.warmstart.server", "--socket", path,
                                          "--entry", ENTRY, "--remove-folder", *([] if self.preload else ["--no-preload"])],
                                         stdin=subprocess.PIPE, stdout=log, stderr=log, start_new_session=True)
        deadline = time.monotonic() + ready_timeout_s
        while not os.path.exists(path) and self.proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        if not os.path.exists(path):
            why = (f"the server exited with status {self.proc.returncode}; every job starts fresh"
                   if self.proc.poll() is not None else
                   f"the server is not listening after {ready_timeout_s:.0f} s; jobs start fresh until it is")
            with open(self.log, "a") as log:
                print(f"warm start: {why}", file=log)
        os.environ[SOCKET_ENV] = path

    def stop(self, timeout_s: float = 30.0) -> None:
        """End the server (its running jobs get SIGTERM) and reap it, so its CPU counts as ours."""
        os.environ.pop(SOCKET_ENV, None)
        if self.proc is None:
            return
        self.proc.stdin.close()
        try:
            self.proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.proc = None
        shutil.rmtree(self.dir, ignore_errors=True)
