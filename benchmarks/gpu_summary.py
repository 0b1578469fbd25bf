"""Summarise the JSON files of ``benchmarks/gpu_suite.sh``: a Markdown section for
``benchmarks/RESULTS.md`` and the rows for ``timestep_lab.cost.estimate.throughput.MEASURED``.

    python benchmarks/gpu_summary.py WORK_DIR --md summary.md --rows estimate_rows.txt

Reads whichever of ``train_variants.json``, ``sampler_overhead.json``, ``sample_ddim50.json``,
``sample_ddpm.json``, ``fid50k.json`` and ``smoke.txt`` exist; a missing one is listed as not measured.
"""

from __future__ import annotations

import argparse
import datetime
import json
from pathlib import Path

CIFAR10_KEY = "unet-35.75M@32x32x3"  # timestep_lab.cost.estimate NetworkCost.key of DDPM's CIFAR-10 UNet
INCEPTION_FLOPS = 11.43e9  # Inception-v3 at 299x299, timestep_lab.cost.estimate.flops.extractor_flops("inception-v3")


def _load(work: Path, name: str) -> dict | None:
    path = work / name
    return json.loads(path.read_text()) if path.exists() else None


def device_key(gpu: str | None) -> str:
    gpu = (gpu or "").upper()
    return "h200" if "H200" in gpu else "h100" if "H100" in gpu else "a100" if "A100" in gpu else gpu.lower() or "?"


def summarise(work: Path) -> tuple[str, list[dict]]:
    today = datetime.date.today().isoformat()
    tv, so = _load(work, "train_variants.json"), _load(work, "sampler_overhead.json")
    ddim, ddpm, fid = _load(work, "sample_ddim50.json"), _load(work, "sample_ddpm.json"), _load(work, "fid50k.json")
    gpu = (tv or {}).get("gpu") or ((ddim or {}).get("machine") or {}).get("gpu")
    dev = device_key(gpu)
    md = [f"### GPU suite ({gpu or 'no GPU'}, {today})", ""]
    rows: list[dict] = []
    if tv:
        md += [f"{tv['model']} UNet training step, batch {tv['batch']}, {tv['flops_per_step'] / 1e9:.1f} GFLOP/step "
               f"(FlopCounterMode, forward + backward):", "",
               "| variant | ms/step | images/s | x reference-fp32 | MFU (dense bf16 peak) |", "|---|---|---|---|---|"]
        for k, ips in tv["images_per_s"].items():
            mfu = tv["mfu"].get(k)
            rel = tv.get("ratio_to_reference", {}).get(k)
            md.append(f"| {k} | {tv['s_per_step'][k] * 1000:.2f} | {ips:.0f} | {f'{rel:.2f}' if rel else '-'} | "
                      f"{f'{mfu:.1%}' if mfu is not None else '-'} |")
        for k, why in tv.get("skipped", {}).items():
            md.append(f"| {k} | skipped: {why[:80]} | | | |")
        md.append("")
        if tv.get("top_kernels"):
            md += ["Top kernels (MFU under the goal): " + "; ".join(
                f"{e['name'][:60]} {e['self_us'] / 1000:.1f} ms" for e in next(iter(tv["top_kernels"].values()))[:8]),
                ""]
        for variant, precision in (("ours-bf16-compile-cl", "bf16"), ("ours-fp32", "fp32")):
            if variant in tv["images_per_s"] and tv["model"] == "cifar10" and dev != "?":
                rows.append({"model": CIFAR10_KEY, "device": dev, "precision": precision, "work": "train",
                             "step": "train", "images_per_s": round(tv["images_per_s"][variant], 1),
                             "flops_per_image": round(tv["flops_per_step"] / tv["batch"], -7), "measured": today,
                             "source": f"benchmarks/gpu_suite.sh: train_variants.py {variant}, batch {tv['batch']}"})
    else:
        md += ["Training step: not measured", ""]
    if so:
        md += [f"Adaptive sampler step time / uniform (real train loop): **{so.get('adaptive', 0):.3f}** "
               "(goal <= 1.10)", ""]
    for name, s in (("DDIM-50", ddim), ("DDPM", ddpm)):
        if s:
            method = "ddim" if name.startswith("DDIM") else "ddpm"
            ips = s[method]["images_per_s"]["ours"]
            md.append(f"Sampling {name} ({s['steps']} steps run), batch {s['n']}, bf16: {ips:.1f} images/s "
                      f"({ips * s['steps']:.0f} network evaluations/s; plain fp32 loop "
                      f"{s[method]['images_per_s']['reference']:.1f} images/s)")
            if s["model"] != "cifar10" or dev == "?":
                continue
            rows.append({"model": CIFAR10_KEY, "device": dev, "precision": "bf16", "work": "forward",
                         "step": "sample", "images_per_s": round(ips * s["steps"], 1),
                         "flops_per_image": round(tv["flops_per_step"] / tv["batch"] / 3, -7) if tv else None,
                         "measured": today,
                         "source": f"benchmarks/gpu_suite.sh: sample_throughput.py {method}, batch {s['n']}"})
    if fid and "feature_images_per_s" in fid and dev != "?":
        rows.append({"model": "inception-v3", "device": dev, "precision": "fp32", "work": "forward", "step": "features",
                     "images_per_s": round(fid["feature_images_per_s"], 1), "flops_per_image": INCEPTION_FLOPS,
                     "measured": today, "source": "benchmarks/gpu_suite.sh: fid50k_time.py, Inception-v3 features"})
    if fid and "fid50k_s" in fid:
        md += ["", f"One FID-50K ({fid['sample_method']}-{fid['sample_steps']}): {fid['fid50k_s'] / 3600:.2f} h "
                   f"(Inception features {fid['feature_images_per_s']:.0f} images/s per tool)"]
    smoke = work / "smoke.txt"
    md += ["", f"Smoke study with resources.device cuda: {smoke.read_text().strip() if smoke.exists() else 'not run'}"]
    return "\n".join(md) + "\n", rows


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("work", type=Path)
    p.add_argument("--md", type=Path, required=True)
    p.add_argument("--rows", type=Path, required=True)
    args = p.parse_args(argv)
    md, rows = summarise(args.work)
    args.md.write_text(md)
    args.rows.write_text("".join(f"    {json.dumps(r)},\n" for r in rows))
    print(md)
    print(f"# {len(rows)} rows for timestep_lab/cost/estimate/throughput.py MEASURED -> {args.rows}")


if __name__ == "__main__":
    main()
