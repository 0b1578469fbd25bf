"""How fast a device runs a network, from evidence, with the evidence named.

For one kind of work on one device, in this order:

1. a row of :data:`MEASURED`: images per second measured in this repository (model x device x
   precision x work), with the date and the ``benchmarks/RESULTS.md`` section it is reported
   in. To add one: run ``benchmarks/gpu_suite.sh`` on the GPU and copy the rows it prints
   (``estimate_rows.txt``) here;
2. on a GPU, the *measured MFU* of that step kind and precision: a GPU row of :data:`MEASURED`
   (our own code, ``benchmarks/gpu_suite.sh``) gives a model-FLOPs utilisation, ``images/s x
   FLOPs per image / the card's dense peak``, which is carried to this network and card by FLOPs
   and peak (an H100 and an H200 share one peak, so the H200's rows price an H100 at the same
   images/s). The range runs to the published anchors (3.) where they are slower or faster, else
   half to twice the figure. Labelled "measured MFU";
3. on a GPU with no measured row of the step kind, the published anchors of that step kind
   (:mod:`anchors`), each carried to our network and device by FLOPs and peak; the range is the
   slowest to the fastest of them and the central figure their median (the geometric mean of the
   middle two when even);
4. else FLOPs at an *assumed* model-FLOPs utilisation (MFU) of the device's dense peak, labelled
   "assumed MFU 30%", with a range of half to twice that figure.

``work`` is ``train`` (one forward + backward per image, optimizer included) or ``forward`` (one
network evaluation per image); ``step`` says which anchors apply (``train``, ``sample``,
``features``). Models are named by :attr:`NetworkCost.key` (``unet-35.75M@32x32x3``). On the CPU a
study's own measurements price it better than any of this: :mod:`calibration`.

Knows devices and rates; knows nothing of studies or rules.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from timestep_lab.config import ConfigError
from timestep_lab.cost.estimate.anchors import CARDS, scaled_anchors

__all__ = ["Device", "DEVICES", "MEASURED", "Rate", "rate", "device_for", "ASSUMED_SPREAD"]


@dataclass(frozen=True)
class Device:
    name: str
    peak: dict[str, float]  # dense FLOP/s by precision (bf16: tensor cores; fp32: TF32 tensor cores on GPUs)
    assumed_mfu: float  # used only where neither a measured row nor an anchor applies
    gpu: bool = True


def _gpu(key: str) -> Device:
    card = CARDS[key]  # fp32 work runs as TF32 on the tensor cores (PyTorch's default for convolutions)
    return Device(card.name, {"bf16": card.peak["bf16"], "fp32": card.peak["tf32"]}, 0.30)


DEVICES: dict[str, Device] = {
    "h100": _gpu("h100"),
    "h200": _gpu("h200"),
    "a100": _gpu("a100"),
    # one core with two 256-bit FMA units at ~2.5 GHz: 2 x 8 x 2 x 2.5e9 = 80 GFLOP/s fp32; small
    # networks reach ~10 GFLOP/s (the measured digits rows below), hence the low assumed MFU
    "cpu": Device("CPU, one core", {"bf16": 80e9, "fp32": 80e9}, 0.15, gpu=False),
}

#: an assumed MFU is priced from half to twice its figure
ASSUMED_SPREAD = 2.0

MEASURED: list[dict] = [
    {"model": "unet-0.16M@8x8x1", "device": "cpu", "precision": "fp32", "work": "train", "images_per_s": 450.1,
     "measured": "2026-11-22",
     "source": "benchmarks/RESULTS.md (CPU, train_step.py): digits UNet, batch 128, 1 thread, 284.4 ms/step, "
               "shared 2-core VM"},
    {"model": "unet-0.16M@8x8x1", "device": "cpu", "precision": "fp32", "work": "forward", "images_per_s": 1510.0,
     "measured": "2026-11-22",
     "source": "benchmarks/RESULTS.md (CPU, sample_throughput.py): digits UNet, DDPM 50 steps x 256 images, "
               "30.2 images/s, 1 thread"},
    {"model": "unet-0.27M@32x32x1", "device": "cpu", "precision": "fp32", "work": "train", "images_per_s": 120.0,
     "measured": "2026-11-25",
     "source": "benchmarks/RESULTS.md (CPU, mnist): config/mnist.yaml's UNet, batch 64, 1 thread, `train` of "
               "4.03 kimg in 35 CPU-s and 16 kimg in 129 CPU-s (usage lines less start-up); shared 2-core VM"},
    {"model": "unet-0.27M@32x32x1", "device": "cpu", "precision": "fp32", "work": "forward", "images_per_s": 285.0,
     "measured": "2026-11-25",
     "source": "benchmarks/RESULTS.md (CPU, mnist): config/mnist.yaml's UNet, `sample` DDIM 10 steps, 500 vs 16 "
               "samples: 4,840 evaluations in 16.8 CPU-s, 1 thread"},
    {"model": "unet-0.60M@32x32x1", "device": "cpu", "precision": "fp32", "work": "train", "images_per_s": 67.0,
     "measured": "2026-11-25",
     "source": "benchmarks/RESULTS.md (CPU, mnist): config/mnist.yaml's 24-channel consistency run, batch 64, "
               "1 thread, `train` of 2.05 kimg in 30.4 CPU-s"},
    {"model": "unet-0.60M@32x32x1", "device": "cpu", "precision": "fp32", "work": "forward", "images_per_s": 147.0,
     "measured": "2026-11-25",
     "source": "benchmarks/RESULTS.md (CPU, mnist): the same network, `sample` DDIM 10 steps, 500 vs 16 samples: "
               "4,840 evaluations in 32.9 CPU-s, 1 thread"},
    {"model": "mnist-cnn", "device": "cpu", "precision": "fp32", "work": "train", "images_per_s": 1560.0,
     "measured": "2026-11-25",
     "source": "benchmarks/RESULTS.md (CPU, mnist): `train-features --extractor mnist-cnn`, 15 epochs of 4,000 "
               "images in 38.4 CPU-s, 1 thread"},
    # GPU rows (benchmarks/gpu_suite.sh on a lent H200, benchmarks/RESULTS.md "GPU suite on one NVIDIA H200"): each
    # names its step kind and the FLOPs per image it was counted at (FlopCounterMode), which give its MFU
    {"model": "unet-35.75M@32x32x3", "device": "h200", "precision": "bf16", "work": "train", "step": "train",
     "images_per_s": 2627.1, "flops_per_image": 37.32e9, "measured": "2026-11-26",
     "source": "benchmarks/RESULTS.md (NVIDIA H200, train_variants.py): DDPM's CIFAR-10 UNet, batch 128, "
               "bf16 + torch.compile + channels_last (what train() runs on CUDA with compile: true), 48.72 ms/step, "
               "9.9% of the dense bf16 peak; torch 2.11"},
    {"model": "unet-35.75M@32x32x3", "device": "h200", "precision": "fp32", "work": "train", "step": "train",
     "images_per_s": 1918.2, "flops_per_image": 37.32e9, "measured": "2026-11-26",
     "source": "benchmarks/RESULTS.md (NVIDIA H200, train_variants.py): the same step in fp32, eager, "
               "66.73 ms/step"},
    {"model": "unet-35.75M@32x32x3", "device": "h200", "precision": "bf16", "work": "forward", "step": "sample",
     "images_per_s": 8930.0, "flops_per_image": 12.44e9, "measured": "2026-11-26",
     "source": "benchmarks/RESULTS.md (NVIDIA H200, sample_throughput.py): DDPM 100 steps x 500 images in bf16 "
               "autocast, 89.3 images/s = 8,930 network evaluations/s (DDIM-50: 8,940)"},
    {"model": "inception-v3", "device": "h200", "precision": "fp32", "work": "forward", "step": "features",
     "images_per_s": 5293.1, "flops_per_image": 11.43e9, "measured": "2026-11-26",
     "source": "benchmarks/RESULTS.md (NVIDIA H200, fid50k_time.py): Inception-v3 pool features of 32x32 "
               "uint8 images resized to 299, batch 500, fp32, random weights"},
]


@dataclass(frozen=True)
class Rate:
    """Seconds per unit of work, its range, and where the figures come from."""

    seconds_per_image: float  # the central figure
    basis: str  # "measured", "published" (anchors), "assumed MFU 30%"
    low: float  # seconds per image at the fast end of the evidence
    high: float  # seconds per image at the slow end
    sources: tuple[tuple[str, str, float], ...] = ()  # (key, description with citation, images/s here) per figure


def _median(values: list[float]) -> float:
    v, n = sorted(values), len(values)
    return v[n // 2] if n % 2 else math.sqrt(v[n // 2 - 1] * v[n // 2])


def rate(model: str, flops_per_image: float, device: str, precision: str, work: str, step: str | None = None) -> Rate:
    """Seconds per image of ``work`` on ``device``: a measured row, else (GPUs) the measured MFU of the
    step kind, else the applicable published anchors, else the FLOP count at the assumed MFU
    (module docstring)."""
    for row in MEASURED:
        if (row["model"], row["device"], row["precision"], row["work"]) == (model, device, precision, work):
            s = 1.0 / row["images_per_s"]
            key = f"measured {row['model']} {row['device']} {row['precision']} {row['work']}"
            return Rate(s, "measured", s, s, ((key, f"measured {row['measured']}: {row['source']}", 1 / s),))
    step = step or ("train" if work == "train" else "sample")
    # a network's anchors are those of its family (model keys start with the model entry's name);
    # the feature extractors' anchors apply to every study
    family = None if step == "features" else ("dit" if model.startswith("dit-") else "unet")
    anchors = scaled_anchors(step, flops_per_image, device, precision, family)
    carried = _measured_mfu(model, flops_per_image, device, precision, work, step)
    if carried:
        s, source = carried
        if anchors:
            ips = [a.images_per_s for a in anchors]
            low, high = min(s, 1.0 / max(ips)), max(s, 1.0 / min(ips))
        else:
            low, high = s / ASSUMED_SPREAD, s * ASSUMED_SPREAD
        return Rate(s, "measured MFU", low, high,
                    (source, *((a.anchor.name, a.anchor.describe(), a.images_per_s) for a in anchors)))
    if anchors:
        ips = [a.images_per_s for a in anchors]
        sources = tuple((a.anchor.name, a.anchor.describe(), a.images_per_s) for a in anchors)
        return Rate(1.0 / _median(ips), "published", 1.0 / max(ips), 1.0 / min(ips), sources)
    dev = DEVICES[device]
    s = flops_per_image / (dev.peak[precision] * dev.assumed_mfu)
    label = f"assumed MFU {dev.assumed_mfu:.0%}"
    text = (f"ASSUMPTION, no measurement and no published figure applies: {label} of {dev.name}'s "
            f"{dev.peak[precision] / 1e12:,.3g} TFLOP/s {precision}, range half to twice that")
    return Rate(s, label, s / ASSUMED_SPREAD, s * ASSUMED_SPREAD, ((f"{label} {device} {precision}", text, 1 / s),))


def _measured_mfu(model: str, flops_per_image: float, device: str, precision: str, work: str,
                  step: str) -> tuple[float, tuple[str, str, float]] | None:
    """Seconds per image of ``work`` at the MFU our code measured for this step kind and precision on
    a GPU (the first such row of :data:`MEASURED`), carried to ``device``'s peak, and its source; None
    on a CPU or where no GPU row of the kind was measured."""
    dev = DEVICES[device]
    if not dev.gpu:
        return None
    for row in MEASURED:
        here = DEVICES[row["device"]]
        if not (here.gpu and row.get("step") == step and row.get("flops_per_image")
                and (row["precision"], row["work"]) == (precision, work)):
            continue
        mfu = row["images_per_s"] * row["flops_per_image"] / here.peak[precision]
        s = flops_per_image / (mfu * dev.peak[precision])
        text = (f"measured MFU {mfu:.1%} of {here.name}'s {here.peak[precision] / 1e12:,.4g} TFLOP/s {precision} "
                f"({row['images_per_s']:,.0f} images/s of {row['model']}, measured {row['measured']}: "
                f"{row['source']}), carried to {model} on {dev.name} by FLOPs and peak")
        return s, (f"measured MFU {step} {precision} ({row['device']}, {row['model']})", text, 1.0 / s)
    return None


def device_for(resources: dict, requested: str | None) -> str:
    """The device key to price a study on: ``requested``, else the study's own (cuda -> its
    ``gpu_model`` when known, else h100; cpu -> cpu)."""
    if requested:
        key = requested.lower()
    elif resources.get("device") == "cuda":
        key = str(resources.get("gpu_model") or "h100").lower()
        key = key if key in DEVICES else "h100"
    else:
        key = "cpu"
    if key not in DEVICES:
        raise ConfigError(f"--gpu: unknown device {requested!r}; known: {', '.join(DEVICES)}")
    return key
