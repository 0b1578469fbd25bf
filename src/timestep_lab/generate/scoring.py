"""Scoring models: sampling and evaluation composed, one level above both.

:func:`sample_and_score` samples one model into ``samples.npz`` (+ PNG grid) and scores that file
into ``metrics.json`` in one process: the same files, byte for byte and number for number, as
``sample`` then ``evaluate`` (the metrics are computed from the samples file as written, exactly
as the separate ``evaluate`` reads it), for one process start instead of two.

:func:`evaluate_models` samples each model file (snapshot or ``model.pt``) into a temp folder
with :mod:`timestep_lab.generate.sampling` and scores it with :mod:`timestep_lab.metrics`, giving the
points of an FID-vs-images-seen curve (``fid_progress.json``, format :data:`PROGRESS_FORMAT`).

Must not know: the command line, training, or how either side works inside.
"""

from __future__ import annotations

import logging
import tempfile
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from timestep_lab.artifacts.samples_file import load_samples
from timestep_lab.config import ConfigError, EvalConfig
from timestep_lab.generate.sampling import generate
from timestep_lab.metrics import Reference, evaluate_file, evaluate_samples, load_reference, scoring_spec

__all__ = ["PROGRESS_FORMAT", "sample_and_score", "evaluate_models"]

log = logging.getLogger(__name__)

PROGRESS_FORMAT = "timestep_lab.fid_progress/1"


def sample_and_score(model: str | Path, out_npz: str | Path, out_json: str | Path, reference: str | Path | Reference,
                     sample_cfg: Any, *, cfg: EvalConfig = EvalConfig(), weights: str | Path | None = None,
                     device: Any = "cpu", progress: bool = False, code: Mapping[str, Any] | None = None,
                     **sample_kwargs: Any) -> tuple[dict, dict]:
    """Sample ``model`` into ``out_npz`` (``sample_kwargs``: ``grid_png``, ``fmt``, ``gt_images``,
    ``gt_range``, ``mixed_inference`` of :func:`timestep_lab.generate.sampling.generate`), then score that
    file against ``reference`` into ``out_json`` (``code``: the caller's code identity,
    :mod:`timestep_lab.artifacts.identity`, recorded there). Returns (samples metadata, metrics.json dict).

    The reference is loaded first (or given loaded), and the feature extractor and sample count
    checked against it, so a missing or corrupted reference, wrong weights or too few samples
    fail before any sampling.
    """
    ref = reference if isinstance(reference, Reference) else load_reference(reference)
    scoring_spec(ref, cfg, weights)
    if cfg.num_samples is not None and cfg.num_samples > sample_cfg.num_samples:
        raise ConfigError(f"eval.num_samples={cfg.num_samples} but only sample.num_samples={sample_cfg.num_samples} "
                          f"samples are drawn")
    info = generate(model, out_npz, sample_cfg, device=device, progress=progress, **sample_kwargs)
    # scored from the file as written (not the in-memory images), as `evaluate` would read it
    res = evaluate_file(out_npz, ref, out_json, cfg=cfg, weights=weights, device=device, progress=progress, code=code)
    return info, res


def evaluate_models(models: Sequence[str | Path], reference: str | Path, sample_cfg_for: Callable[[Path], Any], *,
                    cfg: EvalConfig = EvalConfig(), weights: str | Path | None = None, device: Any = "cpu",
                    progress: bool = False, on_point: Callable[[dict[str, Any]], None] | None = None,
                    code: Mapping[str, Any] | None = None) -> list[dict[str, Any]]:
    """Sample each model file (snapshot or model.pt) into a temp folder and score it.

    ``sample_cfg_for(model_path) -> SampleConfig``. Returns one point per model, sorted by
    images seen: ``{nimg, kimg, model, model_sha256, fid: {tool: value}, kid: {tool: value},
    precision, recall, label, ...protocol, records}``. ``on_point(point)`` is called as each one
    is scored (live curves: :func:`timestep_lab.artifacts.events.add_fid_point`).
    """
    ref = load_reference(reference)
    points = []
    with tempfile.TemporaryDirectory(prefix="tl-snapshots-") as tmp:
        for i, model in enumerate(models):
            npz = Path(tmp) / f"samples-{i}.npz"
            generate(model, npz, sample_cfg_for(Path(model)), device=device, progress=progress)
            images, _, meta = load_samples(npz)
            res = evaluate_samples(images, ref, cfg=cfg, weights=weights, samples_meta=meta, device=device, code=code)
            npz.unlink()
            by_tool = lambda metric: {r["tool"]: r["value"] for r in res["records"] if r["metric"] == metric}  # noqa: E731
            points.append({"nimg": res.get("nimg", 0), "kimg": res.get("kimg", 0.0), "model": str(model),
                           "model_sha256": meta.get("model_sha256"), "label": res["label"], "fid": by_tool("fid"),
                           "kid": by_tool("kid_mean"), "precision": res["precision"], "recall": res["recall"],
                           **res["protocol"], "records": res["records"]})
            log.info("%s (%.1f kimg): %s = %s", Path(model).name, points[-1]["kimg"], res["label"],
                     ", ".join(f"{v:.4g} ({t})" for t, v in points[-1]["fid"].items()))
            if on_point is not None:
                on_point(points[-1])
    return sorted(points, key=lambda p: (p["nimg"], p["model"]))
