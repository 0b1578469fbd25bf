"""How fast a device runs a network: measured rows first, else FLOPs at an assumed MFU.

:data:`MEASURED` holds images per second measured in this repository (model x device x
precision x work), each row with the date it was measured and its source (a benchmark command
and the ``benchmarks/RESULTS.md`` section it is reported in). ``work`` is ``train`` (one
forward + backward per image, optimizer included) or ``forward`` (one network evaluation per
image, as in one reverse-sampling step). Models are named by :attr:`NetworkCost.key`
(``unet-35.75M@32x32x3``).

Where no row matches, the time is ``FLOPs / (peak FLOP/s x MFU)`` with the device's peak dense
rate from :data:`DEVICES` and an *assumed* model-FLOPs utilisation, and every figure priced that
way says so ("assumed MFU 30%"). To add a measurement: run ``benchmarks/gpu_suite.sh`` on the GPU
and copy the rows it prints (``estimate_rows.txt``) into :data:`MEASURED`.

Knows devices and rates; knows nothing of studies or rules.
"""

from __future__ import annotations

from dataclasses import dataclass

from timestep_lab.config import ConfigError

__all__ = ["Device", "DEVICES", "MEASURED", "Rate", "rate", "device_for"]


@dataclass(frozen=True)
class Device:
    name: str
    peak: dict[str, float]  # dense FLOP/s by precision (bf16: tensor cores; fp32: TF32 tensor cores on GPUs)
    assumed_mfu: float  # used only where no measured row matches
    gpu: bool = True


DEVICES: dict[str, Device] = {
    # NVIDIA data sheets, dense (no sparsity); fp32 work runs as TF32 on the tensor cores
    "h100": Device("NVIDIA H100 SXM", {"bf16": 989.4e12, "fp32": 494.7e12}, 0.30),
    "h200": Device("NVIDIA H200", {"bf16": 989.4e12, "fp32": 494.7e12}, 0.30),
    "a100": Device("NVIDIA A100 SXM", {"bf16": 312e12, "fp32": 156e12}, 0.30),
    # one core with two 256-bit FMA units at ~2.5 GHz: 2 x 8 x 2 x 2.5e9 = 80 GFLOP/s fp32; small
    # networks reach ~10 GFLOP/s (the measured digits rows below), hence the low assumed MFU
    "cpu": Device("CPU, one core", {"bf16": 80e9, "fp32": 80e9}, 0.15, gpu=False),
}

MEASURED: list[dict] = [
    {"model": "unet-0.16M@8x8x1", "device": "cpu", "precision": "fp32", "work": "train", "images_per_s": 450.1,
     "measured": "2026-11-22",
     "source": "benchmarks/RESULTS.md (CPU, train_step.py): digits UNet, batch 128, 1 thread, 284.4 ms/step, "
               "shared 2-core VM"},
    {"model": "unet-0.16M@8x8x1", "device": "cpu", "precision": "fp32", "work": "forward", "images_per_s": 1510.0,
     "measured": "2026-11-22",
     "source": "benchmarks/RESULTS.md (CPU, sample_throughput.py): digits UNet, DDPM 50 steps x 256 images, "
               "30.2 images/s, 1 thread"},
    # GPU rows: none measured yet (no GPU in any session so far); see benchmarks/gpu_suite.sh
]


@dataclass(frozen=True)
class Rate:
    """Seconds per unit of work and where the figure comes from."""

    seconds_per_image: float
    basis: str  # "measured 2026-11-22" or "assumed MFU 30%"


def rate(model: str, flops_per_image: float, device: str, precision: str, work: str) -> Rate:
    """Seconds per image of ``work`` on ``device``: a measured row, else the FLOP count at the assumed MFU."""
    for row in MEASURED:
        if (row["model"], row["device"], row["precision"], row["work"]) == (model, device, precision, work):
            return Rate(1.0 / row["images_per_s"], f"measured {row['measured']}")
    dev = DEVICES[device]
    return Rate(flops_per_image / (dev.peak[precision] * dev.assumed_mfu), f"assumed MFU {dev.assumed_mfu:.0%}")


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
