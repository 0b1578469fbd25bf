"""What a real run of a study needs that its rehearsal stood in for: data, feature weights, the
pretrained checkpoint, GPUs (the GPU-hours come from ``python -m timestep_lab estimate``, which
the command runs). Each input is checked on disk, relative to the project root.

Pure but for ``Path.exists``: no torch, no Snakemake.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

__all__ = ["real_run_needs"]

# the two Inception-v3 files of evaluation.weights (timestep_lab.metrics.extractors, which imports torch)
INCEPTION_FILES = ("weights-inception-2015-12-05-6726825d.pth", "inception-2015-12-05.pt")


def _state(root: Path, path: str) -> str:
    return "present" if (root / path).exists() else "MISSING"


def real_run_needs(study: Mapping[str, Any], root: Path) -> list[str]:
    """One line per input a real run of ``study`` (validated, schema defaults filled in) reads,
    saying whether it is in place under ``root``, then the GPUs it asks for."""
    data, ev, ref, res = study["data"], study["evaluation"], study.get("reference") or {}, study["resources"]
    lines = []
    if data.get("source"):
        lines.append(f"data: {data['source']} ({data['dataset']}, {_state(root, data['source'])})")
    else:
        lines.append(f"data: {data['dataset']} (bundled with scikit-learn)")
    if ev["extractor"] == "inception-v3":
        folder = ev.get("weights")
        if folder:
            files = ", ".join(f"{name} ({_state(root, str(Path(folder) / name))})" for name in INCEPTION_FILES)
            lines.append(f"Inception-v3 weights in {folder}/: {files}")
        else:
            lines.append("Inception-v3 weights: from the libraries' caches or downloaded on first use "
                         "(set evaluation.weights to a folder for an offline cluster)")
    else:
        lines.append(f"feature extractor: {ev['extractor']} (trained by the workflow)")
    vae = (study.get("latent") or {}).get("vae")
    if vae:
        lines.append(f"VAE: {vae} (a diffusers AutoencoderKL folder, README 'Latent diffusion'; {_state(root, vae)})")
    if ref.get("pretrained"):
        lines.append(f"pretrained reference: {ref['pretrained']} ({ref.get('format', 'timestep_lab')} format, "
                     f"{_state(root, ref['pretrained'])})")
    else:
        lines.append("reference model: trained by the workflow (reference.overrides)")
    if res.get("device") == "cuda":
        gpus = int(res.get("gpus") or 1)
        model = f" {res['gpu_model']}" if res.get("gpu_model") else ""
        launcher = " under torchrun (DDP)" if gpus > 1 else ""
        lines.append(f"GPUs: {gpus}{model} GPU(s) per training job{launcher}, one per sampling, scoring and "
                     f"profiling job; {res.get('threads', 1)} CPU threads and {res.get('mem_mb')} MB per job, "
                     f"{res.get('runtime_min')} min per training job")
    else:
        lines.append(f"compute: CPU jobs, {res.get('threads', 1)} thread(s) each")
    return lines
