"""openai guided-diffusion state dicts (e.g. ``256x256_diffusion_uncond.pt``) in our ADM UNet.

A release is a plain ``{name: tensor}`` dict (fp16 tensors) with the same parameter names as
our :class:`~timestep_lab.models.unet.UNet`; it is loaded with ``weights_only=True`` and
converted to float32. The architecture is read off the tensors' shapes
(:func:`infer_guided_diffusion_flags`) over the released 256x256 flags
(:data:`GUIDED_DIFFUSION_256_UNCOND`); the schedule is guided-diffusion's ``linear``.

Learned sigma (``learn_sigma=True``) is handled here and nowhere else: such a network has 2C
output channels ``[eps (C), variance interpolation v (C)]``, i.e. rows ``[:C]`` of
``out.2.weight``/``out.2.bias`` are the eps head. timestep_lab uses eps only (sampling uses the
configured fixed variance, not the learned one): at inference :class:`FirstChannels` keeps the
file's network whole and drops v from its output; for fine-tuning :func:`drop_learned_sigma`
drops v's rows from the weights, since the run's network has C outputs. This is a deviation
from the released model's sampler (docs/methods.md, section 3.1 "Reference model").
Must not know other checkpoint formats or the training loop.
"""

from __future__ import annotations

from dataclasses import fields
from pathlib import Path
from typing import Any, Mapping

import torch
from torch import Tensor, nn

from timestep_lab.artifacts.io import ArtifactError, load_torch, sha256_file
from timestep_lab.checkpoints.info import base_info, count_parameters
from timestep_lab.config import ModelConfig
from timestep_lab.models.unet import UNet

__all__ = ["GUIDED_DIFFUSION_256_UNCOND", "FirstChannels", "drop_learned_sigma", "guided_diffusion_flags",
           "infer_guided_diffusion_flags", "build_guided_diffusion_unet", "load_guided_diffusion",
           "is_guided_diffusion_state", "guided_diffusion_init_state"]

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


# ------------------------------------------------------------------------------ learned sigma


class FirstChannels(nn.Module):
    """Wrap a network and keep only its first ``channels`` output channels (the eps part of a
    learned-sigma guided-diffusion model: ``[eps (3), variance interpolation v (3)]``)."""

    def __init__(self, net: nn.Module, channels: int):
        super().__init__()
        self.net = net
        self.channels = channels

    def forward(self, x: Tensor, t: Tensor) -> Tensor:
        return self.net(x, t)[:, : self.channels]


def drop_learned_sigma(state: dict[str, Tensor], channels: int) -> dict[str, Tensor]:
    """``state`` with ``out.2.weight``/``out.2.bias`` cut to their first ``channels`` rows (eps)
    when they have ``2 * channels`` (eps and v); unchanged otherwise. Updates ``state`` in place."""
    w, b = state.get("out.2.weight"), state.get("out.2.bias")
    if w is not None and w.shape[0] == 2 * channels:
        state["out.2.weight"], state["out.2.bias"] = w[:channels], b[:channels]
    return state


# ------------------------------------------------------------------------------ architecture

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


def load_guided_diffusion(path: Path, device: Any, image_size: int | None,
                          overrides: ModelConfig | Mapping[str, Any] | None) -> tuple[nn.Module, dict[str, Any]]:
    """``load_pretrained(path, "guided_diffusion")``: the network in eval mode (eps channels
    only, :class:`FirstChannels`, when it learned sigma) and ``info`` (with the flags used)."""
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
    info = base_info("guided_diffusion", path)
    T = int(flags.get("num_timesteps", 1000))
    info.update(num_timesteps=T,
                # guided-diffusion get_named_beta_schedule("linear", T): linspace(1e-4, 0.02) * 1000/T
                schedule={"name": "linear", "params": {"beta_start": 1e-4, "beta_end": 0.02, "rescale": True}},
                variance="fixed_large" if not flags.get("learn_sigma") else None,
                image_size=size, channels=net.in_channels, out_channels=net.out_channels,
                learn_sigma=bool(flags.get("learn_sigma")), parameters=count_parameters(net), sha256=sha256_file(path),
                stored_dtypes=dtypes, flags={k: (list(v) if isinstance(v, tuple) else v) for k, v in flags.items()},
                note=("learned-sigma model: only the eps channels are used; sampling uses the configured fixed "
                      "variance, not the learned one") if flags.get("learn_sigma") else None)
    return module, info


def _short_flags(flags: Mapping[str, Any]) -> str:
    keep = ("image_size", "channels", "channel_mult", "num_res_blocks", "attention_resolutions", "num_head_channels",
            "resblock_updown", "use_scale_shift_norm", "learn_sigma")
    return "{" + ", ".join(f"{k}={flags[k]}" for k in keep if k in flags) + "}"


# ------------------------------------------------------------------------------ fine-tuning


def is_guided_diffusion_state(obj: Any) -> bool:
    """A plain, non-empty ``{name: tensor}`` dict (what a guided-diffusion release is)."""
    return isinstance(obj, dict) and bool(obj) and all(isinstance(v, torch.Tensor) for v in obj.values())


def guided_diffusion_init_state(obj: dict[str, Tensor], net: nn.Module) -> dict[str, Tensor]:
    """The weights ``train.init_from`` takes from a release, for the run's network ``net``:
    float32 (a release may be fp16), without the learned-sigma rows when ``net`` predicts eps only."""
    state = {k: v.float() for k, v in obj.items()}
    out_w = net.state_dict().get("out.2.weight")
    return drop_learned_sigma(state, out_w.shape[0]) if out_w is not None else state
