"""The warm-start server: import once, then fork one worker per job (package docstring).

``python -m timestep_lab.warmstart.server --socket PATH`` imports :data:`PRELOAD` and every
``timestep_lab`` module, then listens on ``PATH`` (created only once it accepts; a job that starts
before finds no socket and starts fresh) and serves until its standard input reaches end of file:
the workflow holds the other end of that pipe, so the server ends with the ``snakemake`` that
started it, however that ends (``--remove-folder``: and removes the socket's folder then).

Nothing outlives it or writes behind its back: a worker gets SIGKILL when the server ends,
however it ends (``prctl(PR_SET_PDEATHSIG)``), and its client, told the worker's pid, waits for
that death before it reports the failure, so Snakemake never sees a job end while its worker can
still write; a worker whose client is gone is killed (SIGKILL: a dead client relays nothing, and
the job may ignore SIGTERM). The server forks only the code it imported: once any file of the
package differs from when it started (:func:`package_signature`), it answers every request
``fresh`` and the job starts itself in its own process, with the code now on disk. A job whose
environment pins other CPU code paths than the server's libraries were loaded with
(:func:`timestep_lab.arithmetic.pinned`: another reproducibility level) is answered ``fresh`` too,
and pins itself when it starts.

One thread, one loop over the listening socket, the clients' connections (signals to relay; end
of file: client gone, worker killed) and each worker's pidfd (exit: reaped, status sent). Reaping every worker puts
their CPU time in the server's children and
so in its parent's: ``time snakemake`` still counts every job. Its log gets one line per job and, at
the end, its own CPU as a named usage line (:func:`timestep_lab.cost.usage.named_usage_line` of
:data:`USAGE_NAME`), which the cost accounting sums as the row ``(warm-start server)``.
"""

from __future__ import annotations

import argparse
import ctypes
import importlib
import os
import pkgutil
import selectors
import shutil
import signal
import socket
import sys
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from timestep_lab.arithmetic import pin, pinned, this_cpu
from timestep_lab.cost.usage import named_usage_line
from timestep_lab.warmstart.protocol import recv_request
from timestep_lab.warmstart.worker import become_job, run_job

__all__ = ["PRELOAD", "Server", "preload", "package_signature", "main"]

#: the name of the server's usage line, the last line of its log: the row of the cost accounting
USAGE_NAME = "warm-start server"

#: imported before the first fork, besides every timestep_lab module: what the commands import
#: inside functions (measured: an adaptive-sampler training job imported sklearn, 1.2 CPU-s; a
#: scoring job clean-fid's fid module and requests; every training and progress job TensorBoard's
#: writer, 0.1-0.2 CPU-s each, ~20 CPU-s of the default study; every report job nbconvert,
#: jupytext and IPython's shell with matplotlib's inline backend, which run its notebook)
PRELOAD = ("torch", "torchvision", "torch_fidelity", "cleanfid", "cleanfid.fid", "requests", "scipy.linalg",
           "scipy.stats", "pandas", "sklearn.datasets", "sklearn.feature_selection", "torch.utils.tensorboard",
           "jupytext", "nbformat", "nbconvert", "IPython.core.interactiveshell", "matplotlib_inline.backend_inline")


def preload(modules: tuple[str, ...] = PRELOAD, package: str = "timestep_lab") -> list[str]:
    """Import ``modules`` and every module of ``package``; returns what could not be imported.

    A module that needs an optional extra (diffusers) is skipped: its job imports it itself.
    """
    failed = []
    names = list(modules)
    root = importlib.import_module(package)
    names += [m.name for m in pkgutil.walk_packages(root.__path__, package + ".")
              if ".warmstart" not in m.name and not m.name.endswith(".__main__")]
    for name in names:
        try:
            importlib.import_module(name)
        except Exception as exc:  # noqa: BLE001 - any import error only means "not preloaded"
            failed.append(f"{name} ({type(exc).__name__}: {exc})")
    return failed


def package_signature(root: str | Path) -> tuple[tuple[str, int, int], ...]:
    """``(relative path, size, mtime_ns)`` of every file under the package folder ``root``
    (``__pycache__`` aside), sorted: any edit, new or deleted file changes it. About 1 ms."""
    out = []
    for folder, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        for name in files:
            path = os.path.join(folder, name)
            try:
                st = os.stat(path)
            except OSError:  # removed while we walked: a change all the same
                continue
            out.append((os.path.relpath(path, root), st.st_size, st.st_mtime_ns))
    return tuple(sorted(out))


_PR_SET_PDEATHSIG = 1  # <linux/prctl.h>
_LIBC = ctypes.CDLL(None, use_errno=True)


def _die_with(parent: int) -> None:
    """Have the kernel SIGKILL this (forked) process when ``parent`` ends, however it ends;
    exit now if it has ended already (between the fork and here)."""
    if _LIBC.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG) failed")
    if os.getppid() != parent:
        os._exit(1)


