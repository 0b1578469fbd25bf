"""FLOPs of the study's networks, counted, not guessed.

Every figure comes from :class:`torch.utils.flop_counter.FlopCounterMode` (matrix products,
convolutions and attention: the dense work; elementwise ops, norms and the optimizer are not
counted) on one image, i.e. batch 1 at the network's resolution:

* ``forward``: one evaluation ``net(x_t, t)`` (what one reverse-sampling step or one profile
  evaluation costs per image);
* ``train``: ``net(x_t, t).square().mean().backward()`` -- forward plus backward, about 3x the
  forward (what one training image costs).

A convolution of ``C_in -> C_out`` channels, kernel ``k x k`` on an ``H x W`` output counts
``2 * C_in * C_out * k^2 * H * W`` (one multiply and one add per multiply-accumulate).

Networks are built on the ``meta`` device: no memory, no weights, well under a second even for
ADM's 554M-parameter ImageNet UNet, and every count is cached per model config. This module
knows networks and shapes; it knows nothing of studies, rules or devices.
"""

from __future__ import annotations

import dataclasses
import functools
import json
from dataclasses import dataclass
from typing import Any, Mapping

import torch
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

from timestep_lab.components import build_conditioning, build_model, build_prediction
from timestep_lab.config import config_from_dict
from timestep_lab.metrics.features import FEATURE_NETS

__all__ = ["NetworkCost", "count_flops", "network_cost", "extractor_flops", "EXTRACTORS", "SD_VAE", "VaeCost",
           "vae_cost", "vae_architecture"]


@dataclass(frozen=True)
class NetworkCost:
    """FLOPs per image of one network at its resolution."""

    key: str  # "<model name>-<params>M@<res>x<res>x<channels>": the throughput table's model key
    params: int
    forward: int  # FLOPs of one forward, batch 1
    train: int  # FLOPs of one forward + backward, batch 1


def count_flops(net: nn.Module, inputs: tuple[torch.Tensor, ...], backward: bool = False) -> int:
    """FLOPs of ``net(*inputs)`` (and of the backward of ``out.square().mean()`` if ``backward``)."""
    counter = FlopCounterMode(display=False)
    with counter:
        if backward:
            net(*inputs).square().mean().backward()
        else:
            with torch.no_grad():
                net(*inputs)
    return int(counter.get_total_flops())


@functools.lru_cache(maxsize=None)
def _network_key(run_json: str) -> str:
    """What the network of a run config's ``model`` and ``diffusion`` depends on: the model
    config and the prediction's number of heads (``mixed``: 3; eps, x0, v: 1), not the schedule
    or the prediction's name. Runs that differ only there count their network once (an ImageNet
    study's estimate counted 7 networks of which 3 differ, ~1.5 CPU-s each)."""
    cfg = config_from_dict(json.loads(run_json), "estimate (network)")
    heads = build_prediction(cfg).heads  # what build_model multiplies the output channels by
    # what build_model adds to the input channels (lowres: the low-resolution copy)
    cond = dataclasses.asdict(cfg.conditioning) if build_conditioning(cfg).conditioned else None
    return json.dumps({"model": dataclasses.asdict(cfg.model), "heads": heads, **({"conditioning": cond} if cond else {})},
                      sort_keys=True, default=list)


#: counted networks: (:func:`_network_key`, resolution, channels) -> cost
_COSTS: dict[tuple[str, int, int], NetworkCost] = {}


def _count(run_json: str, resolution: int, channels: int) -> NetworkCost:
    cfg = config_from_dict(json.loads(run_json), "estimate (network)")
    with torch.device("meta"):
        net = build_model(cfg, resolution, channels).train()
        x = torch.randn(1, channels + build_conditioning(cfg).extra_channels(channels), resolution, resolution)
        t = torch.zeros(1, dtype=torch.long)
    params = sum(p.numel() for p in net.parameters())
    fwd = count_flops(net, (x, t))
    train = count_flops(net, (x, t), backward=True)
    key = f"{cfg.model.name}-{params / 1e6:.2f}M@{resolution}x{resolution}x{channels}"
    return NetworkCost(key, params, fwd, train)


