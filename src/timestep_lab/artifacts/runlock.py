"""One writer per run folder: a lock file holding the writer's pid and host.

``with RunLock(out_dir): ...`` creates ``out_dir/.lock`` with ``O_CREAT | O_EXCL`` (atomic on
local file systems and NFSv3+), so of two processes started on the same folder exactly one gets
it; the other fails at once with :class:`RunLockedError` naming the holder. A lock left behind by a
dead process (SIGKILL, OOM killer, a killed Snakemake's orphan that has since exited) on this host
is taken over with a logged message. A process id is reused once its process is gone, so the lock
also records when its writer started (``started``: the kernel's start time of that pid, in clock
ticks since boot, with the boot id): a live process under the recorded pid that started at
another time, or after another boot, is not the writer, and its lock is stale too. A lock held
from another host cannot be checked for liveness; the error says how to remove it when you know
that writer is gone.
"""

from __future__ import annotations

import contextlib
import errno
import json
import logging
import os
import socket
import time
from pathlib import Path

from timestep_lab.artifacts.io import ArtifactError

__all__ = ["RunLock", "RunLockedError", "LOCK_NAME"]

LOCK_NAME = ".lock"
log = logging.getLogger("timestep_lab")


class RunLockedError(ArtifactError):
    """Another live process is writing the same run folder (the CLI: one ``error:`` line, exit 2)."""


def _boot_id() -> str | None:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip() or None
    except OSError:
        return None


def _started(pid: int) -> str | None:
    """When process ``pid`` started (``/proc/<pid>/stat``'s 22nd field, clock ticks since boot),
    or None when that cannot be read (no /proc, no such process)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat.rsplit(")", 1)[-1].split()  # after the command name, which may hold spaces and ')'
    return fields[19] if len(fields) > 19 else None


def _same_process(holder: dict, pid: int) -> bool:
    """Whether the live process ``pid`` is the writer that ``holder`` (the lock's content) names:
    the same start time after the same boot, where the lock records them (an older lock does not:
    then any live process under that pid counts)."""
    started, boot = holder.get("started"), holder.get("boot_id")
    if started is None:
        return True
    return _started(pid) == started and (boot is None or _boot_id() in (None, boot))


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except OSError as exc:
        return exc.errno == errno.EPERM  # exists, owned by someone else
    return True


class RunLock:
    """Context manager holding ``<run_dir>/.lock`` for the lifetime of one writer."""

    def __init__(self, run_dir: str | Path):
        self.path = Path(run_dir) / LOCK_NAME
        self.host = socket.gethostname()
        self.pid = os.getpid()

    def _holder(self) -> dict:
        try:
            return json.loads(self.path.read_text())
        except (OSError, ValueError):
            return {}  # half-written by a writer killed between create and write: stale

    def _create(self) -> bool:
        try:
            fd = os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            return False
        with os.fdopen(fd, "w") as fh:
            json.dump({"pid": self.pid, "host": self.host, "since": time.strftime("%Y-%m-%dT%H:%M:%S"),
                       "started": _started(self.pid), "boot_id": _boot_id()}, fh)
        return True

    def __enter__(self) -> "RunLock":
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:  # e.g. a regular file where the run folder or one of its parents should be
            raise ArtifactError(f"{self.path.parent}: cannot create the run folder ({exc.strerror or exc})") from None
        for _ in range(3):  # create, or take over a stale lock and retry (another process may race us)
            if self._create():
                return self
            holder = self._holder()
            pid, host = holder.get("pid"), holder.get("host")
            if pid == self.pid and host == self.host:
                raise RunLockedError(f"{self.path.parent}: this process already writes this run")
            if host not in (None, self.host):
                raise RunLockedError(
                    f"{self.path.parent}: run is being written by pid {pid} on host {host} (lock {self.path}); "
                    f"if that process is gone, delete the lock file and rerun")
            if isinstance(pid, int) and _alive(pid) and _same_process(holder, pid):
                raise RunLockedError(f"{self.path.parent}: run is being written by pid {pid} on this host "
                                     f"(lock {self.path}); wait for it or stop it, then rerun")
            gone = "that process is gone" if not (isinstance(pid, int) and _alive(pid)) else \
                "that process is gone; its pid now belongs to another process"
            log.warning("%s: taking over a stale lock from pid %s on %s (%s)", self.path.parent, pid, host or "?", gone)
            with contextlib.suppress(FileNotFoundError):
                self.path.unlink()
        raise RunLockedError(f"{self.path.parent}: could not take the lock {self.path}")

    def __exit__(self, *exc) -> None:
        if self._holder().get("pid") == self.pid:
            with contextlib.suppress(FileNotFoundError):
                self.path.unlink()