def fork_hazards() -> list[str]:
    """What would make a fork unsafe now: other threads, an initialised CUDA context."""
    hazards = [f"thread {t.name}" for t in threading.enumerate() if t is not threading.main_thread()]
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_initialized():
        hazards.append("CUDA is initialised")
    return hazards


@dataclass
class _Job:
    conn: socket.socket
    pidfd: int
    argv: list[str]
    started: float


class Server:
    """Accept requests on ``listener`` and run each as ``entry(argv[1:], start="warm")`` in a forked
    worker, as long as the package folder ``package`` still has ``signature``
    (:func:`package_signature`, taken before the server imported it); else reply ``fresh``."""

    def __init__(self, listener: socket.socket, entry: Callable[..., int], log=sys.stderr,
                 package: str | None = None, signature: tuple | None = None):
        self.listener, self.entry, self.log = listener, entry, log
        self.sel = selectors.DefaultSelector()
        self.jobs: dict[int, _Job] = {}
        self.cwd = os.getcwd()
        self.package, self.signature, self.stale = package, signature, False
        self.arithmetic = pinned(os.environ)  # what the libraries were (or will be) loaded with

    def serve(self, parent_fd: int = 0) -> None:
        """Serve until ``parent_fd`` reaches end of file; then terminate and reap what still runs."""
        self.sel.register(self.listener, selectors.EVENT_READ, ("accept", None))
        self.sel.register(parent_fd, selectors.EVENT_READ, ("parent", None))
        while True:
            for key, _ in self.sel.select():
                kind, pid = key.data
                if kind == "accept":
                    self._start()
                elif kind == "exited":
                    self._reap(pid)
                elif kind == "client":
                    self._from_client(pid)
                elif not os.read(parent_fd, 4096):  # parent gone
                    self._stop_all()
                    return

    def _start(self) -> None:
        conn, _ = self.listener.accept()
        conn.settimeout(30)
        try:
            request, fds = recv_request(conn)
        except (OSError, ValueError, KeyError) as exc:
            print(f"bad request: {exc}", file=self.log, flush=True)
            conn.close()
            return
        conn.settimeout(None)
        # this job, and every later one, starts itself with the code on disk; a job that names
        # other CPU code paths than the server loaded its libraries with starts itself, pinned
        if self._package_changed() or self._other_arithmetic(request.env):
            for fd in fds:
                os.close(fd)
            try:
                conn.sendall(b"fresh\n")
            except OSError:
                pass
            conn.close()
            return
        self.log.flush()
        server = os.getpid()
        pid = os.fork()
        if pid == 0:  # the worker: never returns into the server's loop
            status = 1
            try:
                _die_with(server)  # a worker never outlives the server (nor writes after it)
                os.setpgid(0, 0)
                self.sel.close()
                self.listener.close()
                for job in self.jobs.values():  # the other jobs' ends are not this job's
                    job.conn.close()
                    os.close(job.pidfd)
                conn.close()
                become_job(request, fds, self.cwd)
                status = run_job(self.entry)
            except BaseException:  # noqa: BLE001 - e.g. the job's cwd is gone: say so, exit 1
                traceback.print_exc()
            finally:
                os._exit(status)
        for fd in fds:
            os.close(fd)
        try:
            os.setpgid(pid, pid)  # also here, so a kill right away reaches the group
        except OSError:
            pass
        job = _Job(conn, os.pidfd_open(pid), request.argv, time.monotonic())
        self.jobs[pid] = job
        self.sel.register(job.pidfd, selectors.EVENT_READ, ("exited", pid))
        self.sel.register(conn, selectors.EVENT_READ, ("client", pid))
        try:  # the client waits for this pid to be gone if the server dies first
            conn.sendall(f"pid {pid}\n".encode())
        except OSError:
            pass

    def _other_arithmetic(self, env: dict[str, str]) -> bool:
        """Whether the job's environment pins other CPU code paths than the server's
        (:func:`timestep_lab.arithmetic.pinned`): its libraries chose theirs when they loaded."""
        if pinned(env) == self.arithmetic:
            return False
        print(f"a job asks for other arithmetic ({dict(pinned(env))}) than the server runs ({dict(self.arithmetic)}): "
              f"it starts fresh", file=self.log, flush=True)
        return True

    def _package_changed(self) -> bool:
        """Whether a file of the package changed since the server started (then it stays so)."""
        if self.stale or self.package is None:
            return self.stale
        now = package_signature(self.package)
        if now != self.signature:
            self.stale = True
            what = sorted(set(now) ^ set(self.signature or ()))
            print(f"package changed since the server started ({what[0][0] if what else self.package}): "
                  f"not forking any more; jobs start fresh", file=self.log, flush=True)
        return self.stale

    def _from_client(self, pid: int) -> None:
        job = self.jobs[pid]
        try:
            data = job.conn.recv(4096)
        except OSError:
            data = b""
        if not data:  # the client is gone (killed): so is its job, at once (it may ignore SIGTERM)
            self.sel.unregister(job.conn)
            _killpg(pid, signal.SIGKILL)
            return
        for line in data.decode(errors="replace").splitlines():
            kind, _, number = line.partition(" ")
            if kind == "kill" and number.isdigit():
                _killpg(pid, int(number))

    def _reap(self, pid: int) -> None:
        job = self.jobs.pop(pid)
        _, status = os.waitpid(pid, 0)
        self.sel.unregister(job.pidfd)
        os.close(job.pidfd)
        reply = f"exit {os.WEXITSTATUS(status)}" if os.WIFEXITED(status) else f"signal {os.WTERMSIG(status)}"
        print(f"{reply} after {time.monotonic() - job.started:.1f} s: {' '.join(job.argv[1:])}", file=self.log, flush=True)
        try:
            self.sel.unregister(job.conn)
        except KeyError:
            pass
        try:
            job.conn.sendall(reply.encode() + b"\n")
        except OSError:
            pass
        job.conn.close()

    def _stop_all(self, grace_s: float = 10.0) -> None:
        for pid in self.jobs:
            _killpg(pid, signal.SIGTERM)
        deadline = time.monotonic() + grace_s
        while self.jobs and time.monotonic() < deadline:
            for key, _ in self.sel.select(timeout=max(0.0, deadline - time.monotonic())):
                if key.data[0] == "exited":
                    self._reap(key.data[1])
        for pid in list(self.jobs):
            _killpg(pid, signal.SIGKILL)
            self._reap(pid)


