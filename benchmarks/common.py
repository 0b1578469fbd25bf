"""Helpers shared by the benchmarks: timing with interleaved rounds, JSON output, data folders.

Benchmarks print *ratios measured in one run* (ours vs a reference implementation), never
absolute times alone: the machine's speed cancels out, and rounds are interleaved so that load
from other processes hits both sides equally.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time
from pathlib import Path
from typing import Callable

import numpy as np
import torch


def machine() -> dict:
    info = {"platform": platform.platform(), "processor": platform.processor() or platform.machine(),
            "torch": torch.__version__, "threads": torch.get_num_threads()}
    if torch.cuda.is_available():
        info["gpu"] = torch.cuda.get_device_name(0)
    return info


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def interleaved(fns: dict[str, Callable[[], float]], rounds: int) -> dict[str, list[float]]:
    """Call each ``fn`` (which returns seconds per unit) once per round, alternating the order."""
    out: dict[str, list[float]] = {k: [] for k in fns}
    names = list(fns)
    for r in range(rounds):
        for name in (names if r % 2 == 0 else names[::-1]):
            out[name].append(fns[name]())
    return out


def median(xs: list[float]) -> float:
    return statistics.median(xs)


def write_json(path: str | None, obj: dict) -> None:
    if path:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_text(json.dumps(obj, indent=2) + "\n")


def synthetic_prepared(out_dir: Path, n: int, size: int, channels: int, seed: int = 0) -> Path:
    """A prepared-data folder (same on-disk format as ``timestep_lab prepare``) of random images."""
    from timestep_lab.artifacts.io import atomic_write_json, sha256_file

    out_dir.mkdir(parents=True, exist_ok=True)
    images = np.random.default_rng(seed).integers(0, 256, (n, size, size, channels), dtype=np.uint8)
    np.save(out_dir / "images.npy", images)
    atomic_write_json(out_dir / "manifest.json", {
        "dataset": "synthetic", "split": "train", "count": n, "shape": [size, size, channels], "layout": "NHWC",
        "dtype": "uint8", "source": "random", "source_sha256": "", "images_sha256": sha256_file(out_dir / "images.npy")})
    return out_dir


def base_parser(description: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--json", default=None, help="write the results as JSON here")
    p.add_argument("--quick", action="store_true", help="a few seconds in total (CI)")
    p.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    p.add_argument("--device", default="cpu", help="cpu | cuda")
    return p


class Timer:
    def __init__(self, device: torch.device):
        self.device = device

    def __enter__(self):
        sync(self.device)
        self.t0 = time.perf_counter()
        return self

    def __exit__(self, *exc):
        sync(self.device)
        self.seconds = time.perf_counter() - self.t0