def network_cost(run_config: Mapping[str, Any], resolution: int, channels: int) -> NetworkCost:
    """Cost of the network of a run config dict (only ``model``, ``diffusion`` and ``conditioning`` matter)."""
    part = json.dumps({k: run_config[k] for k in ("model", "diffusion", "conditioning") if k in run_config}, sort_keys=True,
                      default=list)
    key = (_network_key(part), int(resolution), int(channels))
    if key not in _COSTS:
        _COSTS[key] = _count(part, *key[1:])
    return _COSTS[key]


# Feature extractors of the evaluation: name -> (builder on the meta device, input shape).
def _inception() -> nn.Module:
    import torchvision  # heavy: imported only when an Inception study is estimated

    return torchvision.models.inception_v3(weights=None, aux_logits=False, init_weights=False)


EXTRACTORS = {"inception-v3": (_inception, (1, 3, 299, 299)),
              **{name: (functools.partial(net.build, net.feature_dim), (1, *(net.input_shape or (3, 32, 32))))
                 for name, net in FEATURE_NETS.items()}}


@functools.lru_cache(maxsize=None)
def extractor_flops(name: str, train: bool = False) -> int:
    """FLOPs of one image through feature extractor ``name`` (Inception-v3 at 299x299: ~11.4 G);
    ``train``: forward + backward of the classifier (one training image of ``train-features``)."""
    build, shape = EXTRACTORS[name]
    with torch.device("meta"):
        net = build().train(train)
        x = torch.randn(shape)
    return count_flops(net, (x,), backward=train)


#: stabilityai/sd-vae-ft-ema's AutoencoderKL (its config.json): 83.65M parameters, 8x downsampling
SD_VAE = {"in_channels": 3, "out_channels": 3, "latent_channels": 4, "block_out_channels": (128, 256, 512, 512),
          "down_block_types": ("DownEncoderBlock2D",) * 4, "up_block_types": ("UpDecoderBlock2D",) * 4,
          "layers_per_block": 2, "norm_num_groups": 32}


@dataclass(frozen=True)
class VaeCost:
    """FLOPs per image of a latent study's VAE at its image resolution: ``encoder`` (image ->
    posterior moments, once per training image and flip) and ``decoder`` (latent -> image, once per
    scored sample); ``latent`` the latents' ``(resolution, channels)``."""

    params: int
    encoder: int
    decoder: int
    latent: tuple[int, int]


def vae_architecture(config_json: str | None) -> str:
    """The VAE's architecture as a JSON word: :data:`SD_VAE`'s keys read from the study's VAE
    folder's ``config.json`` text when it is there (a rehearsal's tiny stand-in), else
    :data:`SD_VAE` (the folder is downloaded on the cluster only)."""
    found = json.loads(config_json) if config_json else {}
    return json.dumps({k: found.get(k, v) for k, v in SD_VAE.items()})


@functools.lru_cache(maxsize=None)
def vae_cost(resolution: int, architecture: str | None = None) -> VaeCost:
    """The cost of sd-vae-ft-ema (:data:`SD_VAE`; or ``architecture``, :func:`vae_architecture`) on
    ``resolution``-pixel RGB images, counted on the meta device (at 256 px: encoder 272.7 GFLOP,
    decoder 622.2, latents 32x32x4)."""
    from timestep_lab.models.diffusers import import_diffusers  # an optional dependency: latent studies only

    arch = {k: tuple(v) if isinstance(v, list) else v for k, v in json.loads(architecture).items()} \
        if architecture else SD_VAE
    downsample = 2 ** (len(arch["block_out_channels"]) - 1)
    latent = (resolution // downsample, int(arch["latent_channels"]))
    with torch.device("meta"):
        vae = import_diffusers().AutoencoderKL(**arch).eval()
        x = torch.randn(1, 3, resolution, resolution)
        z = torch.randn(1, latent[1], latent[0], latent[0])
    counters = []
    for fn, arg in ((vae.encode, x), (vae.decode, z)):
        counter = FlopCounterMode(display=False)
        with counter, torch.no_grad():
            fn(arg)
        counters.append(int(counter.get_total_flops()))
    return VaeCost(sum(p.numel() for p in vae.parameters()), counters[0], counters[1], latent)
