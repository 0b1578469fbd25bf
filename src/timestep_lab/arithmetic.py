"""Which CPU code paths choose a job's arithmetic, and pinning them: the study key ``reproducibility``.

The last bits of a CPU float result depend on the kernels each library picks for the CPU it finds:
torch's ATen kernels (AVX2 or AVX-512 vectors: another summation order), oneDNN's convolutions
(JIT-compiled for the widest ISA), numpy's own SIMD loops (KID's kernel powers), the OpenBLAS
kernel in numpy's and scipy's copies (the metrics' linear algebra), MKL's GEMM (another path on
Intel than on AMD). Training is chaotic: one last-bit difference in the first step is a 0.6%
FID difference a few hundred steps later. So "same config and seed, same numbers" holds across
machines only where every library runs the same code path. A level names that path:

``native``
    whatever each library picks for this CPU (fastest; the numbers are the same only on the
    same CPU model with the same variables).
``portable``
    one path every x86-64 CPU with AVX2 and FMA has (x86-64-v3: Intel Haswell and later, AMD
    Zen and later): the variables of :data:`LEVELS`. Measured on the smoke study
    (docs/methods.md §13, benchmarks/RESULTS.md "Portable arithmetic"): without any one of the
    first four, values move; MKL's is not on the digits studies' path but is on attention's.

How a level reaches a job: the workflow sets :data:`LEVEL_ENV` and the level's variables in its
own environment when it reads the config (every job, the warm-start server and a cluster job's
snakemake inherit them); ``python -m timestep_lab`` and the warm-start server call :func:`pin`
first, before numpy or torch is loaded, so a command rerun by hand with only ``LEVEL_ENV`` set
runs pinned too. Every variable is read when its library loads or first runs, so setting one in
a process that has already computed does nothing: a job checks the level it runs
(:func:`check`) and records it (:func:`in_effect`) beside its code identity.

Stdlib only at module level: the workflow imports this when it builds the DAG, and the entry
before anything heavy.
"""

from __future__ import annotations

import platform
from dataclasses import dataclass, field
from typing import Any, Mapping, MutableMapping

__all__ = ["Level", "LEVELS", "LEVEL_ENV", "DEFAULT", "VARIABLES", "level", "cpu_flags", "pin", "pinned", "in_effect",
           "check", "this_cpu"]

#: the environment variable that names a process's level (set by the workflow; read by entries only)
LEVEL_ENV = "TIMESTEP_LAB_ARITHMETIC"


@dataclass(frozen=True)
class Level:
    """One reproducibility level: ``variables`` pin the code paths; ``torch_capability`` (torch's
    ``get_cpu_capability()``), ``openblas_kernel`` (OpenBLAS's ``architecture``) and
    ``numpy_off`` (numpy feature groups that must be off) are what a process at this level runs,
    checked by :func:`check` (None / empty: anything goes)."""

    name: str
    summary: str
    variables: Mapping[str, str] = field(default_factory=dict)
    torch_capability: str | None = None
    openblas_kernel: str | None = None
    numpy_off: tuple[str, ...] = ()
    machine: str | None = None
    cpu_flags: tuple[str, ...] = ()  # /proc/cpuinfo flags the CPU must have
    unset: tuple[str, ...] = ()  # variables that would contradict ``variables``


#: the levels a study config may name (``reproducibility``); names are added, never repurposed
LEVELS: Mapping[str, Level] = {
    "native": Level("native", "each library's own choice for this CPU: the same numbers only on the same CPU model"),
    "portable": Level(
        "portable",
        "x86-64-v3 (AVX2 + FMA) code paths in every library: the same numbers on every x86-64 CPU with AVX2",
        variables={
            "ATEN_CPU_CAPABILITY": "avx2",  # torch's ATen kernels: AVX2, never AVX-512
            "ONEDNN_MAX_CPU_ISA": "AVX2",  # oneDNN's convolutions JIT-compiled for AVX2 at most
            "NPY_ENABLE_CPU_FEATURES": "X86_V3",  # numpy's dispatched loops: x86-64-v3 only (AVX-512 groups off)
            "OPENBLAS_CORETYPE": "Haswell",  # numpy's and scipy's OpenBLAS: the AVX2 kernel on any CPU
            "MKL_CBWR": "COMPATIBLE",  # MKL's GEMM (torch's matmul): one path on Intel and AMD alike
        },
        torch_capability="AVX2", openblas_kernel="Haswell", numpy_off=("X86_V4", "AVX512_ICL", "AVX512_SPR"),
        machine="x86_64", cpu_flags=("avx2", "fma"),
        unset=("NPY_DISABLE_CPU_FEATURES",),  # numpy refuses to load with both ENABLE and DISABLE set
    ),
}

#: the level of a process that names none
DEFAULT = "native"

#: every variable some level sets: what a record shows and what two processes must agree on
VARIABLES: tuple[str, ...] = tuple(sorted({k for lv in LEVELS.values() for k in (*lv.variables, *lv.unset)}))


def level(name: str) -> Level:
    """The level called ``name``; ValueError naming the levels otherwise."""
    try:
        return LEVELS[name]
    except KeyError:
        raise ValueError(f"unknown reproducibility level {name!r}; one of {', '.join(LEVELS)}") from None


def cpu_flags(cpuinfo: str) -> frozenset[str] | None:
    """The flags of the first processor in the text of ``/proc/cpuinfo`` (None: no flags line)."""
    for line in cpuinfo.splitlines():
        key, sep, value = line.partition(":")
        if sep and key.strip() == "flags":
            return frozenset(value.split())
    return None


