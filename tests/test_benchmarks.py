"""The benchmarks' --quick modes run and write the JSON they promise (sampler_overhead's quick
mode is tested in test_samplers.py). Timings here are rough by design; only the shape of the
result and the sanity of the ratios are checked."""

from __future__ import annotations

import importlib.util
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT

BENCH = ROOT / "benchmarks"


def run_quick(script: str, tmp_path: Path, *extra: str) -> dict:
    out = tmp_path / f"{script}.json"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
    r = subprocess.run([sys.executable, str(BENCH / f"{script}.py"), "--quick", "--json", str(out), *extra],
                       capture_output=True, text=True, env=env, timeout=600)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
    return json.loads(out.read_text())


def positive_finite(x) -> bool:
    return isinstance(x, (int, float)) and math.isfinite(x) and x > 0


def test_train_step_quick(tmp_path):
    res = run_quick("train_step", tmp_path)
    assert {"model", "device", "batch", "s_per_step", "images_per_s", "ratio_step_time", "ratio_images_per_s",
            "ours", "machine"} <= set(res)
    assert res["model"] == "digits" and res["device"] == "cpu" and res["batch"] == 128
    assert set(res["s_per_step"]) == set(res["images_per_s"]) == {"ours", "reference"}
    assert all(positive_finite(v) for v in [*res["s_per_step"].values(), *res["images_per_s"].values()])
    assert positive_finite(res["ratio_step_time"]) and positive_finite(res["ratio_images_per_s"])
    assert res["ratio_images_per_s"] == pytest.approx(1.0 / res["ratio_step_time"])
    assert res["ours"]["precision"] == "fp32" and res["ours"]["compile"] is False  # CPU: the reference's precision
    assert "mfu" not in res  # MFU only on a GPU


def test_sample_throughput_quick(tmp_path):
    res = run_quick("sample_throughput", tmp_path)
    assert {"model", "device", "n", "steps", "ddpm", "ddim", "ratio_images_per_s", "machine"} <= set(res)
    for method in ("ddpm", "ddim"):
        assert set(res[method]["images_per_s"]) == {"ours", "reference"}
        assert all(positive_finite(v) for v in res[method]["images_per_s"].values())
        assert positive_finite(res["ratio_images_per_s"][method])


def test_fid_throughput_quick(tmp_path):
    res = run_quick("fid_throughput", tmp_path)
    assert {"fid", "ratio_wrapper_to_direct", "ratio_wrapper_to_direct_fastest", "median_s", "min_s",
            "feature_extraction_images_per_s", "max_rel_diff_between_variants"} <= set(res)
    assert positive_finite(res["ratio_wrapper_to_direct"]) and positive_finite(res["ratio_wrapper_to_direct_fastest"])
    assert positive_finite(res["feature_extraction_images_per_s"])
    assert res["max_rel_diff_between_variants"] < 1e-6


def test_ensemble_step_quick_trains_the_same_models(tmp_path):
    """torch.func ensembling of K seeds gives each model the loss it gets trained alone."""
    res = run_quick("ensemble_step", tmp_path)
    assert res["seeds"] == 2 and res["batch"] == 64
    assert set(res["cpu_ms_per_image"]) == {"separate", "ensemble"}
    assert all(positive_finite(v) for v in res["cpu_ms_per_image"].values())
    assert positive_finite(res["images_per_cpu_s_ensemble_over_separate"])
    assert res["max_loss_difference"] < 1e-5  # same arithmetic up to operation order, after 7 steps


def test_mfu_peak_table():
    spec = importlib.util.spec_from_file_location("bench_train_step", BENCH / "train_step.py")
    sys.path.insert(0, str(BENCH))
    try:
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
    finally:
        sys.path.remove(str(BENCH))
    peak = mod.peak_bf16_flops
    assert peak("NVIDIA H100 80GB HBM3") == 989.4e12  # SXM
    assert peak("NVIDIA H100 PCIe") == 756e12
    assert peak("NVIDIA H200") == 989.4e12
    assert peak("NVIDIA A100-SXM4-80GB") == 312e12
    assert peak("NVIDIA H100 NVL") is None and peak("NVIDIA GeForce RTX 4090") is None  # MFU printed as unknown
