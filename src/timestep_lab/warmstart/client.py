"""``forward``: run this process's command in the warm-start server's worker (package docstring).

Stdlib only, and nothing of the package but its ``__init__`` and :mod:`.protocol`: ``python -m timestep_lab`` calls it
before it imports the CLI, so a forwarded job costs the client ~0.05 CPU-s.
"""

from __future__ import annotations

import os
import select
import signal
import socket
import sys

from timestep_lab.warmstart import SOCKET_ENV
from timestep_lab.warmstart.protocol import send_request

__all__ = ["forward", "RELAYED_SIGNALS", "started_with"]

#: what the client passes on to the worker (Snakemake cancels a job with SIGTERM; Ctrl-C is SIGINT),
#: unless this process started with it ignored: then neither it nor the job reacts to it
RELAYED_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2)

_NAMES = {signal.SIG_IGN: "ignore", signal.SIG_DFL: "default", signal.default_int_handler: "interrupt"}


def started_with() -> tuple[dict[int, str], tuple[int, ...]]:
    """This process's signal dispositions (``{signum: "ignore" | "default" | "interrupt"}``) and
    blocked signals, read before it changes any: what a fresh ``python -m timestep_lab`` started
    here has, so what the worker must take. A job started under ``nohup`` or with ``&`` inherits
    SIGHUP or SIGINT as ignored, and a fresh Python keeps it so; a worker forked from the server
    would otherwise have the server's."""
    signals = {}
    for sig in signal.valid_signals():
        if sig in (signal.SIGKILL, signal.SIGSTOP):
            continue
        try:
            name = _NAMES.get(signal.getsignal(sig))
        except (OSError, ValueError):
            continue
        if name is not None:  # None: a handler not set from Python (none at this point of the start)
            signals[int(sig)] = name
    return signals, tuple(sorted(int(s) for s in signal.pthread_sigmask(signal.SIG_BLOCK, ())))


def forward(socket_path: str, argv: list[str] | None = None) -> int | None:
    """Have the server at ``socket_path`` run ``argv`` (default ``sys.argv``) here, as this process.

    The worker gets this process's standard streams, working directory and environment (minus
    the socket variable, so its own ``python -m timestep_lab`` children start fresh). Returns its
    exit status (``128 + N`` when signal N ended it, as a shell reports it), or ``None`` when no
    server answers at ``socket_path`` or it answers ``fresh`` (its package changed since it
    started): the caller then runs the command itself. If the server dies first, this returns
    1 only once the worker is gone too (it dies with the server), so whoever waits for this
    process never sees the job end while it can still write.
    """
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.connect(socket_path)
    except OSError:
        sock.close()
        return None
    env = {k: v for k, v in os.environ.items() if k != SOCKET_ENV}
    signals, blocked = started_with()
    try:
        send_request(sock, list(sys.argv if argv is None else argv), os.getcwd(), env, signals, blocked)
    except OSError:  # e.g. a closed stdin cannot be passed: nothing was started, so start here
        sock.close()
        return None

    def relay(signum, _frame):
        try:
            sock.sendall(f"kill {signum}\n".encode())
        except OSError:
            pass

    previous = {sig: signal.signal(sig, relay) for sig in RELAYED_SIGNALS if signals.get(int(sig)) != "ignore"}
    worker, buf = None, b""
    try:
        while True:
            while b"\n" not in buf:
                try:
                    chunk = sock.recv(64)
                except OSError:
                    chunk = b""
                if not chunk:
                    _wait_gone(worker)
                    print(f"error: the warm-start server at {socket_path} closed the connection before the job "
                          f"ended", file=sys.stderr)
                    return 1
                buf += chunk
            line, _, buf = buf.partition(b"\n")
            kind, _, number = line.decode().strip().partition(" ")
            if kind == "pid":
                worker = int(number)
            elif kind == "fresh":
                return None
            else:
                return int(number) if kind == "exit" else 128 + int(number)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        sock.close()


def _wait_gone(pid: int | None, timeout_s: float = 60.0) -> None:
    """Wait until process ``pid`` (a worker, which the kernel kills when its server dies) has ended."""
    if pid is None:
        return
    try:
        fd = os.pidfd_open(pid)
    except OSError:  # gone already
        return
    try:
        select.select([fd], [], [], timeout_s)
    finally:
        os.close(fd)
