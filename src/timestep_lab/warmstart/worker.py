"""What a forked worker does to become the job it was sent (package docstring).

Everything a fresh ``python -m timestep_lab`` would take from its start is taken from the
request instead of from the server: standard streams (the client's descriptors), working
directory, environment, ``sys.argv``, ``sys.path[0]``, the signal dispositions and mask the
client started with (an ignored SIGINT or SIGHUP stays ignored, as under ``nohup`` or ``&``),
its own process group, the thread counts that torch's OpenMP and numpy's and scipy's OpenBLAS would have read
from ``OMP_NUM_THREADS`` / ``OPENBLAS_NUM_THREADS`` / ``MKL_NUM_THREADS`` when they were loaded
(Snakemake sets them to the job's ``threads``; set here through threadpoolctl and torch), and
fresh seeds from the OS for the global random generators of python, numpy and torch, which a
fresh process seeds from the OS at import: else every job would draw the server's numbers.
(The project's own randomness uses explicit, seeded generators and never these.) CPU and
memory counters start at zero in a forked child (``getrusage``), so the job's usage line is
its own.
"""

from __future__ import annotations

import os
import random
import signal
import sys
import tempfile
import threading
import traceback
from collections.abc import Callable

from threadpoolctl import threadpool_limits

from timestep_lab.cost.usage import flush_output
from timestep_lab.warmstart.protocol import N_FDS, Request

__all__ = ["become_job", "run_job"]

_HANDLERS = {"ignore": signal.SIG_IGN, "default": signal.SIG_DFL, "interrupt": signal.default_int_handler}


def become_job(request: Request, fds: list[int], server_cwd: str) -> None:
    """Turn this freshly forked process into the job ``request`` describes (module docstring)."""
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    for target, fd in zip(range(N_FDS), fds):
        os.dup2(fd, target)  # sys.stdin/stdout/stderr keep their objects, now on the job's files
        os.close(fd)
    _set_signals(request.signals, request.blocked)
    os.chdir(request.cwd)
    os.environ.clear()
    os.environ.update(request.env)
    tempfile.tempdir = None  # re-read TMPDIR (Snakemake sets it per job)
    sys.argv = list(request.argv)
    if sys.path and sys.path[0] == server_cwd:  # `python -m` puts the working directory first
        sys.path[0] = request.cwd
    random.seed()
    if "numpy" in sys.modules:
        sys.modules["numpy"].random.seed()
    torch = sys.modules.get("torch")
    if torch is not None:
        torch.seed()
    _set_threads(request.env, torch)


def _set_signals(dispositions: dict[int, str], blocked: tuple[int, ...]) -> None:
    """Each signal's disposition as the client started with it (``protocol.DISPOSITIONS``), then
    its mask. Every signal the client named is set, so nothing of the server's survives: a fresh
    process gets its dispositions from its parent through exec, not from Python."""
    for sig, name in dispositions.items():
        try:
            signal.signal(sig, _HANDLERS[name])
        except (OSError, ValueError):  # a signal this platform will not let Python set
            pass
    signal.pthread_sigmask(signal.SIG_SETMASK, blocked)


def _count(env: dict[str, str], *names: str) -> int | None:
    """The first of ``names`` set to a positive integer in ``env``, as the libraries read them."""
    for name in names:
        value = env.get(name, "").strip()
        if value.isdigit() and int(value) > 0:
            return int(value)
    return None


def _set_threads(env: dict[str, str], torch) -> None:
    """Thread pools as the job's environment would have sized them at load. The server loaded the
    libraries under its own environment; a pool left at the machine's core count spins idle
    threads in every small job (on 2 cores it cost the scoring jobs a third more CPU)."""
    omp = _count(env, "OMP_NUM_THREADS")
    blas = _count(env, "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "GOTO_NUM_THREADS", "OMP_NUM_THREADS")
    if omp is not None:
        threadpool_limits(limits=omp, user_api="openmp")
        if torch is not None:
            torch.set_num_threads(omp)
    if blas is not None:
        threadpool_limits(limits=blas, user_api="blas")


def run_job(entry: Callable[..., int]) -> int:
    """``entry(sys.argv[1:], start="warm")`` as ``python -m timestep_lab`` runs it; its exit status.

    Exceptions become what the interpreter would make of them: ``SystemExit`` its code, anything
    else a traceback and 1. Non-daemon threads are joined, as the interpreter does at exit.
    """
    try:
        status = entry(sys.argv[1:], start="warm")  # its usage line says start=warm
        status = 0 if status is None else int(status)
    except SystemExit as exc:
        code = exc.code
        status = code if isinstance(code, int) else (0 if code is None else 1)
        if not isinstance(code, (int, type(None))):
            print(code, file=sys.stderr)
    except BaseException:  # noqa: BLE001 - the job's failure, reported as the interpreter would
        traceback.print_exc()
        status = 1
    for thread in threading.enumerate():
        if thread is not threading.current_thread() and not thread.daemon:
            thread.join()
    flush_output()
    return status
