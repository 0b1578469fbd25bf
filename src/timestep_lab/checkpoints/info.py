"""What every checkpoint loader returns: the ``info`` dict (and the helpers that fill it) and
:class:`LoadedModel`.

``info`` holds ``format, path, prediction, num_timesteps, schedule {"name", "params"} (or
None), schedule_error (None or why the schedule is not supported), variance, image_size,
channels, out_channels, learn_sigma, parameters, sha256`` and format-specific extras.
Must not know any one format.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from torch import nn

from timestep_lab.artifacts.io import ArtifactError, sha256_file
from timestep_lab.models.conditioning import NONE, Conditioning
from timestep_lab.processes.diffusion import GaussianDiffusion
from timestep_lab.processes.predictions import Prediction

__all__ = ["LoadedModel", "base_info", "count_parameters", "hash_files", "model_sha256"]


@dataclass
class LoadedModel:
    """A network with everything needed to use it: ``net(x_t, t)``, its diffusion process and
    prediction type, ``info`` (image_size, channels, nimg, format, sha256, ...) and what the
    network is conditioned on (``none`` for every foreign format)."""

    net: nn.Module
    diffusion: GaussianDiffusion  # or a RectifiedFlow (diffusion.kind: flow; our own files only)
    prediction: Prediction
    info: dict[str, Any]
    conditioning: Conditioning = NONE


def count_parameters(net: nn.Module) -> int:
    return int(sum(p.numel() for p in net.parameters()))


def hash_files(files: list[Path], root: Path) -> str:
    """sha256 over ``"<relative name>\\0<sha256 of the file>\\n"`` lines, sorted by name."""
    h = hashlib.sha256()
    for f in sorted(files, key=lambda p: p.relative_to(root).as_posix()):
        h.update(f"{f.relative_to(root).as_posix()}\0{sha256_file(f)}\n".encode())
    return h.hexdigest()


def model_sha256(path: str | Path) -> str:
    """The content identity of a model file: the sha256 of its bytes, or of every file of a
    diffusers folder (:func:`hash_files`). Our model files have the same bytes for the same
    content, so a retrained model with other weights has another sha256.

    :raises ArtifactError: nothing at ``path``."""
    p = Path(path)
    if p.is_dir():
        return hash_files([f for f in p.rglob("*") if f.is_file()], p)
    if not p.is_file():
        raise ArtifactError(f"{p}: model not found")
    return sha256_file(p)


def base_info(fmt: str, path: Path) -> dict[str, Any]:
    """The keys every loader fills, with their "not known" values (eps prediction by default)."""
    return {"format": fmt, "path": str(path), "prediction": "eps", "num_timesteps": None, "schedule": None,
            "schedule_error": None, "variance": None, "image_size": None, "channels": None, "out_channels": None,
            "learn_sigma": False, "parameters": None, "sha256": None}
