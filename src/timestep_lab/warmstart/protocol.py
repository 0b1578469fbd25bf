"""The bytes between :mod:`.client` and :mod:`.server` on one Unix stream connection.

Client -> server, once: an 8-byte big-endian length sent with the client's file descriptors 0,
1 and 2 (``SCM_RIGHTS``), then that many bytes of JSON ``{"argv": [...], "cwd": str, "env":
{...}, "signals": {"<signum>": "ignore" | "default" | "interrupt"}, "blocked": [signum, ...]}``
(the client's signal dispositions and mask as it found them when it started, before it installed
its relays: what a fresh process started in its place would have). Then any number of ``kill N``
lines (a signal the client got, for the worker).
Server -> client, lines: ``pid N`` once the worker is forked (its pid), then, when it ends,
``exit N`` (its exit status) or ``signal N``; or, instead of all that, ``fresh``: the server
no longer forks (its package changed on disk), so the client runs the command itself.
"""

from __future__ import annotations

import json
import os
import socket
import struct
from dataclasses import dataclass, field

__all__ = ["send_request", "recv_request", "Request", "N_FDS", "DISPOSITIONS"]

N_FDS = 3  # stdin, stdout, stderr
_HEADER = struct.Struct("!Q")
MAX_REQUEST = 16 << 20  # bytes; an environment is a few KiB


#: how a signal's disposition is named on the wire: the three a fresh Python process can start with
#: (ignored, inherited so across exec; default; SIGINT's KeyboardInterrupt handler, which Python
#: installs at start unless SIGINT was ignored)
DISPOSITIONS = ("ignore", "default", "interrupt")


@dataclass(frozen=True)
class Request:
    """One job: the client's ``sys.argv``, working directory, environment, and the signal
    dispositions (``{signum: one of DISPOSITIONS}``) and blocked signals it started with."""

    argv: list[str]
    cwd: str
    env: dict[str, str]
    signals: dict[int, str] = field(default_factory=dict)
    blocked: tuple[int, ...] = ()


def send_request(sock: socket.socket, argv: list[str], cwd: str, env: dict[str, str],
                 signals: dict[int, str] | None = None, blocked: tuple[int, ...] = ()) -> None:
    payload = json.dumps({"argv": argv, "cwd": cwd, "env": env, "signals": {str(k): v for k, v in (signals or {}).items()},
                          "blocked": sorted(blocked)}).encode()
    socket.send_fds(sock, [_HEADER.pack(len(payload))], [0, 1, 2])
    sock.sendall(payload)


def _recv_exactly(sock: socket.socket, n: int) -> bytes:
    chunks, got = [], 0
    while got < n:
        chunk = sock.recv(min(n - got, 1 << 20))
        if not chunk:
            raise ConnectionError(f"client closed the connection after {got} of {n} bytes")
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


def recv_request(sock: socket.socket) -> tuple[Request, list[int]]:
    """The request and the client's three descriptors (now ours, to close or ``dup2``)."""
    head, fds, _flags, _addr = socket.recv_fds(sock, _HEADER.size, N_FDS)
    try:
        if len(fds) != N_FDS:
            raise ConnectionError(f"expected {N_FDS} file descriptors, got {len(fds)}")
        head += _recv_exactly(sock, _HEADER.size - len(head))
        (size,) = _HEADER.unpack(head)
        if size > MAX_REQUEST:
            raise ConnectionError(f"request of {size} bytes")
        body = json.loads(_recv_exactly(sock, size))
        signals = {int(k): str(v) for k, v in body.get("signals", {}).items()}
        if any(v not in DISPOSITIONS for v in signals.values()):
            raise ConnectionError(f"unknown signal disposition in {sorted(set(signals.values()))}")
        return Request(argv=list(body["argv"]), cwd=str(body["cwd"]), env=dict(body["env"]), signals=signals,
                       blocked=tuple(int(b) for b in body.get("blocked", ()))), fds
    except BaseException:
        for fd in fds:
            _close(fd)
        raise


def _close(fd: int) -> None:
    try:
        os.close(fd)
    except OSError:
        pass
