"""Which settings of a run config name the run, and which do not.

Two configs describe the same run when they differ only in settings that do not change what a
training step computes or how long the run is: where the prepared data lies (its *content* is
named by its sha256, :attr:`timestep_lab.data.PreparedData.identity`), the device, logging,
checkpoint and snapshot spacing, how a non-finite loss is reported, and the sample/eval
sections (the scoring protocol sets those). :data:`RESUMABLE_CHANGES` may also change the length,
``train.total_kimg``, since a training state can be continued to a longer run.

* A training state is resumed only by a config equal to its own up to :data:`RESUMABLE_CHANGES`
  (:mod:`timestep_lab.train.files`);
* a model is scored as a run only when its embedded config equals the run's ``run.yaml`` up to
  :data:`NOT_THE_RUN`: the length included (``timestep_lab.cli.generate``).

Pure functions of config dicts (:func:`timestep_lab.config.config_to_dict`); no torch.
"""

from __future__ import annotations

import hashlib
from typing import Any, Iterable, Mapping

from timestep_lab.artifacts.io import canonical_json

__all__ = ["RESUMABLE_CHANGES", "NOT_THE_RUN", "config_diff", "differing", "config_sha256"]

#: config keys (sections or dotted keys) that may change between a training state and its resumption
RESUMABLE_CHANGES = ("train.total_kimg", "train.log_every_kimg", "train.checkpoint_every_kimg",
                     "train.snapshot_every_kimg", "train.device", "train.compile", "train.on_nonfinite",
                     "sample", "eval", "data.path")
#: config keys that do not tell two finished runs apart: :data:`RESUMABLE_CHANGES` but the length
NOT_THE_RUN = tuple(k for k in RESUMABLE_CHANGES if k != "train.total_kimg")


def config_diff(a: Mapping[str, Any], b: Mapping[str, Any], prefix: str = "") -> list[str]:
    """The dotted keys whose values differ between the config dicts ``a`` and ``b`` (sorted)."""
    keys = []
    for k in sorted(set(a) | set(b), key=str):
        va, vb = a.get(k), b.get(k)
        key = f"{prefix}{k}"
        if isinstance(va, Mapping) and isinstance(vb, Mapping):
            keys += config_diff(va, vb, key + ".")
        elif va != vb:
            keys.append(key)
    return keys


def differing(a: Mapping[str, Any], b: Mapping[str, Any], ignore: Iterable[str] = RESUMABLE_CHANGES) -> list[str]:
    """:func:`config_diff` without the keys under ``ignore`` (sections or dotted keys)."""
    ignore = tuple(ignore)
    return [k for k in config_diff(a, b) if not any(k == r or k.startswith(r + ".") for r in ignore)]


def config_sha256(config: Mapping[str, Any]) -> str:
    """sha256 of the config dict's canonical JSON: names a resolved config in the artifacts made
    with it (a training state, a snapshot, ``model.pt``)."""
    return hashlib.sha256(canonical_json(config).encode()).hexdigest()
