"""diffusers folders (e.g. google/ddpm-cifar10-32, google/ddpm-celebahq-256): the noise process
they were trained on, loading them for inference, and the run config that fine-tunes them.

A folder is a ``UNet2DModel`` (``config.json`` plus ``diffusion_pytorch_model.safetensors`` or
``.bin``) or a whole pipeline folder with the UNet in ``unet/``; the network itself is
:class:`~timestep_lab.models.diffusers.DiffusersEps` (``unet(x, t).sample``, eps for those DDPM
releases). The noise schedule is read from ``scheduler_config.json`` in the folder, its
``scheduler/`` sub-folder or its parent (:func:`diffusers_schedule` maps its fields to ours).
Must not know other checkpoint formats or the training loop.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Mapping

from torch import nn

from timestep_lab.artifacts.io import ArtifactError
from timestep_lab.checkpoints.info import base_info, count_parameters, hash_files
from timestep_lab.models.diffusers import (
    DiffusersEps,
    import_diffusers,
    read_unet,
    unet_folder,
)

__all__ = ["diffusers_schedule", "diffusers_run_config", "load_diffusers"]

_DIFFUSERS_PREDICTION = {"epsilon": "eps", "sample": "x0", "v_prediction": "v"}
_DIFFUSERS_VARIANCE = {"fixed_small": "fixed_small", "fixed_small_log": "fixed_small", "fixed_large": "fixed_large",
                       "fixed_large_log": "fixed_large"}


def diffusers_schedule(sched: Mapping[str, Any]) -> dict[str, Any]:
    """Map a diffusers scheduler config (DDPMScheduler / DDIMScheduler fields) to ours.

    Returns ``{"num_timesteps", "schedule": {"name", "params"} | None, "schedule_error": str | None,
    "prediction", "variance"}``. ``linear`` -> our ``linear`` with the same ``beta_start``/``beta_end``
    and ``rescale: false`` (diffusers does not rescale by 1000/T); ``scaled_linear`` -> ``scaled_linear``;
    ``squaredcos_cap_v2`` -> ``cosine`` (s = 0.008, max_beta = 0.999, the iDDPM schedule diffusers
    implements). Explicit ``trained_betas`` and other schedules are reported as unsupported.
    """
    T = int(sched.get("num_train_timesteps", 1000))
    name = sched.get("beta_schedule", "linear")
    schedule, error = None, None
    if sched.get("trained_betas") is not None:
        error = "scheduler_config.json gives explicit trained_betas, which timestep_lab has no named schedule for"
    elif name == "linear":
        schedule = {"name": "linear", "params": {"beta_start": float(sched.get("beta_start", 1e-4)),
                                                 "beta_end": float(sched.get("beta_end", 0.02)), "rescale": False}}
    elif name == "scaled_linear":
        schedule = {"name": "scaled_linear", "params": {"beta_start": float(sched.get("beta_start", 0.00085)),
                                                        "beta_end": float(sched.get("beta_end", 0.012))}}
    elif name == "squaredcos_cap_v2":
        schedule = {"name": "cosine", "params": {"s": 0.008, "max_beta": 0.999}}
    else:
        error = (f"beta_schedule {name!r} is not supported (timestep_lab knows linear, scaled_linear and "
                 f"squaredcos_cap_v2 -> cosine); configure diffusion.schedule by hand")
    pred_raw = sched.get("prediction_type", "epsilon")
    prediction = _DIFFUSERS_PREDICTION.get(pred_raw)
    if prediction is None:
        error = (error + "; " if error else "") + f"prediction_type {pred_raw!r} is not supported"
    return {"num_timesteps": T, "schedule": schedule, "schedule_error": error, "prediction": prediction or pred_raw,
            "variance": _DIFFUSERS_VARIANCE.get(sched.get("variance_type", "fixed_small"))}


def _find_scheduler_config(folder: Path) -> Path | None:
    for cand in (folder / "scheduler_config.json", folder / "scheduler" / "scheduler_config.json",
                 folder.parent / "scheduler_config.json", folder.parent / "scheduler" / "scheduler_config.json"):
        if cand.is_file():
            return cand
    return None


def _read_scheduler(path: Path) -> tuple[Path | None, dict[str, Any] | None]:
    """``(scheduler_config.json, diffusers_schedule of it)`` found next to ``path`` (see
    :func:`_find_scheduler_config`), or ``(None, None)``."""
    sched_file = _find_scheduler_config(path)
    if sched_file is None:
        return None, None
    try:
        sched = json.loads(sched_file.read_text())
    except json.JSONDecodeError as exc:
        raise ArtifactError(f"{sched_file}: corrupted JSON ({exc})") from None
    return sched_file, diffusers_schedule(sched)


def load_diffusers(path: Path, device: Any, image_size: int | None) -> tuple[nn.Module, dict[str, Any]]:
    """``load_pretrained(path, "diffusers")``: the folder's UNet in eval mode and ``info`` (with
    ``schedule=None`` and a ``schedule_error`` when no scheduler config is found)."""
    folder, weights = unet_folder(path)
    unet = read_unet(folder).to(device).eval()
    net = DiffusersEps(unet).eval()
    info = base_info("diffusers", path)
    cfg = unet.config
    size = cfg.sample_size if isinstance(cfg.sample_size, int) else (cfg.sample_size or [None])[0]
    info.update(image_size=int(image_size or size) if (image_size or size) else None,
                channels=int(cfg.in_channels), out_channels=int(cfg.out_channels), parameters=count_parameters(unet),
                sha256=hash_files([folder / "config.json", *weights], folder), weights=[w.name for w in weights],
                diffusers_version=import_diffusers().__version__)
    sched_file, mapped = _read_scheduler(path)
    if sched_file is None:
        info.update(num_timesteps=1000, schedule=None, scheduler_config=None,
                    schedule_error=f"{path}: no scheduler_config.json in the folder, its scheduler/ sub-folder or "
                                   f"its parent: the noise schedule is unknown (configure diffusion.schedule by hand)")
    else:
        info.update(mapped, scheduler_config=str(sched_file))
    return net, info


def diffusers_run_config(path: str | Path) -> dict[str, dict[str, Any]]:
    """The ``model`` and ``diffusion`` sections of a run that fine-tunes the diffusers folder ``path``.

    ``model = {name: diffusers_unet2d, pretrained: <path>, pretrained_format: diffusers}`` (so
    checkpoints can be rebuilt); ``diffusion = {num_timesteps, schedule, schedule_params,
    prediction[, variance]}`` from the folder's ``scheduler_config.json`` through
    :func:`diffusers_schedule`, i.e. the same process :func:`load_diffusers` gives the folder at
    inference (``variance`` only when the scheduler's one has a fixed counterpart).

    :raises ArtifactError: no UNet folder, no scheduler config, or a schedule/prediction
        timestep_lab cannot represent (naming the file).
    """
    path = Path(path)
    unet_folder(path)  # fail here, naming the folder, rather than in the training job
    sched_file, mapped = _read_scheduler(path)
    if sched_file is None:
        raise ArtifactError(f"{path}: no scheduler_config.json in the folder, its scheduler/ sub-folder or its "
                            f"parent: cannot tell which noise schedule to fine-tune this model with")
    if mapped["schedule"] is None or mapped["schedule_error"]:
        raise ArtifactError(f"{sched_file}: {mapped['schedule_error']}")
    diffusion = {"num_timesteps": mapped["num_timesteps"], "schedule": mapped["schedule"]["name"],
                 "schedule_params": dict(mapped["schedule"]["params"]), "prediction": mapped["prediction"]}
    if mapped["variance"]:
        diffusion["variance"] = mapped["variance"]
    return {"model": {"name": "diffusers_unet2d", "pretrained": str(path), "pretrained_format": "diffusers"},
            "diffusion": diffusion}