def _killpg(pid: int, sig: int) -> None:
    try:
        os.killpg(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _entry(spec: str) -> Callable[..., int]:
    module, _, name = spec.partition(":")
    return getattr(importlib.import_module(module), name)


def _unlink(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m timestep_lab.warmstart.server",
                                description="Fork timestep_lab jobs from one warm process (docs/design.md, 'Warm start').")
    p.add_argument("--socket", required=True, help="Unix socket path to listen on (removed at the end)")
    p.add_argument("--entry", required=True,
                   help="MODULE:FUNCTION called as FUNCTION(argv[1:], start='warm') in each worker; returns the exit status "
                        "(the workflow gives timestep_lab.cli:run_command)")
    p.add_argument("--no-preload", action="store_true", help="import nothing ahead (tests)")
    p.add_argument("--remove-folder", action="store_true",
                   help="remove the socket's folder at the end (the workflow makes one per run)")
    args = p.parse_args(argv)
    try:
        try:
            pin(os.environ, **this_cpu())  # as `python -m timestep_lab` does, before anything heavy is loaded
        except ValueError as exc:  # an unknown level: no server; every job starts itself and says so
            print(f"error: {exc}", file=sys.stderr)
            return 2
        return _serve(args)
    finally:  # however it ends, early refusals included: the folder is this run's alone
        if args.remove_folder:
            shutil.rmtree(os.path.dirname(args.socket), ignore_errors=True)


def _serve(args: argparse.Namespace) -> int:
    """Import, listen on ``args.socket`` and serve until the parent closes our stdin."""
    t0 = time.monotonic()
    package = os.path.dirname(importlib.import_module("timestep_lab").__file__)
    signature = package_signature(package)  # before the imports: an edit during them counts as a change
    # the code identity of what is imported now, computed once: every worker inherits it (and the
    # server forks nothing once a file differs, so it stays true)
    importlib.import_module("timestep_lab.artifacts.identity").current()
    entry = _entry(args.entry)
    for name in [] if args.no_preload else preload():
        print(f"not preloaded: {name}", file=sys.stderr)
    hazards = fork_hazards()
    if hazards:  # listen to nobody: every job finds no socket and starts fresh
        print(f"error: not forking with {', '.join(hazards)}", file=sys.stderr)
        return 1
    # bound and listening under a temporary name, then renamed: whoever sees PATH can connect
    # (WarmStart.start waits for it; a client between bind and listen would be refused)
    # (the temporary name is no longer than "socket": a path that fits AF_UNIX's ~107 bytes fits both)
    binding = os.path.join(os.path.dirname(args.socket), f"{os.getpid():x}"[-6:])
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        listener.bind(binding)
        listener.listen(128)
        os.rename(binding, args.socket)
    except OSError as exc:
        print(f"error: cannot listen on {args.socket}: {exc.strerror or exc}", file=sys.stderr)
        listener.close()
        _unlink(binding)
        return 2
    try:
        print(f"ready in {time.monotonic() - t0:.1f} s, pid {os.getpid()}", file=sys.stderr, flush=True)
        Server(listener, entry, package=package, signature=signature).serve()
    finally:
        listener.close()
        _unlink(args.socket)
        print(named_usage_line(USAGE_NAME), file=sys.stderr, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
