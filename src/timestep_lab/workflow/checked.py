"""Check every run config where it enters the workflow, once: skip those already checked.

The Snakefile checks the registry names and parameters of every run of a study when it builds
the DAG (:func:`timestep_lab.components.check_config`); that builds the cheap sampler objects, so
it imports torch (seconds of CPU: benchmarks/RESULTS.md), on every ``snakemake`` start, a no-op rerun
included. :func:`check_run_configs` imports torch and checks only the run configs not recorded
as checked in a small file under ``.snakemake/`` (:data:`RECORD`): the sha256 of each config's
canonical JSON together with a fingerprint of what decides whether it is valid (timestep_lab's
version and source files, torch's version read from the package metadata without importing it).
A changed config, a changed checker or another torch gives a new digest, so it is checked again.

Torch-free at import (the Snakefile imports it at DAG build). Must not know Snakemake.
"""

from __future__ import annotations

import hashlib
import json
import sys
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any, Iterable, TextIO

from timestep_lab.artifacts.io import atomic_write_json, canonical_json
from timestep_lab.config import config_from_dict

__all__ = ["RECORD", "RECORD_FORMAT", "check_run_configs", "fingerprint", "config_digest"]

RECORD = Path(".snakemake") / "timestep_lab_checked.json"
RECORD_FORMAT = "timestep_lab.checked/1"
MAX_RECORDED = 5000  # digests kept (newest last): studies switched back and forth stay recorded

_PACKAGE = Path(__file__).resolve().parents[1]  # src/timestep_lab


def _version(dist: str) -> str:
    try:
        return version(dist)
    except PackageNotFoundError:
        return "not installed"


def fingerprint() -> str:
    """sha256 of what decides whether a run config is valid: timestep_lab's and torch's versions
    (package metadata: torch is not imported) and every source file of the package (a registry
    or parameter dataclass edited in a checkout without a version bump)."""
    h = hashlib.sha256()
    h.update(f"timestep_lab {_version('timestep_lab')}\ntorch {_version('torch')}\n".encode())
    for path in sorted(_PACKAGE.rglob("*.py")):
        h.update(path.relative_to(_PACKAGE).as_posix().encode() + b"\0")
        h.update(hashlib.sha256(path.read_bytes()).digest())
    return h.hexdigest()


def config_digest(config: dict[str, Any], fp: str) -> str:
    """sha256 of a run config's canonical JSON (sorted keys, no spaces) under fingerprint ``fp``."""
    return hashlib.sha256(f"{fp}\n{canonical_json(config)}".encode()).hexdigest()


def _recorded(record: Path) -> list[str]:
    """The digests in ``record``; a missing, damaged or foreign file counts as none recorded."""
    try:
        data = json.loads(record.read_text())
    except (OSError, ValueError):
        return []
    if not isinstance(data, dict) or data.get("format") != RECORD_FORMAT or not isinstance(data.get("checked"), list):
        return []
    return [d for d in data["checked"] if isinstance(d, str)]


def check_run_configs(runs: Iterable[tuple[str, dict[str, Any]]], source: str, record: str | Path = RECORD,
                      log: TextIO | None = None) -> int:
    """Check each ``(run id, run config dict)`` not yet recorded in ``record``; record those that pass.

    Logs one line to ``log`` (stderr): ``checked N run configs (M unchanged since last check)``
    or ``N run configs unchanged since last check`` (then torch is not imported). Returns the
    number checked now.

    :raises ConfigError: the first invalid config, naming ``source`` and the run; the configs
        that passed before it are recorded all the same.
    """
    log = log or sys.stderr
    record = Path(record)
    fp = fingerprint()
    runs = list(runs)
    digests = [config_digest(cfg, fp) for _, cfg in runs]
    done = _recorded(record)
    known = set(done)
    todo = [(rid, cfg, d) for (rid, cfg), d in zip(runs, digests) if d not in known]
    if not todo:
        print(f"{len(runs)} run configs unchanged since last check", file=log)
        return 0
    # imported only when a config needs checking: it builds samplers, so it imports torch (2-4 s)
    from timestep_lab.components import check_config

    passed: list[str] = []
    try:
        for rid, cfg, digest in todo:
            where = f"{source} (run {rid})"
            check_config(config_from_dict(cfg, where), where)
            passed.append(digest)
    finally:
        if passed:
            kept = [d for d in done if d not in set(passed)] + passed
            try:
                record.parent.mkdir(parents=True, exist_ok=True)
                atomic_write_json(record, {"format": RECORD_FORMAT, "checked": kept[-MAX_RECORDED:]})
            except OSError as exc:  # a read-only checkout: check again next time rather than fail the run
                print(f"warning: {record}: not written ({exc}); run configs will be checked again", file=log)
    unchanged = len(runs) - len(todo)
    print(f"checked {len(todo)} run configs" + (f" ({unchanged} unchanged since last check)" if unchanged else ""),
          file=log)
    return len(todo)
