"""The code identity of a result: which code and which pinned environment produced it.

::

    {"commit": "<40 hex>" | None,   # git HEAD of the checkout holding the package (None: not one)
     "dirty": bool | None,          # tracked files changed since that commit (None: not a checkout)
     "source_sha256": "<64 hex>",   # every .py file of the package (names and bytes)
     "lock_sha256": "<64 hex>" | None,   # envs/requirements.lock (None: not found)
     "arithmetic": {...}}           # added by the command line: the CPU code paths the process ran
                                    # (timestep_lab.arithmetic.in_effect; absent in older records)

The source hash is always there: outside a git checkout it is the identity, and inside one it
tells two dirty trees apart. Training logs, ``metrics.json`` and ``fid_progress.json`` carry it,
the collected tables and the study index show it (docs/design.md §6).

Only entry points call :func:`current` (the command line, and a process that forks jobs, before
it forks, so that a forked job reports the code it really runs); library functions are given the identity as an
argument, since library code never
reads files it was not given. Stdlib only; once per process.
"""

from __future__ import annotations

import functools
import hashlib
import os
import subprocess
from pathlib import Path
from typing import Any, Iterable, Mapping

__all__ = ["PACKAGE", "LOCK_FILE", "code_identity", "source_sha256", "current", "describe", "identity_key", "distinct"]

PACKAGE = Path(__file__).resolve().parents[1]  # src/timestep_lab
LOCK_FILE = Path("envs") / "requirements.lock"


def _git(args: list[str], cwd: Path) -> str | None:
    """``git ARGS`` in ``cwd``: its stdout, or None (no git, not a checkout, any failure)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}  # GIT_DIR & co. would mislead
    try:
        r = subprocess.run(["git", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    return r.stdout if r.returncode == 0 else None


def _sha256(path: Path) -> str | None:
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError:
        return None


def source_sha256(package: Path = PACKAGE) -> str:
    """sha256 over ``"<relative name>\\0<sha256 of the file>\\n"`` of every .py file of ``package``."""
    h = hashlib.sha256()
    for path in sorted(package.rglob("*.py"), key=lambda p: p.relative_to(package).as_posix()):
        if "__pycache__" not in path.parts:
            h.update(f"{path.relative_to(package).as_posix()}\0{_sha256(path)}\n".encode())
    return h.hexdigest()


def code_identity(package: str | Path = PACKAGE) -> dict[str, Any]:
    """The identity of the code in ``package`` (module docstring), computed now."""
    package = Path(package).resolve()
    top = _git(["rev-parse", "--show-toplevel"], package)
    tracked = top is not None and bool((_git(["ls-files", "--", "__init__.py"], package) or "").strip())
    commit = dirty = None
    if tracked:
        head = (_git(["rev-parse", "HEAD"], package) or "").strip()
        status = _git(["status", "--porcelain", "--untracked-files=no"], package)
        commit = head or None
        dirty = None if status is None else bool(status.strip())
    roots = [Path(top.strip())] if tracked else []
    roots += [p for p in package.parents[:3] if p not in roots]  # src/timestep_lab -> the project root
    lock = next((r / LOCK_FILE for r in roots if (r / LOCK_FILE).is_file()), None)
    return {"commit": commit, "dirty": dirty, "source_sha256": source_sha256(package),
            "lock_sha256": _sha256(lock) if lock else None}


@functools.lru_cache(maxsize=1)
def _current() -> tuple[tuple[str, Any], ...]:
    return tuple(code_identity().items())


def current() -> dict[str, Any]:
    """:func:`code_identity` of this process's package, computed once per process (a forked child
    inherits its parent's, which describes the code it imported)."""
    return dict(_current())


def _arithmetic_key(identity: Mapping[str, Any]) -> tuple:
    """The CPU code paths a record says its numbers came from (``identity["arithmetic"]``, added by
    the entry: :mod:`timestep_lab.arithmetic`): the level and what torch and OpenBLAS ran."""
    record = identity.get("arithmetic") or {}
    return (record.get("level"), record.get("torch_cpu_capability"), tuple(record.get("openblas") or ()))


def identity_key(identity: Mapping[str, Any] | None) -> tuple:
    """What tells two identities apart (a hashable tuple; None: unknown): the code, and the
    arithmetic it ran with where the record says."""
    if not identity:
        return (None, None, None, None, (None, None, ()))
    return (*(identity.get(k) for k in ("commit", "dirty", "source_sha256", "lock_sha256")), _arithmetic_key(identity))


def describe(identity: Mapping[str, Any] | None) -> str:
    """One line: ``git 1a2b3c4d5e6f (uncommitted changes), source 0f1e2d3c, requirements.lock 9a8b7c6d``."""
    if not identity:
        return "unknown (not recorded)"
    commit, dirty = identity.get("commit"), identity.get("dirty")
    parts = [f"git {commit[:12]}" + (" (uncommitted changes)" if dirty else "") if commit else "not a git checkout",
             f"source {str(identity.get('source_sha256'))[:8]}"]
    lock = identity.get("lock_sha256")
    parts.append(f"requirements.lock {lock[:8]}" if lock else "requirements.lock not found")
    record = identity.get("arithmetic")
    if record:  # the phrase of timestep_lab.arithmetic.describe, kept here: this is the bottom layer
        blas = f", OpenBLAS {'/'.join(record['openblas'])}" if record.get("openblas") else ""
        parts.append(f"arithmetic {record.get('level')} (torch {record.get('torch_cpu_capability')}{blas})")
    return ", ".join(parts)


def distinct(identities: Iterable[Mapping[str, Any] | None]) -> list[Mapping[str, Any] | None]:
    """The different identities among ``identities``, in first-seen order."""
    seen: dict[tuple, Mapping[str, Any] | None] = {}
    for ident in identities:
        seen.setdefault(identity_key(ident), ident)
    return list(seen.values())
