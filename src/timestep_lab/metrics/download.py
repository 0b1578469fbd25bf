"""Fetch one file atomically, with a short network timeout and a reason when it fails.

Used to fetch missing feature-extractor weights. It knows nothing of extractors or metrics:
the caller passes the URL, the destination and the library's own fetch function.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Callable, Iterator
from urllib.parse import urlparse

__all__ = ["download_file"]

log = logging.getLogger(__name__)


@contextlib.contextmanager
def _network_timeout(seconds: float) -> Iterator[None]:
    old = socket.getdefaulttimeout()
    socket.setdefaulttimeout(seconds)
    try:
        yield
    finally:
        socket.setdefaulttimeout(old)


def _resolves(url: str, timeout: float) -> str | None:
    """``None`` if the host of ``url`` resolves within ``timeout`` s, else the reason (DNS lookups
    ignore socket timeouts, so they run in a daemon thread)."""
    host = urlparse(url).hostname or ""
    result: dict[str, Any] = {}

    def look():
        try:
            socket.getaddrinfo(host, 443)
            result["ok"] = True
        except OSError as exc:
            result["err"] = exc

    th = threading.Thread(target=look, daemon=True)
    th.start()
    th.join(timeout)
    if th.is_alive():
        return f"resolving {host} took more than {timeout:g} s"
    return None if result.get("ok") else f"cannot resolve {host} ({result.get('err')})"


def download_file(url: str, dest: Path, fetch: Callable[[Path], Path], timeout: float) -> str | None:
    """Download ``url`` to ``dest`` with the library's own function ``fetch(tmp_dir) -> file``,
    atomically and with a short network timeout (seconds). Returns ``None`` or why it failed."""
    t0 = time.perf_counter()
    reason = _resolves(url, timeout)
    if reason is None:
        try:
            dest.parent.mkdir(parents=True, exist_ok=True)
            with _network_timeout(timeout), tempfile.TemporaryDirectory(dir=dest.parent, prefix=".dl-") as tmp:
                got = fetch(Path(tmp))
                os.replace(got, dest)
            log.info("downloaded %s -> %s", url, dest)
            return None
        except Exception as exc:  # URLError, timeouts, HTTP errors, disk errors
            reason = f"{type(exc).__name__}: {exc}"
    return f"download failed after {time.perf_counter() - t0:.1f} s ({reason})"
