"""What a finished command cost its process, as one line a job's log keeps.

A job's log (``logs/<study>/<rule>/<job>.log``, the command's stderr) ends with::

    timestep_lab usage: cpu_s=12.345 max_rss_mb=812.3

(``... start=warm`` when it ran in a worker forked from the warm-start server,
:mod:`timestep_lab.warmstart`: its CPU then starts at the fork and has no start-up in it.)
``cpu_s`` is user + system CPU seconds of this process and of the children it waited for (a
papermill kernel, a DataLoader worker); ``max_rss_mb`` the larger peak resident set of the two,
MiB. Unlike the CPU time in Snakemake's benchmark files, which samples the job's processes every
30 s and misses what they spend after the last sample, this is exact:
:mod:`timestep_lab.cost.measured` prefers it.
"""

from __future__ import annotations

import logging
import os
import re
import resource
import sys
import threading

__all__ = ["USAGE_LINE", "SERVER_USAGE_LINE", "usage_line", "server_usage_line", "flush_output", "exit_now"]

#: the regular expression that reads the line back (group 1: cpu_s, group 2: max_rss_mb)
USAGE_LINE = re.compile(r"^timestep_lab usage: cpu_s=([0-9.]+) max_rss_mb=([0-9.]+)( start=warm)?$", re.M)


def usage_line(warm: bool = False) -> str:
    """``"timestep_lab usage: cpu_s=... max_rss_mb=..."`` for this process (module docstring)."""
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime
    kib = max(me.ru_maxrss, kids.ru_maxrss) * (1 if sys.platform != "darwin" else 1 / 1024)  # Linux: KiB
    return f"timestep_lab usage: cpu_s={cpu:.3f} max_rss_mb={kib / 1024:.1f}" + (" start=warm" if warm else "")


#: the warm-start server's own CPU, the last line of its log (group 1: cpu_s)
SERVER_USAGE_LINE = re.compile(r"^timestep_lab warm-start server usage: cpu_s=([0-9.]+)$", re.M)


def server_usage_line() -> str:
    """The warm-start server's own CPU (its imports; not its workers', which have their own lines)."""
    me = resource.getrusage(resource.RUSAGE_SELF)
    return f"timestep_lab warm-start server usage: cpu_s={me.ru_utime + me.ru_stime:.3f}"


def flush_output() -> None:
    """Flush the logging handlers and the standard streams, before an ``os._exit``."""
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass


def exit_now(status: int) -> None:
    """End the process with ``status`` at once, skipping the interpreter's teardown.

    Tearing down a process that imported torch, torchvision, torch-fidelity and clean-fid costs
    ~1 CPU-s (0.7 with torch alone: freeing thousands of modules and the CUDA build's libraries)
    after the command's work is done and written, on a 2-core machine for every one of a
    study's ~200 jobs (benchmarks/RESULTS.md, "Study cost"). Output files are written
    atomically and closed by then; this flushes the standard streams and the logging handlers
    first. Falls back to ``sys.exit`` whenever something may still need the teardown: another
    non-daemon thread, a live child process, or an initialised ``torch.distributed`` group.
    """
    others = [t for t in threading.enumerate() if t is not threading.current_thread() and not t.daemon]
    dist = sys.modules.get("torch.distributed")
    busy = others or (dist is not None and dist.is_available() and dist.is_initialized())
    if not busy and "multiprocessing" in sys.modules:
        import multiprocessing

        busy = bool(multiprocessing.active_children())
    if busy:
        sys.exit(status)
    flush_output()
    os._exit(status)
