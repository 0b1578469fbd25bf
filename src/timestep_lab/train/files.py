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

The training state, every snapshot and ``model.pt`` record what the run is made from
(:func:`run_inputs`): the resolved config's sha256, the prepared data's content identity (the
sha256 of its images and labels, checked against the files when training opened them) and the
sha256 of the ``train.init_from`` model it starts from, and the reproducibility level its steps
were computed at. A state is resumed only by the run it
belongs to: the same config up to :data:`RESUMABLE_CHANGES`, the same data content, the same
parent model, the same reproducibility level (a state computed on other CPU code paths would
mix two arithmetics in one model), and not past this run's length (a shorter ``train.total_kimg`` is a new run, not
the longer one relabelled). Anything else does not fail; that run's files (``train_state/``,
``model.pt``, ``train_log.jsonl``, ``snapshots/``, ``config.yaml``) move to
``stale-<first 8 hex digits of the old config's sha256>/`` with a logged warning saying what
changed, and the run starts fresh. A state that records no inputs (an earlier version wrote
it) is set aside the same way.

The files' formats are :mod:`timestep_lab.checkpoints.native`. Must not know the training step.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from torch import Tensor, nn

from timestep_lab.artifacts.io import ArtifactError, atomic_path, atomic_write_text, load_torch
from timestep_lab.checkpoints import CHECKPOINT_FORMAT
from timestep_lab.checkpoints.info import model_sha256
from timestep_lab.config import RunConfig, config_to_dict
from timestep_lab.config.identity import RESUMABLE_CHANGES, config_sha256, differing
from timestep_lab.optim import EMA

__all__ = ["RESUMABLE_CHANGES", "RunPaths", "snapshot_name", "run_inputs", "read_resume_checkpoint", "not_this_run",
           "load_state", "link_or_copy", "ema_state_dict", "publish", "truncate_log"]

log = logging.getLogger(__name__)


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


def run_inputs(cfg: RunConfig, data_identity: dict, arithmetic: str | None = None) -> dict:
    """What a run is made from, recorded in its training state, snapshots and ``model.pt`` under
    ``inputs``: ``{"config_sha256": sha256 of the resolved config, "data": data_identity (the
    prepared data's :attr:`~timestep_lab.data.PreparedData.identity`), "init_sha256": the
    :func:`~timestep_lab.checkpoints.info.model_sha256` of ``train.init_from``, or None,
    "arithmetic": the reproducibility level the steps are computed at (:mod:`timestep_lab.arithmetic`;
    None: not known, a library call without the command line)}``."""
    init = cfg.train.init_from
    if init and not Path(init).exists():
        raise ArtifactError(f"{init}: train.init_from not found")
    return {"config_sha256": config_sha256(config_to_dict(cfg)), "data": dict(data_identity),
            "init_sha256": model_sha256(init) if init else None, "arithmetic": arithmetic}


def load_state(path: Path) -> dict:
    """A training state (``train_state/checkpoint.pt``); a file that is not one is an :class:`ArtifactError`."""
    ckpt = load_torch(path, map_location="cpu")
    if not isinstance(ckpt, dict) or ckpt.get("format") != CHECKPOINT_FORMAT or not isinstance(ckpt.get("config"), dict):
        raise ArtifactError(f"{path}: not a timestep_lab training checkpoint")
    return ckpt


def link_or_copy(src: Path, dst: Path) -> None:
    """``dst`` a hard link to ``src`` where the file system allows, else an atomic copy (for files that
    are replaced, never written into: checkpoints, snapshots)."""
    try:
        os.link(src, dst)
    except OSError:
        with atomic_path(dst) as tmp:
            shutil.copyfile(src, tmp)


def read_resume_checkpoint(paths: RunPaths, cfg: RunConfig, inputs: dict, set_aside_stale: bool = True) -> dict | None:
    """``train_state/checkpoint.pt`` when it is ours and belongs to this run (module docstring:
    the config up to :data:`RESUMABLE_CHANGES`, the ``inputs`` of :func:`run_inputs`, the
    length); None when there is none, or when it belongs to another run: then that run is set
    aside (:func:`set_aside`; only where ``set_aside_stale``, i.e. by the one process that writes
    files) and the caller starts fresh.

    :raises ArtifactError: not a timestep_lab training checkpoint (or truncated, corrupted).
    """
    if not paths.checkpoint.exists():
        return None
    ckpt = load_state(paths.checkpoint)
    why = not_this_run(ckpt, cfg, inputs)
    if why:
        if not set_aside_stale:
            return None
        where = set_aside(paths, ckpt["config"])
        log.warning("%s: train_state/ %s; that run was set aside in %s/ and this one starts fresh", paths.out, why,
                    where.name)
        return None
    return ckpt


def _short(digest: Any) -> str:
    return str(digest)[:12] if digest else "none"


def not_this_run(ckpt: dict, cfg: RunConfig, inputs: dict) -> str | None:
    """Why the training state ``ckpt`` is not a state of the run ``cfg`` made from ``inputs``
    (a phrase that follows "train_state/"), or None when it is."""
    changed = differing(ckpt["config"], config_to_dict(cfg), RESUMABLE_CHANGES)
    if changed:
        return f"was written with a different config ({', '.join(changed)})"
    recorded = ckpt.get("inputs")
    if not isinstance(recorded, dict):
        return "records neither the data nor the model it was trained from (an earlier version wrote it)"
    old, new = recorded.get("data") or {}, inputs["data"]
    for key in ("images_sha256", "labels_sha256", "vae_sha256"):  # vae: latent data only
        if old.get(key) != new.get(key):
            return (f"was trained on other data ({key.split('_')[0]} sha256 {_short(old.get(key))}, now "
                    f"{_short(new.get(key))} in {cfg.data.path})")
    if recorded.get("init_sha256") != inputs["init_sha256"]:
        return (f"started from another model (train.init_from sha256 {_short(recorded.get('init_sha256'))}, now "
                f"{_short(inputs['init_sha256'])})")
    if recorded.get("arithmetic") != inputs.get("arithmetic"):  # its steps were computed on other code paths
        return (f"was computed at another reproducibility level ({recorded.get('arithmetic')}, now "
                f"{inputs.get('arithmetic')})")
    total, batch, nimg = int(round(cfg.train.total_kimg * 1000)), cfg.train.batch_size, int(ckpt.get("nimg", 0))
    if nimg - batch >= total:  # this run would have stopped at least one step earlier
        return (f"is at {nimg / 1000:g} kimg, past train.total_kimg={cfg.train.total_kimg:g} (a shorter run is not "
                f"the longer one relabelled)")
    return None


def set_aside(paths: RunPaths, old_config: dict) -> Path:
    """Move the files of the run written with ``old_config`` to ``stale-<hash>/`` (a previous
    copy under that name is replaced: it holds the same config's run)."""
    digest = config_sha256(old_config)[:8]
    dest = paths.out / f"stale-{digest}"
    shutil.rmtree(dest, ignore_errors=True)
    dest.mkdir()
    for src in (paths.state, paths.model, paths.log, paths.snapshots, paths.config):
        if src.exists():
            os.replace(src, dest / src.name)
    return dest


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
            if not dst.exists():
                link_or_copy(snap, dst)


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