def pin(environ: MutableMapping[str, str], name: str | None = None, *, machine: str | None = None,
        flags: frozenset[str] | None = None) -> Level:
    """Put level ``name`` (default: the one ``environ`` names in :data:`LEVEL_ENV`, else
    :data:`DEFAULT`) into ``environ``: :data:`LEVEL_ENV` and the level's variables, replacing
    what was there (a machine's own ``OPENBLAS_CORETYPE`` included). ``native`` sets only
    :data:`LEVEL_ENV` and leaves the machine's variables as they are. Call it before numpy or
    torch is loaded in the process that ``environ`` belongs to (module docstring).

    ``machine`` (``platform.machine()``) and ``flags`` (:func:`cpu_flags`), when given, are this
    CPU's: a level it cannot run is a ValueError here, before numpy refuses its variable with a
    traceback at import. The workflow gives neither (its jobs may run on other machines)."""
    lv = level(name or environ.get(LEVEL_ENV) or DEFAULT)
    if lv.machine and machine is not None and machine != lv.machine:
        raise ValueError(f"reproducibility: {lv.name} is defined for {lv.machine} CPUs; this one is {machine}: "
                         f"use reproducibility: native")
    missing = [f for f in lv.cpu_flags if flags is not None and f not in flags]
    if missing:
        raise ValueError(f"reproducibility: {lv.name} needs a CPU with {' and '.join(f.upper() for f in lv.cpu_flags)}; "
                         f"this one lacks {', '.join(f.upper() for f in missing)}: use reproducibility: native")
    environ[LEVEL_ENV] = lv.name
    environ.update(lv.variables)
    for key in lv.unset:
        environ.pop(key, None)
    return lv


def this_cpu() -> dict[str, Any]:
    """``{"machine": ..., "flags": ...}`` of the CPU this process runs on, for :func:`pin` (what
    the entries call; ``flags`` None where ``/proc/cpuinfo`` cannot be read)."""
    try:
        with open("/proc/cpuinfo") as fh:
            flags = cpu_flags(fh.read())
    except OSError:
        flags = None
    return {"machine": platform.machine(), "flags": flags}


def pinned(environ: Mapping[str, str]) -> tuple[tuple[str, str | None], ...]:
    """The level and every variable of :data:`VARIABLES` as ``environ`` has them: two processes
    with the same tuple run the same code paths (the warm-start server forks a job only then)."""
    return ((LEVEL_ENV, environ.get(LEVEL_ENV) or DEFAULT), *((k, environ.get(k)) for k in VARIABLES))


def _openblas_kernels() -> list[str]:
    """OpenBLAS's ``architecture`` in every copy loaded (numpy's, and scipy's once scipy.linalg is)."""
    from threadpoolctl import threadpool_info  # loaded with numpy already in every job that computes

    return sorted({str(i.get("architecture")) for i in threadpool_info() if i.get("internal_api") == "openblas"})


def _numpy_features() -> dict[str, bool]:
    """numpy's runtime feature table (dispatch targets -> on), {} where numpy does not expose it."""
    try:
        from numpy._core._multiarray_umath import __cpu_dispatch__, __cpu_features__
    except ImportError:  # another numpy layout: the record then lacks the table, the check skips it
        return {}
    return {f: bool(__cpu_features__.get(f)) for f in __cpu_dispatch__}


def in_effect(environ: Mapping[str, str]) -> dict[str, Any]:
    """What this process runs, for the records (``metrics.json``, ``train_log.jsonl``)::

        {"level": "portable", "torch_cpu_capability": "AVX2", "openblas": ["Haswell"],
         "numpy_simd": ["X86_V3"], "machine": "x86_64", "variables": {"ATEN_CPU_CAPABILITY": "avx2", ...}}

    Loads torch and numpy (the caller computes with them anyway)."""
    import torch

    return {"level": environ.get(LEVEL_ENV) or DEFAULT, "torch_cpu_capability": torch.backends.cpu.get_cpu_capability(),
            "openblas": _openblas_kernels(), "numpy_simd": [f for f, on in _numpy_features().items() if on],
            "machine": platform.machine(), "variables": {k: environ[k] for k in VARIABLES if k in environ}}


def check(record: Mapping[str, Any]) -> None:
    """Raise ValueError when the process of ``record`` (:func:`in_effect`) does not run its level:
    a CPU without what the level needs, or a library loaded before the variables were set."""
    lv = level(record["level"])
    if lv.machine and record.get("machine") != lv.machine:
        raise ValueError(f"reproducibility: {lv.name} is defined for {lv.machine} CPUs; this one is "
                         f"{record.get('machine')}: use reproducibility: native")
    if lv.torch_capability and record.get("torch_cpu_capability") != lv.torch_capability:
        raise ValueError(f"reproducibility: {lv.name} needs torch's {lv.torch_capability} kernels, but this process runs "
                         f"{record.get('torch_cpu_capability')}: the CPU lacks {lv.torch_capability} and FMA, or torch "
                         f"computed before ATEN_CPU_CAPABILITY was set (start the command as `python -m timestep_lab`)")
    kernels = record.get("openblas") or []
    if lv.openblas_kernel and any(k != lv.openblas_kernel for k in kernels):
        raise ValueError(f"reproducibility: {lv.name} needs OpenBLAS's {lv.openblas_kernel} kernel, but this process "
                         f"runs {', '.join(kernels)}: numpy was loaded before OPENBLAS_CORETYPE was set")
    wide = [f for f in lv.numpy_off if f in (record.get("numpy_simd") or [])]
    if wide:
        raise ValueError(f"reproducibility: {lv.name} turns numpy's {', '.join(wide)} loops off, but this process runs "
                         f"them: numpy was loaded before NPY_ENABLE_CPU_FEATURES was set")

