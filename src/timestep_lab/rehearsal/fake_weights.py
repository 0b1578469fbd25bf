"""Random-weight stand-ins, each in the real file format its loader reads, for a rehearsal.

* :func:`write_inception` -- Inception-v3 for both metric libraries, the same random weights:
  torch-fidelity's ``weights-inception-2015-12-05-6726825d.pth`` (the state dict of its own
  ``FeatureExtractorInceptionV3``, built without a download) and clean-fid's
  ``inception-2015-12-05.pt`` (a TorchScript module with the interface clean-fid's
  ``InceptionV3W`` calls: ``.layers(x)`` on 299x299 input in [-1, 1] gives ``[B, 2048, 1, 1]``,
  ``forward(x, return_features)`` resizes and normalises first). Both ~95 MB; convolutions are
  Kaiming-normal, so the 2048 features neither vanish nor explode.
* :func:`write_rehearsal_cnn` (from :mod:`timestep_lab.metrics.features`) -- the fast stand-in.
* :data:`FAKE_REFERENCES` -- a pretrained reference per ``reference.format``: a diffusers
  ``UNet2DModel`` folder with google/ddpm-*'s ``scheduler_config.json``; an openai
  guided-diffusion state dict (fp16, learned sigma: 6 output channels) shaped like the
  rehearsal's base network, so the fine-tunes that start from it load it; our own ``model.pt``.

Everything is drawn from a fixed seed: the same weights every time. Must not know how the files
are used.
"""

from __future__ import annotations

import json
import math
import tempfile
import warnings
from pathlib import Path
from typing import Any, Callable, Mapping

import torch
from torch import nn
from torch.nn import functional as F

from timestep_lab.metrics.features import write_rehearsal_cnn
from timestep_lab.artifacts.io import save_torch

__all__ = ["write_inception", "write_rehearsal_cnn", "FAKE_REFERENCES", "DDPM_SCHEDULER", "write_diffusers_reference",
           "write_guided_diffusion_reference", "write_native_reference"]

# google/ddpm-cifar10-32's scheduler_config.json (google/ddpm-celebahq-256 has the same process)
DDPM_SCHEDULER = {"_class_name": "DDPMScheduler", "_diffusers_version": "0.1.1", "beta_end": 0.02,
                  "beta_schedule": "linear", "beta_start": 0.0001, "clip_sample": True,
                  "num_train_timesteps": 1000, "trained_betas": None, "variance_type": "fixed_small"}


# ------------------------------------------------------------------------------ Inception


def _kaiming(module: nn.Module, gen: torch.Generator) -> None:
    with torch.no_grad():
        for m in module.modules():
            if isinstance(m, (nn.Conv2d, nn.Linear)):
                fan_in = m.weight[0].numel()
                m.weight.copy_(torch.randn(m.weight.shape, generator=gen) * math.sqrt(2.0 / fan_in))
                if m.bias is not None:
                    m.bias.zero_()


class _Layers(nn.Module):
    """torch-fidelity's Inception-v3 body up to the 2048-d average pool: ``[B, 3, 299, 299] in
    [-1, 1] -> [B, 2048, 1, 1]`` (what clean-fid's TorchScript ``layers`` returns)."""

    NAMES = ("Conv2d_1a_3x3", "Conv2d_2a_3x3", "Conv2d_2b_3x3", "MaxPool_1", "Conv2d_3b_1x1", "Conv2d_4a_3x3",
             "MaxPool_2", "Mixed_5b", "Mixed_5c", "Mixed_5d", "Mixed_6a", "Mixed_6b", "Mixed_6c", "Mixed_6d",
             "Mixed_6e", "Mixed_7a", "Mixed_7b", "Mixed_7c", "AvgPool")

    def __init__(self, inception: nn.Module):
        super().__init__()
        self.body = nn.Sequential(*(getattr(inception, n) for n in self.NAMES))

    def forward(self, x):
        return self.body(x)


class _CleanFidInception(nn.Module):
    """clean-fid's ``inception-2015-12-05.pt`` interface around :class:`_Layers` (traced)."""

    def __init__(self, layers: nn.Module, fc: nn.Linear):
        super().__init__()
        self.layers, self.fc = layers, fc

    def forward(self, img: torch.Tensor, return_features: bool = False) -> torch.Tensor:
        x = F.interpolate(img.float(), size=(299, 299), mode="bilinear", align_corners=False)
        feats = self.layers((x - 128) / 128).flatten(1)
        return feats if return_features else self.fc(feats)


