"""Pretrained networks from disk, offline, as plain ``f(x_t, t) -> tensor`` modules.

The seed paper's analyses (Xie & Agam, arXiv 2502.01990, Sec. 2; METHODS.md 3.1) start from a
trained ("pretrained") model. :func:`load_pretrained` reads one of three formats from a local
path -- nothing is ever downloaded:

==================  ==========================================================================
``fmt``             what ``path`` is
==================  ==========================================================================
``timestep_lab``    our own ``model.pt`` / snapshot (see :mod:`timestep_lab.artifacts`); the
                    module returns what its prediction type says (``info["prediction"]``)
``diffusers``       a ``diffusers.UNet2DModel`` folder (``config.json`` plus
                    ``diffusion_pytorch_model.safetensors`` or ``.bin``), e.g.
                    google/ddpm-cifar10-32 or google/ddpm-celebahq-256; the module returns
                    ``unet(x, t).sample`` (eps for those DDPM releases). The noise schedule is
                    read from ``scheduler_config.json`` in the folder, its ``scheduler/``
                    sub-folder or its parent.
``guided_diffusion`` openai guided-diffusion's released state dict, e.g.
                    ``256x256_diffusion_uncond.pt`` (a plain ``{name: tensor}`` dict, fp16
                    tensors); loaded with ``weights_only=True`` into our ADM
                    :class:`~timestep_lab.models.unet.UNet` (same parameter names), converted
                    to float32; with learned sigma (6 output channels) the module returns the
                    first 3 channels only (eps), dropping the variance interpolation channels
==================  ==========================================================================

Every loader returns ``(module in eval mode on device, info)`` where ``info`` holds
``format, path, prediction, num_timesteps, schedule {"name", "params"} (or None) ,
schedule_error (None or why the schedule is not supported), variance, image_size, channels,
out_channels, learn_sigma, parameters, sha256`` and format-specific extras.

Fine-tuning a diffusers folder (the seed paper's slot fine-tuning starts from the reference
model, METHODS.md 3.2): guided-diffusion state dicts load into our UNet, but a diffusers
``UNet2DModel`` has its own architecture, so it is trained as itself. The model registry entry
``diffusers_unet2d`` (:func:`build_diffusers_unet2d`) builds a trainable :class:`DiffusersEps`
from ``model.pretrained`` (architecture from its ``config.json``, weights from the folder), and
:func:`diffusers_run_config` gives the ``model`` and ``diffusion`` sections of a run that starts
from such a folder (T, schedule, prediction and variance from its ``scheduler_config.json``).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import fields
from pathlib import Path
from typing import Any, Mapping

import torch
from torch import Tensor, nn

from timestep_lab.config import ConfigError, ModelConfig
from timestep_lab.io import ArtifactError, load_torch, sha256_file
from timestep_lab.models.unet import UNet

__all__ = [
    "FORMATS",
    "GUIDED_DIFFUSION_256_UNCOND",
    "DiffusersEps",
    "FirstChannels",
    "load_pretrained",
    "guided_diffusion_flags",
    "infer_guided_diffusion_flags",
    "build_guided_diffusion_unet",
    "diffusers_schedule",
    "diffusers_run_config",
    "build_diffusers_unet2d",
]

FORMATS = ("timestep_lab", "diffusers", "guided_diffusion")

# guided-diffusion README, "256x256 model (unconditional)" MODEL_FLAGS:
#   --attention_resolutions 32,16,8 --class_cond False --diffusion_steps 1000 --image_size 256
#   --learn_sigma True --noise_schedule linear --num_channels 256 --num_head_channels 64
#   --num_res_blocks 2 --resblock_updown True --use_fp16 True --use_scale_shift_norm True
# channel_mult from script_util.create_model for image_size 256; GroupNorm with 32 groups
# (guided_diffusion/nn.py `normalization`); dropout 0 at inference.
GUIDED_DIFFUSION_256_UNCOND: dict[str, Any] = {
    "image_size": 256,
    "in_channels": 3,
    "channels": 256,
    "channel_mult": (1, 1, 2, 2, 4, 4),
    "num_res_blocks": 2,
    "attention_resolutions": (32, 16, 8),
    "num_heads": 4,  # unused: num_head_channels takes precedence
    "num_head_channels": 64,
    "resblock_updown": True,
    "use_scale_shift_norm": True,
    "learn_sigma": True,
    "dropout": 0.0,
    "norm_groups": 32,
    "num_timesteps": 1000,
}
_UNET_FLAGS = ("image_size", "in_channels", "channels", "channel_mult", "num_res_blocks", "attention_resolutions",
               "num_heads", "num_head_channels", "resblock_updown", "use_scale_shift_norm", "learn_sigma", "dropout",
               "norm_groups")


class FirstChannels(nn.Module):
    """Wrap a network and keep only its first ``channels`` output channels (the eps part of a
    learned-sigma guided-diffusion model: ``[eps (3), variance interpolation v (3)]``)."""

    def __init__(self, net: nn.Module, channels: int):
        super().__init__()
        self.net = net
        self.channels = channels

    def forward(self, x: Tensor, t: Tensor) -> Tensor:
        return self.net(x, t)[:, : self.channels]


class DiffusersEps(nn.Module):
    """``f(x_t [B, C, H, W], t [B]) -> unet(x_t, t).sample`` for a ``diffusers.UNet2DModel``
    (``t`` passed as a long tensor, as the DDPM pipelines do).

    Also the trainable network of the ``diffusers_unet2d`` model entry: its ``state_dict`` is the
    UNet's under the prefix ``unet.``, which is what our checkpoints and ``model.pt`` store.
    """

    def __init__(self, unet: nn.Module):
        super().__init__()
        self.unet = unet
        config = getattr(unet, "config", None)
        self.in_channels = getattr(config, "in_channels", None)
        self.out_channels = getattr(config, "out_channels", None)

    def forward(self, x: Tensor, t: Tensor) -> Tensor:
        t = torch.as_tensor(t, device=x.device)
        if t.ndim == 0:
            t = t.expand(x.shape[0])
        return self.unet(x, t.long()).sample


# ------------------------------------------------------------------------------ helpers


def _count(net: nn.Module) -> int:
    return int(sum(p.numel() for p in net.parameters()))


def _hash_files(files: list[Path], root: Path) -> str:
    """sha256 over ``"<relative name>\\0<sha256 of the file>\\n"`` lines, sorted by name."""
    h = hashlib.sha256()
    for f in sorted(files, key=lambda p: p.relative_to(root).as_posix()):
        h.update(f"{f.relative_to(root).as_posix()}\0{sha256_file(f)}\n".encode())
    return h.hexdigest()


def _base_info(fmt: str, path: Path) -> dict[str, Any]:
    return {"format": fmt, "path": str(path), "prediction": "eps", "num_timesteps": None, "schedule": None,
            "schedule_error": None, "variance": None, "image_size": None, "channels": None, "out_channels": None,
            "learn_sigma": False, "parameters": None, "sha256": None}


# ------------------------------------------------------------------------------ timestep_lab


def _load_timestep_lab(path: Path, device: Any) -> tuple[nn.Module, dict[str, Any]]:
    from timestep_lab.artifacts import load_model

    net, cfg, meta = load_model(path, device=device)
    info = _base_info("timestep_lab", path)
    d = cfg.diffusion
    info.update(prediction=d.prediction, num_timesteps=d.num_timesteps,
                schedule={"name": d.schedule, "params": dict(d.schedule_params)}, variance=d.variance,
                image_size=int(meta["image_size"]), channels=int(meta["channels"]),
                out_channels=int(getattr(net, "out_channels", 0)) or None, parameters=_count(net),
                sha256=sha256_file(path))
    return net, info


# ------------------------------------------------------------------------------ diffusers

_DIFFUSERS_WEIGHTS = ("diffusion_pytorch_model.safetensors", "diffusion_pytorch_model.bin")
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


def _import_diffusers():
    try:
        import diffusers
    except ImportError:
        raise ImportError("loading a diffusers checkpoint needs the optional dependency diffusers: "
                          "pip install 'timestep-lab[diffusers]'") from None
    return diffusers


def _unet_folder(path: Path) -> tuple[Path, list[Path]]:
    """The ``UNet2DModel`` folder at ``path`` (``path`` itself, or ``path/unet`` for a whole
    pipeline folder) and its weight files; :class:`ArtifactError` naming what is missing."""
    if not path.is_dir():
        raise ArtifactError(f"{path}: diffusers model folder not found (expected a UNet2DModel folder with "
                            f"config.json and diffusion_pytorch_model.safetensors/.bin)")
    folder = path
    if not (folder / "config.json").is_file() and (folder / "unet" / "config.json").is_file():
        folder = folder / "unet"  # a whole pipeline folder: the UNet lives in unet/
    if not (folder / "config.json").is_file():
        raise ArtifactError(f"{path}: no config.json: not a diffusers UNet2DModel folder")
    weights = [folder / w for w in _DIFFUSERS_WEIGHTS if (folder / w).is_file()]
    if not weights:
        raise ArtifactError(f"{folder}: no weights ({' or '.join(_DIFFUSERS_WEIGHTS)}) next to config.json")
    return folder, weights


def _read_unet(folder: Path) -> nn.Module:
    """``diffusers.UNet2DModel.from_pretrained(folder)`` offline, in float32 (train mode)."""
    diffusers = _import_diffusers()
    try:
        config = json.loads((folder / "config.json").read_text())
    except json.JSONDecodeError as exc:
        raise ArtifactError(f"{folder / 'config.json'}: corrupted JSON ({exc})") from None
    if config.get("_class_name", "UNet2DModel") != "UNet2DModel":
        raise ArtifactError(f"{folder / 'config.json'}: a {config.get('_class_name')}, not a UNet2DModel")
    try:
        unet = diffusers.UNet2DModel.from_pretrained(str(folder), local_files_only=True)
    except Exception as exc:  # diffusers raises OSError/ValueError/EnvironmentError/safetensors errors
        first = str(exc).splitlines()[0] if str(exc) else repr(exc)
        raise ArtifactError(f"{folder}: could not load the diffusers UNet2DModel ({first})") from None
    return unet.float().train()


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


def _load_diffusers(path: Path, device: Any, image_size: int | None) -> tuple[nn.Module, dict[str, Any]]:
    folder, weights = _unet_folder(path)
    unet = _read_unet(folder).to(device).eval()
    net = DiffusersEps(unet).eval()
    info = _base_info("diffusers", path)
    cfg = unet.config
    size = cfg.sample_size if isinstance(cfg.sample_size, int) else (cfg.sample_size or [None])[0]
    info.update(image_size=int(image_size or size) if (image_size or size) else None,
                channels=int(cfg.in_channels), out_channels=int(cfg.out_channels), parameters=_count(unet),
                sha256=_hash_files([folder / "config.json", *weights], folder), weights=[w.name for w in weights],
                diffusers_version=_import_diffusers().__version__)
    sched_file, mapped = _read_scheduler(path)
    if sched_file is None:
        info.update(num_timesteps=1000, schedule=None, scheduler_config=None,
                    schedule_error=f"{path}: no scheduler_config.json in the folder, its scheduler/ sub-folder or "
                                   f"its parent: the noise schedule is unknown (configure diffusion.schedule by hand)")
    else:
        info.update(mapped, scheduler_config=str(sched_file))
    return net, info


# ------------------------------------------------------------------------------ diffusers fine-tuning

# The fields of a model config that say where the network comes from; every other ModelConfig
# field describes our UNet's architecture, which a diffusers folder fixes in its config.json.
_DIFFUSERS_MODEL_KEYS = ("name", "pretrained", "pretrained_format")


def build_diffusers_unet2d(cfg: ModelConfig, *, image_size: int, in_channels: int, out_channels: int) -> DiffusersEps:
    """The ``diffusers_unet2d`` model entry: a trainable ``diffusers.UNet2DModel`` read from the
    folder ``cfg.pretrained`` (architecture from its ``config.json``, weights loaded from the
    folder offline), wrapped as ``forward(x [B, C, H, W], t [B] long) -> unet(x, t).sample
    [B, C_out, H, W]``.

    The model config must be ``{name: diffusers_unet2d, pretrained: <folder>, pretrained_format:
    diffusers}``; the architecture fields (``channels``, ``channel_mult``, ``dropout``, ...) do not
    apply and must keep their defaults, so a config never claims an architecture it does not get.
    ``cfg.pretrained`` is read again whenever the network is rebuilt (``load_model`` of a
    fine-tuned ``model.pt``), relative to the working directory (the repo root in the workflow);
    the weights loaded then are overwritten by the stored ones. ``image_size`` is not checked:
    the UNet is convolutional (any size divisible by ``2**(levels - 1)`` works).

    :raises ConfigError: a missing ``model.pretrained``, a non-default architecture field, or a
        folder whose input/output channels differ from the data's channels / the prediction's
        outputs (``in_channels`` / ``out_channels``).
    :raises ArtifactError: a missing or unreadable folder, naming the path.
    """
    if not cfg.pretrained or cfg.pretrained_format != "diffusers":
        raise ConfigError(f"model: diffusers_unet2d needs model.pretrained (a diffusers UNet2DModel folder) and "
                          f"model.pretrained_format: diffusers, got pretrained={cfg.pretrained!r}, "
                          f"pretrained_format={cfg.pretrained_format!r}")
    set_fields = [f"model.{f.name}" for f in fields(ModelConfig)
                  if f.name not in _DIFFUSERS_MODEL_KEYS and getattr(cfg, f.name) != f.default]
    if set_fields:
        raise ConfigError(f"{', '.join(set_fields)}: do not apply to model diffusers_unet2d (the architecture is read "
                          f"from {cfg.pretrained}/config.json); remove them from the model config")
    folder, _ = _unet_folder(Path(cfg.pretrained))
    unet = _read_unet(folder)
    got = (int(unet.config.in_channels), int(unet.config.out_channels))
    if got != (in_channels, out_channels):
        raise ConfigError(f"{folder / 'config.json'}: the UNet2DModel has in_channels={got[0]}, out_channels={got[1]}; "
                          f"this run needs {in_channels} input channels (the data) and {out_channels} output "
                          f"channels (the prediction type)")
    return DiffusersEps(unet)


def diffusers_run_config(path: str | Path) -> dict[str, dict[str, Any]]:
    """The ``model`` and ``diffusion`` sections of a run that fine-tunes the diffusers folder ``path``.

    ``model = {name: diffusers_unet2d, pretrained: <path>, pretrained_format: diffusers}`` (so
    checkpoints can be rebuilt); ``diffusion = {num_timesteps, schedule, schedule_params,
    prediction[, variance]}`` from the folder's ``scheduler_config.json`` through
    :func:`diffusers_schedule`, i.e. the same process :func:`load_pretrained` gives the folder at
    inference (``variance`` only when the scheduler's one has a fixed counterpart).

    :raises ArtifactError: no UNet folder, no scheduler config, or a schedule/prediction
        timestep_lab cannot represent (naming the file).
    """
    path = Path(path)
    _unet_folder(path)  # fail here, naming the folder, rather than in the training job
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


# ------------------------------------------------------------------------------ guided-diffusion


def guided_diffusion_flags(overrides: ModelConfig | Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The 256x256 unconditional flags, updated with ``overrides`` (a dict of any of
    :data:`GUIDED_DIFFUSION_256_UNCOND`'s keys, or a :class:`ModelConfig`, whose architecture
    fields except ``learn_sigma`` are then taken as given)."""
    flags = dict(GUIDED_DIFFUSION_256_UNCOND)
    flags.update(_overrides_dict(overrides))
    return flags


def _overrides_dict(overrides: ModelConfig | Mapping[str, Any] | None) -> dict[str, Any]:
    if overrides is None:
        return {}
    if isinstance(overrides, ModelConfig):
        # a run config's model section: its architecture flags, checked against the file; learn_sigma is
        # left to the file (our training configs predict eps only, the released model has 6 channels)
        names = {f.name for f in fields(ModelConfig)} - {"learn_sigma"}
        return {k: getattr(overrides, k) for k in _UNET_FLAGS if k in names}
    unknown = set(overrides) - set(GUIDED_DIFFUSION_256_UNCOND)
    if unknown:
        raise ValueError(f"unknown guided-diffusion flag(s) {sorted(unknown)}; known: {sorted(GUIDED_DIFFUSION_256_UNCOND)}")
    return dict(overrides)


def _block_index(state: Mapping[str, Tensor], prefix: str) -> int:
    n = 0
    while any(k.startswith(f"{prefix}.{n}.") for k in state):
        n += 1
    return n


def infer_guided_diffusion_flags(state: Mapping[str, Tensor]) -> dict[str, Any]:
    """Architecture flags read off a guided-diffusion ``UNetModel`` state dict's shapes.

    ``channels`` (``time_embed.0.weight`` is ``[4C, C]``), ``in_channels`` and ``out_channels``
    (``input_blocks.0.0.weight``, ``out.2.weight``), ``learn_sigma`` (out = 2 in),
    ``num_res_blocks`` (index of the first decoder block that up-samples), ``channel_mult``
    (decoder block widths), ``use_scale_shift_norm`` (``emb_layers.1`` outputs 2x the block
    width), ``resblock_updown`` (a residual block rather than ``op`` conv at the first
    down-sampling position) and the attention down-sampling factors ``attention_ds``. Not
    readable from shapes: ``image_size``, ``num_head_channels`` / ``num_heads``.
    """
    need = ("time_embed.0.weight", "input_blocks.0.0.weight", "out.2.weight")
    missing = [k for k in need if k not in state]
    if missing:
        raise ValueError(f"not a guided-diffusion UNetModel state dict (missing {missing})")
    C = int(state["time_embed.0.weight"].shape[1])
    in_ch = int(state["input_blocks.0.0.weight"].shape[1])
    if int(state["input_blocks.0.0.weight"].shape[0]) != C:
        raise ValueError(f"the first convolution has {int(state['input_blocks.0.0.weight'].shape[0])} channels, "
                         f"model_channels is {C}: channel_mult[0] != 1 (e.g. the 512x512 model) is not supported")
    out_ch = int(state["out.2.weight"].shape[0])
    n_out = _block_index(state, "output_blocks")

    def has_upsampler(i: int) -> bool:
        p = f"output_blocks.{i}."
        return any(k.startswith(p) and (".conv.weight" in k or k.split(".")[2] != "0" and ".in_layers." in k)
                   for k in state)

    first_up = next((i for i in range(n_out) if has_upsampler(i)), None)
    if first_up is None:  # a single level: no up-sampling at all
        num_res_blocks, levels = n_out - 1, 1
    else:
        num_res_blocks = first_up
        levels = n_out // (num_res_blocks + 1)
    if levels * (num_res_blocks + 1) != n_out:
        raise ValueError(f"cannot read the level structure from {n_out} decoder blocks")
    mult = []
    for level in range(levels):
        i = (levels - 1 - level) * (num_res_blocks + 1)  # first decoder block of this level
        width = int(state[f"output_blocks.{i}.0.in_layers.2.weight"].shape[0])
        if width % C:
            raise ValueError(f"decoder width {width} is not a multiple of model_channels {C}")
        mult.append(width // C)
    emb = state["input_blocks.1.0.emb_layers.1.weight"].shape[0]
    width1 = state["input_blocks.1.0.in_layers.2.weight"].shape[0]
    scale_shift = int(emb) == 2 * int(width1)
    down_prefix = f"input_blocks.{1 + num_res_blocks}.0."
    resblock_updown = levels > 1 and any(k.startswith(down_prefix + "in_layers") for k in state)
    attention_ds, ds, idx = [], 1, 1
    for level in range(levels):
        for _ in range(num_res_blocks):
            if f"input_blocks.{idx}.1.qkv.weight" in state and ds not in attention_ds:
                attention_ds.append(ds)
            idx += 1
        if level != levels - 1:
            idx += 1
            ds *= 2
    return {"channels": C, "in_channels": in_ch, "out_channels": out_ch, "learn_sigma": out_ch == 2 * in_ch,
            "num_res_blocks": num_res_blocks, "channel_mult": tuple(mult), "use_scale_shift_norm": scale_shift,
            "resblock_updown": resblock_updown, "attention_ds": tuple(attention_ds)}


def build_guided_diffusion_unet(flags: Mapping[str, Any]) -> UNet:
    """Our ADM UNet with guided-diffusion flags (``attention_resolutions`` in pixels, as the
    guided-diffusion command line gives them; ``learn_sigma`` doubles the output channels)."""
    in_ch = int(flags.get("in_channels", 3))
    return UNet(image_size=int(flags["image_size"]), in_channels=in_ch,
                out_channels=in_ch * (2 if flags.get("learn_sigma") else 1), channels=int(flags["channels"]),
                channel_mult=tuple(flags["channel_mult"]), num_res_blocks=int(flags["num_res_blocks"]),
                attention_resolutions=tuple(flags["attention_resolutions"]), dropout=float(flags.get("dropout", 0.0)),
                num_heads=int(flags.get("num_heads", 1)), num_head_channels=int(flags.get("num_head_channels", -1)),
                resblock_updown=bool(flags["resblock_updown"]), use_scale_shift_norm=bool(flags["use_scale_shift_norm"]),
                norm_groups=int(flags.get("norm_groups", 32)))


def _load_guided_diffusion(path: Path, device: Any, image_size: int | None,
                           overrides: ModelConfig | Mapping[str, Any] | None) -> tuple[nn.Module, dict[str, Any]]:
    state = load_torch(path, map_location="cpu")  # weights_only=True; UnsafeCheckpointError propagates
    if isinstance(state, Mapping) and "state_dict" in state and isinstance(state["state_dict"], Mapping):
        state = state["state_dict"]
    if not isinstance(state, Mapping) or not state or not all(isinstance(v, Tensor) for v in state.values()):
        raise ArtifactError(f"{path}: not a guided-diffusion checkpoint (expected a plain {{name: tensor}} state dict)")
    state = {k.removeprefix("module."): v for k, v in state.items()}
    dtypes = sorted({str(v.dtype).removeprefix("torch.") for v in state.values()})
    flags = dict(GUIDED_DIFFUSION_256_UNCOND)
    try:
        inferred = infer_guided_diffusion_flags(state)
    except (ValueError, KeyError, IndexError) as exc:
        raise ArtifactError(f"{path}: cannot read the architecture from the state dict ({exc})") from None
    flags.update({k: v for k, v in inferred.items() if k in flags})
    given = _overrides_dict(overrides)
    if image_size is not None:
        given["image_size"] = int(image_size)
    size = int(given.get("image_size", flags["image_size"]))
    if "attention_resolutions" not in given:  # attention factors read off the file, placed for this size
        flags["attention_resolutions"] = tuple(size // ds for ds in inferred["attention_ds"])
    flags.update(given)
    flags["image_size"] = size
    try:
        with torch.device("meta"):  # no random init of ~550M parameters: every one is loaded below
            net = build_guided_diffusion_unet(flags)
    except ValueError as exc:
        raise ArtifactError(f"{path}: the flags {flags} do not make a valid network ({exc})") from None
    own = net.state_dict()
    missing = [k for k in own if k not in state]
    unexpected = [k for k in state if k not in own]
    if missing or unexpected:
        raise ArtifactError(f"{path}: the state dict does not fit the guided-diffusion UNet built from flags "
                            f"{_short_flags(flags)}: {len(missing)} missing key(s) {missing[:5]}, "
                            f"{len(unexpected)} unexpected key(s) {unexpected[:5]}")
    bad = [(k, tuple(state[k].shape), tuple(v.shape)) for k, v in own.items() if tuple(state[k].shape) != tuple(v.shape)]
    if bad:
        raise ArtifactError(f"{path}: {len(bad)} tensor(s) have the wrong shape for flags {_short_flags(flags)}; "
                            f"first: " + ", ".join(f"{k} {s} (expected {e})" for k, s, e in bad[:3]))
    net = net.to_empty(device="cpu")
    if any(True for _ in net.buffers()):  # cannot happen with our UNet; to_empty would leave them unset
        raise RuntimeError("the UNet has buffers: build it on a real device before loading")
    net.load_state_dict(state, strict=True)  # copies into the float32 parameters (fp16 -> fp32)
    net = net.to(device).eval()
    module: nn.Module = FirstChannels(net, net.in_channels).eval() if flags.get("learn_sigma") else net
    info = _base_info("guided_diffusion", path)
    T = int(flags.get("num_timesteps", 1000))
    info.update(num_timesteps=T,
                # guided-diffusion get_named_beta_schedule("linear", T): linspace(1e-4, 0.02) * 1000/T
                schedule={"name": "linear", "params": {"beta_start": 1e-4, "beta_end": 0.02, "rescale": True}},
                variance="fixed_large" if not flags.get("learn_sigma") else None,
                image_size=size, channels=net.in_channels, out_channels=net.out_channels,
                learn_sigma=bool(flags.get("learn_sigma")), parameters=_count(net), sha256=sha256_file(path),
                stored_dtypes=dtypes, flags={k: (list(v) if isinstance(v, tuple) else v) for k, v in flags.items()},
                note=("learned-sigma model: only the eps channels are used; sampling uses the configured fixed "
                      "variance, not the learned one") if flags.get("learn_sigma") else None)
    return module, info


def _short_flags(flags: Mapping[str, Any]) -> str:
    keep = ("image_size", "channels", "channel_mult", "num_res_blocks", "attention_resolutions", "num_head_channels",
            "resblock_updown", "use_scale_shift_norm", "learn_sigma")
    return "{" + ", ".join(f"{k}={flags[k]}" for k in keep if k in flags) + "}"


# ------------------------------------------------------------------------------ entry point


def load_pretrained(path: str | Path, fmt: str, *, image_size: int | None = None, device: Any = "cpu",
                    overrides: ModelConfig | Mapping[str, Any] | None = None) -> tuple[nn.Module, dict[str, Any]]:
    """Load a pretrained network from ``path`` (offline): ``(module, info)``.

    :param fmt: ``timestep_lab``, ``diffusers`` or ``guided_diffusion`` (module docstring).
    :param image_size: the resolution the network is used at (guided-diffusion: places the
        attention layers; default 256 or ``overrides["image_size"]``; diffusers: reported only).
    :param overrides: guided-diffusion only: a dict of flags (keys of
        :data:`GUIDED_DIFFUSION_256_UNCOND`) or a :class:`ModelConfig`, applied over the released
        256x256 flags and what the state dict's shapes say (``channels``, ``channel_mult``,
        ``num_res_blocks``, ``learn_sigma``, ``resblock_updown``, ``use_scale_shift_norm``,
        attention placement). ``num_head_channels`` (default 64) cannot be read from the file.
    :returns: the module in eval mode on ``device``, ``forward(x [B, C, H, W] float32 in model
        units, t LongTensor[B] 0-based) -> [B, C, H, W]``, and ``info`` (module docstring).
    :raises ArtifactError: missing/corrupted files or weights that do not fit, naming the path;
        :class:`~timestep_lab.io.UnsafeCheckpointError` for pickles that would run code.
    """
    path = Path(path)
    if fmt not in FORMATS:
        raise ValueError(f"unknown pretrained format {fmt!r}; expected one of {', '.join(FORMATS)}")
    if overrides is not None and fmt != "guided_diffusion":
        raise ValueError(f"overrides are only used for guided_diffusion checkpoints, not {fmt}")
    if fmt == "timestep_lab":
        net, info = _load_timestep_lab(path, device)
    elif fmt == "diffusers":
        net, info = _load_diffusers(path, device, image_size)
    else:
        net, info = _load_guided_diffusion(path, device, image_size, overrides)
    bad = [name for name, p in net.named_parameters() if p.numel() and not bool(torch.isfinite(p.detach()).all())]
    if bad:
        raise ArtifactError(f"{path}: {len(bad)} parameter tensor(s) contain NaN or Inf (first: {bad[0]})")
    return net, info
