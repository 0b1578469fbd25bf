"""What a finished command cost its process, as one line a job's log keeps.

A job's log (``logs/<study>/<rule>/<job>.log``, the command's stderr) ends with::

    timestep_lab usage: cpu_s=12.345 max_rss_mb=812.3

(``... start=HOW`` when the process did not start as ``python -m timestep_lab`` starts one, named
by whoever started it, e.g. a worker forked from a process that had imported everything: its CPU
then has no start-up in it.) ``cpu_s`` is user + system CPU seconds of this process and of the children it waited for (a
DataLoader worker); ``max_rss_mb`` the larger peak resident set of the two,
MiB. Unlike the CPU time in Snakemake's benchmark files, which samples the job's processes every
30 s and misses what they spend after the last sample, this is exact:
:mod:`timestep_lab.cost.measured` prefers it.

A process of a study that is no job of a rule (one that serves the jobs) ends its log, a file
directly in ``logs/<study>/``, with its own CPU under its name::

    timestep_lab NAME usage: cpu_s=12.345

which :mod:`timestep_lab.cost.measured` sums as the row ``(NAME)``, counted with the start-up.
"""

from __future__ import annotations

import logging
import os
import re
import resource
import sys
import threading

__all__ = ["USAGE_LINE", "NAMED_USAGE_LINE", "usage_line", "named_usage_line", "flush_output", "exit_now"]

#: the regular expression that reads the line back (group 1: cpu_s, group 2: max_rss_mb, group 3:
#: how the process started, empty when as ``python -m timestep_lab``)
USAGE_LINE = re.compile(r"^timestep_lab usage: cpu_s=([0-9.]+) max_rss_mb=([0-9.]+)(?: start=(\S+))?$", re.M)


def usage_line(start: str | None = None) -> str:
    """``"timestep_lab usage: cpu_s=... max_rss_mb=..."`` for this process, with ``start=START``
    when given (module docstring)."""
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime
    kib = max(me.ru_maxrss, kids.ru_maxrss) * (1 if sys.platform != "darwin" else 1 / 1024)  # Linux: KiB
    return f"timestep_lab usage: cpu_s={cpu:.3f} max_rss_mb={kib / 1024:.1f}" + (f" start={start}" if start else "")


#: a serving process's own CPU, the last line of its log (group 1: its name, group 2: cpu_s)
NAMED_USAGE_LINE = re.compile(r"^timestep_lab (\S[^\n]*?) usage: cpu_s=([0-9.]+)$", re.M)


def named_usage_line(name: str) -> str:
    """``"timestep_lab NAME usage: cpu_s=..."``: this process's own CPU (not its children's, which
    have their own lines), for a process that is no job (module docstring)."""
    me = resource.getrusage(resource.RUSAGE_SELF)
    return f"timestep_lab {name} usage: cpu_s={me.ru_utime + me.ru_stime:.3f}"


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

    Tearing down a process that imported torch, torchvision, torch-fidelity and clean-fid (freeing
    thousands of modules and the CUDA build's libraries) costs CPU after the command's work is
    done and written, for every one of a study's jobs (benchmarks/RESULTS.md, "Where the CPU
    went"). Output files are written
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