def write_inception(folder: Path, seed: int = 0) -> Path:
    """Both libraries' Inception-v3 weight files, random (module docstring), into ``folder``."""
    import torch_fidelity.feature_extractor_inceptionv3 as tfi

    from timestep_lab.metrics.extractors import CF_INCEPTION_FILE, TF_INCEPTION_FILE

    folder.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=folder, prefix=".weights-") as tmp:
        empty = Path(tmp) / "empty.pth"
        torch.save({}, empty)

        class Unloaded(tfi.FeatureExtractorInceptionV3):  # the library's own network, its weights not loaded
            def load_state_dict(self, state_dict, strict=True, assign=False):
                return None

        net = Unloaded("inception-v3-compat", ["2048"], feature_extractor_weights_path=str(empty))
        _kaiming(net, torch.Generator().manual_seed(seed))
        tf_part = Path(tmp) / TF_INCEPTION_FILE
        save_torch({k: v.detach().clone() for k, v in net.state_dict().items()}, tf_part, checksum=False)  # torch-fidelity's format
        cf_part = Path(tmp) / CF_INCEPTION_FILE
        with warnings.catch_warnings():  # TorchScript is deprecated, but it is clean-fid's file format
            warnings.simplefilter("ignore", FutureWarning)
            traced = torch.jit.trace(_Layers(net).eval(), torch.zeros(1, 3, 299, 299), check_trace=False)
            torch.jit.save(torch.jit.script(_CleanFidInception(traced, net.fc).eval()), str(cf_part))
        tf_part.replace(folder / TF_INCEPTION_FILE)
        cf_part.replace(folder / CF_INCEPTION_FILE)
    return folder


# ------------------------------------------------------------------------------ pretrained references


def _perturbed(net: nn.Module, seed: int) -> nn.Module:
    """``net`` with every parameter moved by seeded noise: weights no fresh initialisation gives,
    and an output that depends on every layer (a zero-initialised output conv would not)."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in net.parameters():
            p.add_(0.05 * torch.randn(p.shape, generator=gen))
    return net.eval()


def write_diffusers_reference(dest: Path, base: Mapping[str, Any], resolution: int, channels: int,
                              seed: int = 0) -> Path:
    """A ``UNet2DModel`` folder (config.json, safetensors) plus google/ddpm-*'s DDPM
    ``scheduler_config.json`` (linear betas, T = 1000, fixed_small, eps): a tiny network."""
    from timestep_lab.models.diffusers import import_diffusers

    diffusers = import_diffusers()
    torch.manual_seed(seed)
    unet = diffusers.UNet2DModel(sample_size=resolution, in_channels=channels, out_channels=channels,
                                 block_out_channels=(16, 32), down_block_types=("DownBlock2D", "AttnDownBlock2D"),
                                 up_block_types=("AttnUpBlock2D", "UpBlock2D"), layers_per_block=1, norm_num_groups=8)
    dest.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=dest.parent, prefix=".diffusers-") as tmp:
        part = Path(tmp) / dest.name
        _perturbed(unet, seed).save_pretrained(part)
        (part / "scheduler_config.json").write_text(json.dumps(DDPM_SCHEDULER, indent=2))
        part.replace(dest)
    return dest


def write_guided_diffusion_reference(dest: Path, base: Mapping[str, Any], resolution: int, channels: int,
                                     seed: int = 0) -> Path:
    """An openai guided-diffusion release's format: a plain ``{name: fp16 tensor}`` state dict of
    the ADM UNet with learned sigma, built with the rehearsal's base network flags (so the
    fine-tunes, which use the base network, load it; inference reads the shapes)."""
    from timestep_lab.checkpoints import build_guided_diffusion_unet

    m = dict(base.get("model") or {})
    flags = {"image_size": resolution, "in_channels": channels, "channels": m.get("channels", 64),
             "channel_mult": tuple(m.get("channel_mult", (1, 2))), "num_res_blocks": m.get("num_res_blocks", 1),
             "attention_resolutions": tuple(m.get("attention_resolutions", ())),
             "num_head_channels": m.get("num_head_channels", 64), "num_heads": m.get("num_heads", 1),
             "resblock_updown": m.get("resblock_updown", True), "use_scale_shift_norm": m.get("use_scale_shift_norm", True),
             "learn_sigma": True, "dropout": 0.0, "norm_groups": m.get("norm_groups", 32)}
    torch.manual_seed(seed)
    net = _perturbed(build_guided_diffusion_unet(flags), seed)
    save_torch({k: v.detach().half() for k, v in net.state_dict().items()}, dest, checksum=False)  # guided-diffusion's format
    return dest


def write_native_reference(dest: Path, base: Mapping[str, Any], resolution: int, channels: int,
                           seed: int = 0) -> Path:
    """Our ``model.pt`` format (:data:`timestep_lab.checkpoints.MODEL_FORMAT`) of the base network."""
    from timestep_lab.checkpoints import MODEL_FORMAT
    from timestep_lab.components import build_model
    from timestep_lab.config import config_from_dict, config_to_dict

    cfg = config_from_dict({k: base[k] for k in ("model", "diffusion") if k in base}, "rehearsal reference")
    torch.manual_seed(seed)
    net = _perturbed(build_model(cfg, resolution, channels), seed)
    state = {k: v.detach().clone() for k, v in net.state_dict().items()}
    save_torch({"format": MODEL_FORMAT, "config": config_to_dict(cfg), "image_size": resolution, "channels": channels,
                "model": state, "ema": state, "nimg": 0, "step": 0, "status": "ok", "message": "rehearsal stand-in",
                "final_loss": None, "torch_version": str(torch.__version__)}, dest)
    return dest


#: ``reference.format`` -> ``writer(dest, base, resolution, channels, seed)``
FAKE_REFERENCES: dict[str, Callable[..., Path]] = {
    "diffusers": write_diffusers_reference,
    "guided_diffusion": write_guided_diffusion_reference,
    "timestep_lab": write_native_reference,
}
