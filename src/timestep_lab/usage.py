"""What a finished command cost its process, as one line a job's log keeps.

A job's log (``logs/<study>/<rule>/<job>.log``, the command's stderr) ends with::

    timestep_lab usage: cpu_s=12.345 max_rss_mb=812.3

``cpu_s`` is user + system CPU seconds of this process and of the children it waited for (a
papermill kernel, a DataLoader worker); ``max_rss_mb`` the larger peak resident set of the two,
MiB. Unlike the CPU time in Snakemake's benchmark files, which samples the job's processes every
30 s and misses what they spend after the last sample, this is exact:
:mod:`timestep_lab.reporting.cost` prefers it.
"""

from __future__ import annotations

import re
import resource
import sys

__all__ = ["USAGE_LINE", "usage_line"]

#: the regular expression that reads the line back (group 1: cpu_s, group 2: max_rss_mb)
USAGE_LINE = re.compile(r"^timestep_lab usage: cpu_s=([0-9.]+) max_rss_mb=([0-9.]+)$", re.M)


def usage_line() -> str:
    """``"timestep_lab usage: cpu_s=... max_rss_mb=..."`` for this process (module docstring)."""
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime
    kib = max(me.ru_maxrss, kids.ru_maxrss) * (1 if sys.platform != "darwin" else 1 / 1024)  # Linux: KiB
    return f"timestep_lab usage: cpu_s={cpu:.3f} max_rss_mb={kib / 1024:.1f}"
