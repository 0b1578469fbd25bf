"""A model file checked against the run it is scored as: the reader's side of the inputs every
training artifact records (:func:`timestep_lab.train.files.run_inputs`).

:func:`check_run_model` refuses a timestep_lab model or snapshot that is not a model of the run
whose ``run.yaml`` it is scored under: an embedded config that differs in a setting that names
the run (:data:`timestep_lab.config.identity.NOT_THE_RUN` aside: the length counts; a snapshot,
a point along the run, may carry an earlier length, but none past the run's), training
data other than the data the reference statistics describe, or a parent model
(``train.init_from``) whose content has changed since. A file of another run copied over, a
model left from before its data or parent were re-made, a longer run under a shorter label: each
is an :class:`ArtifactError` naming the file and what differs, never an FID of the wrong model.

Reads only the plain items of the model file (:func:`timestep_lab.artifacts.io.peek_torch`); the
sampler loads it in full and checks its checksum. Must not know the command line.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, Mapping

from timestep_lab.artifacts.io import ArtifactError, peek_torch
from timestep_lab.checkpoints.info import model_sha256
from timestep_lab.checkpoints.native import SNAPSHOT_FORMAT
from timestep_lab.config import ConfigError, config_from_dict, config_to_dict
from timestep_lab.config.identity import NOT_THE_RUN, RESUMABLE_CHANGES, differing

__all__ = ["check_run_model"]

log = logging.getLogger(__name__)


def _normalised(config: Any, source: str) -> dict[str, Any]:
    """A config dict as the current schema writes it (defaults filled in)."""
    try:
        return config_to_dict(config_from_dict(config, source))
    except ConfigError as exc:
        raise ArtifactError(str(exc)) from None


def check_run_model(path: str | Path, run_config: Mapping[str, Any], run_source: str, *,
                    data: Mapping[str, Any] | None = None) -> None:
    """Refuse ``path`` unless it is a model of the run ``run_config`` (a run config dict, read from
    ``run_source``) trained on ``data`` (the reference statistics' record of their prepared
    folder: ``images_sha256``; None: not checked). Module docstring.

    :raises ArtifactError: naming ``path``, ``run_source`` and what differs.
    """
    path = Path(path)
    obj = peek_torch(path)
    if not isinstance(obj, dict) or not isinstance(obj.get("config"), dict):
        raise ArtifactError(f"{path}: not a timestep_lab model (no embedded config to check against {run_source})")
    mine = _normalised(obj["config"], f"{path} (embedded config)")
    run = _normalised(dict(run_config), run_source)
    snapshot = obj.get("format") == SNAPSHOT_FORMAT  # a point along the run: the run may have been extended since
    changed = differing(mine, run, RESUMABLE_CHANGES if snapshot else NOT_THE_RUN)
    if changed:
        shown = ", ".join(f"{k}: {_get(mine, k)!r} here, {_get(run, k)!r} in the run" for k in changed[:3])
        more = f" and {len(changed) - 3} more" if len(changed) > 3 else ""
        raise ArtifactError(f"{path}: not a model of the run {run_source}: its config differs ({shown}{more}); "
                            f"train the run again (or score the file as the run it belongs to)")
    total, batch = int(round(run["train"]["total_kimg"] * 1000)), int(run["train"]["batch_size"])
    nimg = obj.get("nimg")
    if snapshot and isinstance(nimg, int) and nimg - batch >= total:
        raise ArtifactError(f"{path}: a snapshot at {nimg / 1000:g} kimg, past the run's train.total_kimg="
                            f"{run['train']['total_kimg']:g} ({run_source}): left from a longer run")
    inputs = obj.get("inputs")
    if not isinstance(inputs, dict):
        log.warning("%s: records neither the data nor the parent model it was trained from (an earlier version "
                    "wrote it); only its config was checked against %s", path, run_source)
        return
    want = (data or {}).get("images_sha256")
    have = (inputs.get("data") or {}).get("images_sha256") if isinstance(inputs.get("data"), dict) else None
    if want and have != want:
        raise ArtifactError(f"{path}: trained on other data than the reference statistics describe (images sha256 "
                            f"{str(have)[:12]}, reference {str(want)[:12]}); train the run again on the current data")
    init = run["train"].get("init_from")
    if init and inputs.get("init_sha256") and Path(init).exists() and model_sha256(init) != inputs["init_sha256"]:
        raise ArtifactError(f"{path}: trained from another version of its parent {init} (sha256 "
                            f"{str(inputs['init_sha256'])[:12]}, now {model_sha256(init)[:12]}); train the run again")


def _get(config: Mapping[str, Any], dotted: str) -> Any:
    node: Any = config
    for part in dotted.split("."):
        node = node.get(part) if isinstance(node, Mapping) else None
    return node
