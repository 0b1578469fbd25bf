"""The C allocator's settings for a command's process: keep freed memory for reuse (glibc).

Torch frees and allocates the same activation buffers at every network call (a batch of 200
samples through the UNet, 20 times per image batch). glibc's malloc serves blocks above its
mmap threshold (128 KiB, raised only by some frees) with fresh ``mmap``\\ s and gives memory at
the heap's top back to the kernel above its trim threshold, so a buffer freed and asked for
again comes back as new, zero-filled pages: one page fault per 4 KiB touched, paid in kernel
time: on the default study's jobs a fifth to a quarter of a job's CPU time, which the settings
below remove (the same numbers to the last bit: only where memory comes from changes;
benchmarks/RESULTS.md, "Figures the code relies on").

:func:`keep_freed_memory` sets both thresholds high with ``mallopt`` (what the
``MALLOC_MMAP_THRESHOLD_`` and ``MALLOC_TRIM_THRESHOLD_`` environment variables would set at
startup): blocks up to 32 MiB (glibc's upper bound on 64-bit) come from the heap, and freed
memory stays with the process until it exits. A job's peak memory is unchanged; its memory is
not handed back early, which a short-lived job does not need. Elsewhere than glibc (musl,
macOS) this does nothing.
"""

from __future__ import annotations

import ctypes

__all__ = ["keep_freed_memory", "M_MMAP_THRESHOLD", "M_TRIM_THRESHOLD", "MMAP_THRESHOLD", "TRIM_THRESHOLD"]

#: ``mallopt`` parameters (glibc's malloc.h)
M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3
#: blocks up to this size come from the heap: glibc's ceiling, DEFAULT_MMAP_THRESHOLD_MAX on 64-bit
MMAP_THRESHOLD = 32 << 20
#: free memory at the heap's top is returned to the kernel only above this
TRIM_THRESHOLD = 1 << 30


def keep_freed_memory() -> bool:
    """Set glibc's mmap and trim thresholds (module docstring); True if both were set, False
    where the C library is not glibc or refuses them."""
    try:
        libc = ctypes.CDLL(None)  # the process's own symbols, libc's among them (find_library runs ldconfig)
        mallopt = libc.mallopt
        libc.gnu_get_libc_version  # noqa: B018 - glibc only: another libc's mallopt takes other values
    except (OSError, AttributeError):
        return False
    mallopt.argtypes, mallopt.restype = (ctypes.c_int, ctypes.c_int), ctypes.c_int
    # both: the mmap threshold alone leaves freed heap tops trimmed, the trim threshold alone
    # leaves large blocks mmapped (each was slower than neither on an evaluate-snapshots job)
    return bool(mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD)) and bool(mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD))
