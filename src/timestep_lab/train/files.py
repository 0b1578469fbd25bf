"""A run folder's files: where they live (:class:`RunPaths`), reading the resume point, and
publishing the finished log and snapshots next to ``model.pt``.

Files under ``out_dir``::

    config.yaml                     resolved config (written first)
    train_state/checkpoint.pt       latest full training state (resume point)
    train_state/train_log.jsonl     log so far
    train_state/snapshots/          EMA weights every ``snapshot_every_kimg``: snapshot-{nimg:09d}.pt
    model.pt                        final weights + metadata   } written when training ends,
    train_log.jsonl                 the complete log             } never half-written
    snapshots/                      the snapshots (hard links)  }
    stale-<hash>/                   a run of another config, set aside (below)
    .lock                           the writer's pid and host (timestep_lab.artifacts.runlock)

The training state is keyed to the config that wrote it: resuming with a config that differs in
anything but :data:`RESUMABLE_CHANGES` (say ``optim.lr``, changed in a study config) does not
fail; that run's files (``train_state/``, ``model.pt``, ``train_log.jsonl``, ``snapshots/``,
``config.yaml``) move to ``stale-<first 8 hex digits of the old config's sha256>/`` with a
logged warning naming the changed keys, and the run starts fresh. An unchanged config resumes.

The files' formats are :mod:`timestep_lab.checkpoints.native`. Must not know the training step.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from torch import Tensor, nn

from timestep_lab.checkpoints import CHECKPOINT_FORMAT
from timestep_lab.config import RunConfig, config_to_dict
from timestep_lab.artifacts.io import ArtifactError, atomic_path, atomic_write_text, canonical_json, load_torch
from timestep_lab.optim import EMA

__all__ = ["RESUMABLE_CHANGES", "RunPaths", "snapshot_name", "read_resume_checkpoint", "ema_state_dict", "publish",
           "truncate_log"]

log = logging.getLogger(__name__)

# config keys that may change between a checkpoint and its resumption
RESUMABLE_CHANGES = ("train.total_kimg", "train.log_every_kimg", "train.checkpoint_every_kimg",
                     "train.snapshot_every_kimg", "train.device", "train.compile", "train.on_nonfinite",
                     "sample", "eval", "data.path")


@dataclass(frozen=True)
class RunPaths:
    """The files of the run folder ``out`` (module docstring)."""

    out: Path

    @property
    def config(self) -> Path: return self.out / "config.yaml"
    @property
    def state(self) -> Path: return self.out / "train_state"
    @property
    def checkpoint(self) -> Path: return self.state / "checkpoint.pt"
    @property
    def state_log(self) -> Path: return self.state / "train_log.jsonl"
    @property
    def state_snapshots(self) -> Path: return self.state / "snapshots"
    @property
    def model(self) -> Path: return self.out / "model.pt"
    @property
    def log(self) -> Path: return self.out / "train_log.jsonl"
    @property
    def snapshots(self) -> Path: return self.out / "snapshots"


def snapshot_name(nimg: int) -> str:
    """File name of the EMA snapshot taken after ``nimg`` images: ``snapshot-{nimg:09d}.pt``.

    Named by images seen (not kimg), so snapshots spaced less than 1 kimg apart (small CI
    configs use 0.5 kimg) never collide; zero-padded so names sort in training order. Readers
    take ``nimg`` from the snapshot's metadata, never from the name."""
    return f"snapshot-{int(nimg):09d}.pt"


def read_resume_checkpoint(paths: RunPaths, cfg: RunConfig, set_aside_stale: bool = True) -> dict | None:
    """``train_state/checkpoint.pt`` when it is ours and was written with ``cfg`` (up to
    :data:`RESUMABLE_CHANGES`); None when there is none, or when it was written with another
    config: then that run is set aside (:func:`set_aside`; only where ``set_aside_stale``, i.e.
    by the one process that writes files) and the caller starts fresh.

    :raises ArtifactError: not a timestep_lab training checkpoint (or truncated, corrupted).
    """
    if not paths.checkpoint.exists():
        return None
    ckpt = load_torch(paths.checkpoint, map_location="cpu")
    if not isinstance(ckpt, dict) or ckpt.get("format") != CHECKPOINT_FORMAT or not isinstance(ckpt.get("config"), dict):
        raise ArtifactError(f"{paths.checkpoint}: not a timestep_lab training checkpoint")
    changed = _resumable(_config_diff(ckpt["config"], config_to_dict(cfg)))
    if changed:
        if not set_aside_stale:
            return None
        where = set_aside(paths, ckpt["config"])
        log.warning("%s: train_state/ was written with a different config (%s); that run was set aside in %s/ "
                    "and this one starts fresh", paths.out, ", ".join(changed), where.name)
        return None
    return ckpt


def set_aside(paths: RunPaths, old_config: dict) -> Path:
    """Move the files of the run written with ``old_config`` to ``stale-<hash>/`` (a previous
    copy under that name is replaced: it holds the same config's run)."""
    digest = hashlib.sha256(canonical_json(old_config).encode()).hexdigest()[:8]
    dest = paths.out / f"stale-{digest}"
    shutil.rmtree(dest, ignore_errors=True)
    dest.mkdir()
    for src in (paths.state, paths.model, paths.log, paths.snapshots, paths.config):
        if src.exists():
            os.replace(src, dest / src.name)
    return dest


def _config_diff(a: dict, b: dict, prefix: str = "") -> list[str]:
    keys = []
    for k in sorted(set(a) | set(b)):
        va, vb = a.get(k), b.get(k)
        key = f"{prefix}{k}"
        if isinstance(va, dict) and isinstance(vb, dict):
            keys += _config_diff(va, vb, key + ".")
        elif va != vb:
            keys.append(key)
    return keys


def _resumable(keys: list[str]) -> list[str]:
    return [k for k in keys if not any(k == r or k.startswith(r + ".") for r in RESUMABLE_CHANGES)]


def ema_state_dict(model: nn.Module, ema: EMA) -> dict[str, Tensor]:
    sd = {n: p.detach().cpu().clone() for (n, _), p in zip(model.named_parameters(), ema.params)}
    sd.update({n: b.detach().cpu().clone() for (n, _), b in zip(model.named_buffers(), ema.buffers)})
    return sd


def publish(paths: RunPaths) -> None:
    """Copy the finished log and snapshots next to model.pt (hard links where possible). The log
    always exists afterwards (empty when a run diverged before its first log interval), so a
    consumer never has to tell "not logged yet" from "not finished"."""
    with atomic_path(paths.log) as tmp:
        if paths.state_log.exists():
            shutil.copyfile(paths.state_log, tmp)
    paths.snapshots.mkdir(parents=True, exist_ok=True)
    if paths.state_snapshots.exists():
        for snap in sorted(paths.state_snapshots.glob("*.pt")):
            dst = paths.snapshots / snap.name
            if dst.exists():
                continue
            try:
                os.link(snap, dst)
            except OSError:
                with atomic_path(dst) as tmp:
                    shutil.copyfile(snap, tmp)


def truncate_log(path: Path, nimg: int) -> None:
    """Drop log records written after the checkpoint we resume from (they will be redone)."""
    if not path.exists():
        return
    keep = []
    for line in path.read_text().splitlines():
        try:
            if json.loads(line)["nimg"] <= nimg:
                keep.append(line)
        except (json.JSONDecodeError, KeyError):
            break  # a torn last line from the kill
    atomic_write_text(path, "".join(line + "\n" for line in keep))
