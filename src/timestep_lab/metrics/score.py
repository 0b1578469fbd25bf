"""Scoring images (or a ``samples.npz``) against a reference file: the ``metrics.json`` record.

Every metric value is written as one record carrying the full protocol (extractor, counts,
sampler settings read from the samples' metadata, reference file and hash, weights hash, tool
and version, KID subsets) so that a number can never be separated from how it was measured.

Must not know: how the samples were generated (no sampling, no models) -- the sampler settings
come only from the samples file's metadata.
"""

from __future__ import annotations

import logging
import math
import time
from pathlib import Path
from typing import Any, Mapping

import numpy as np
import torch

from timestep_lab.artifacts.io import ArtifactError, atomic_write_json
from timestep_lab.artifacts.samples_file import load_samples
from timestep_lab.config import EvalConfig
from timestep_lab.config.schema import MIN_FID_SAMPLES
from timestep_lab.metrics.extractors import (
    LABELS,
    FeatureExtractorSpec,
    is_feature_net,
    make_spec,
    resolve_weights,
    to_extractor_input,
)
from timestep_lab.metrics.features import load_feature_net
from timestep_lab.metrics.fid import clean_fid_frechet, clean_fid_metrics, tf_features, tool_versions, torch_fidelity_metrics
from timestep_lab.metrics.progress import stages
from timestep_lab.metrics.reference import Reference, load_reference

__all__ = ["METRICS_FORMAT", "evaluate_samples", "evaluate_file", "scoring_spec", "sample_features", "bootstrap_fid"]

log = logging.getLogger(__name__)

METRICS_FORMAT = "timestep_lab.metrics/1"


def scoring_spec(ref: Reference, cfg: EvalConfig, weights: str | Path | None) -> FeatureExtractorSpec:
    """The extractor the reference was computed with; weights must hash to what it recorded and
    give the reference's feature dimension (callers check this before they sample)."""
    name = ref.meta["extractor"]
    if cfg.feature_extractor not in (None, name):
        raise ArtifactError(f"{ref.path}: computed with the {name} extractor, but eval.feature_extractor="
                            f"{cfg.feature_extractor}; set eval.feature_extractor={name} or use a matching reference")
    tools = list(cfg.tools)
    missing = [t for t in tools if t not in ref.meta["tools"]]
    if missing:
        raise ArtifactError(f"{ref.path}: has no {', '.join(missing)} features (computed for {ref.meta['tools']})")
    weights = weights or cfg.feature_weights
    if weights is None and is_feature_net(name):
        weights = next(iter(ref.meta["feature_weights_file"].values()))
    # the reference file recorded the hashes of the (checked) weights it was computed with:
    # the same hash means the same file, so hashing is all that is needed here
    files = resolve_weights(name, weights, tools, cfg.download_weights, cfg.download_timeout_s)
    dim = int(ref.meta["feature_dim"])
    own = 2048 if name == "inception-v3" else int(load_feature_net(next(iter(files.values())), expect=name)[1]["feature_dim"])
    if dim != own:  # the libraries would compare statistics of different sizes (an AssertionError)
        raise ArtifactError(f"{ref.path}: holds {dim}-dimensional features, but the {name} extractor gives {own}; "
                            f"recompute the reference with these weights")
    spec = make_spec(name, files, dim)
    for tool in tools:
        want = ref.meta["feature_weights_sha256"][tool]
        if spec.sha256[tool] != want:
            raise ArtifactError(f"{spec.weights[tool]}: sha256 {spec.sha256[tool][:12]}... differs from the weights "
                                f"{ref.path} was computed with ({want[:12]}...); use the same weights or recompute "
                                f"the reference")
    return spec


def _protocol(spec: FeatureExtractorSpec, ref: Reference, n: int, meta: dict[str, Any],
              code: Mapping[str, Any] | None) -> dict[str, Any]:
    return {
        "feature_extractor": spec.name, "feature_dim": spec.feature_dim, "num_generated": n,
        "num_reference": ref.count, "sampler": meta.get("method"), "steps": meta.get("steps"), "eta": meta.get("eta"),
        "clip_x0": meta.get("clip_x0"), "shift": meta.get("shift"), "ema": meta.get("use_ema"),
        # classifier-free guidance scale (1.0: none; None: samples from before it was recorded)
        "guidance_scale": meta.get("guidance_scale"),
        "seed_range": meta.get("seed_range"), "reference_file": str(ref.path),
        "reference_sha256": ref.sha256, "code": dict(code) if code is not None else None,
        # latent models: the VAE that decoded the samples (folder, weights' sha256, scaling factor)
        "vae": meta.get("vae"),
    }


def evaluate_samples(images_nhwc: np.ndarray, reference: str | Path | Reference, *, cfg: EvalConfig = EvalConfig(),
                     weights: str | Path | None = None, samples_meta: dict[str, Any] | None = None,
                     device: Any = "cpu", progress: bool = False, code: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Score uint8 NHWC images against a reference file with every tool in ``cfg.tools``.
    ``code``: the code identity of the caller (:mod:`timestep_lab.artifacts.identity`), part of every
    record's protocol and of the result (None: not recorded).

    Returns the ``metrics.json`` dict: ``records`` (one per metric and tool, each with the full
    protocol) and convenience fields ``fid``/``kid`` (torch-fidelity), ``fid_clean_fid``/
    ``kid_clean_fid``, ``precision``/``recall``, ``label``, ``nimg``/``kimg`` when known.
    """
    device = torch.device(device)
    ref = reference if isinstance(reference, Reference) else load_reference(reference)
    spec = scoring_spec(ref, cfg, weights)
    meta = samples_meta or {}
    images = np.asarray(images_nhwc)
    if cfg.num_samples is not None:
        if len(images) < cfg.num_samples:
            raise ArtifactError(f"eval.num_samples={cfg.num_samples} but only {len(images)} samples were given")
        images = images[: cfg.num_samples]
    if images.ndim == 4 and list(images.shape[1:3]) != list(ref.meta["image_shape"][:2]):
        raise ArtifactError(f"samples are {list(images.shape[1:])} images, {ref.path} holds "
                            f"{ref.meta['image_shape']} images")
    images = to_extractor_input(images, spec)
    if len(images) < MIN_FID_SAMPLES:
        raise ArtifactError(f"FID needs at least {MIN_FID_SAMPLES} samples (every metric of the protocol is defined "
                            f"from {MIN_FID_SAMPLES}), got "
                            f"{len(images)}")
    if ref.count < MIN_FID_SAMPLES:
        raise ArtifactError(f"{ref.path}: FID needs at least {MIN_FID_SAMPLES} reference images, the file holds "
                            f"{ref.count}")
    versions = tool_versions()
    protocol = _protocol(spec, ref, len(images), meta, code)
    runners = {"torch-fidelity": torch_fidelity_metrics, "clean-fid": clean_fid_metrics}
    records, values = [], {}
    for tool in stages(cfg.tools, "evaluate", progress):
        t0 = time.perf_counter()
        values[tool] = runners[tool](images, ref, spec, cfg, device)
        log.debug("%s: %s in %.2f s", tool, values[tool], time.perf_counter() - t0)
        bad = {m: v for m, v in values[tool].items() if not math.isfinite(float(v))}
        if bad:  # never written, and never as "ok"
            raise ArtifactError(f"{ref.path}: {tool} gives non-finite {', '.join(f'{m}={v}' for m, v in bad.items())} "
                                f"for {meta.get('model') or 'these samples'} against this reference; nothing written")
        for metric, value in values[tool].items():
            rec = {"metric": metric, "value": float(value), "tool": tool, "tool_version": versions[tool],
                   "label": LABELS[spec.name][metric], "feature_weights_sha256": spec.sha256[tool], **protocol}
            if metric.startswith("kid"):
                rec.update(kid_subsets=cfg.kid_subsets, kid_subset_size=min(cfg.kid_subset_size, len(images), ref.count),
                           kid_seed=cfg.kid_seed)
            records.append(rec)
    out: dict[str, Any] = {"format": METRICS_FORMAT, "label": spec.label, "feature_extractor": spec.name,
                           "status": meta.get("status", "ok")}
    tf, cf = values.get("torch-fidelity", {}), values.get("clean-fid", {})
    out.update({"fid": tf.get("fid"), "kid": tf.get("kid_mean"), "fid_clean_fid": cf.get("fid"),
                "kid_clean_fid": cf.get("kid_mean"), "precision": tf.get("precision"), "recall": tf.get("recall")})
    if meta.get("nimg") is not None:  # a pretrained checkpoint records None: how long it trained is unknown
        out.update(nimg=int(meta["nimg"]), kimg=int(meta["nimg"]) / 1000)
    out.update(model=meta.get("model"), model_sha256=meta.get("model_sha256"), code=protocol["code"],
               protocol=protocol, records=records)
    return out


def evaluate_file(samples_npz: str | Path, reference: str | Path | Reference, out_json: str | Path, *, cfg: EvalConfig = EvalConfig(),
                  weights: str | Path | None = None, device: Any = "cpu", progress: bool = False,
                  code: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """``samples.npz`` -> ``metrics.json`` (written atomically; ``code``: as :func:`evaluate_samples`)."""
    images, _, meta = load_samples(samples_npz)
    result = evaluate_samples(images, reference, cfg=cfg, weights=weights, samples_meta=meta, device=device,
                              progress=progress, code=code)
    result["samples_file"] = str(samples_npz)
    atomic_write_json(out_json, result)
    return result


def sample_features(images_nhwc: np.ndarray, reference: str | Path | Reference, *, cfg: EvalConfig = EvalConfig(),
                    weights: str | Path | None = None, device: Any = "cpu") -> np.ndarray:
    """torch-fidelity's features ``[N, D]`` (float64) of uint8 NHWC images, with the extractor and
    weights ``reference`` was computed with: the features its FID is computed from."""
    ref = reference if isinstance(reference, Reference) else load_reference(reference)
    spec = scoring_spec(ref, cfg, weights)
    images = to_extractor_input(np.asarray(images_nhwc), spec)
    return tf_features(images, spec, torch.device(device), cfg.batch_size).astype(np.float64)


def bootstrap_fid(features: dict[str, np.ndarray], reference: str | Path | Reference, *, replicates: int = 200,
                  seed: int = 0, level: float = 0.95) -> dict[str, Any]:
    """Bootstrap over generated samples of the FID of several sample sets drawn with the same seeds.

    Every replicate draws one set of sample indices (with replacement, ``numpy.random.default_rng(seed)``)
    and applies it to every set, so differences between sets are paired. Each FID is clean-fid's
    ``frechet_distance`` of the resampled features' mean and covariance against the reference's
    torch-fidelity statistics (``tf_mu``, ``tf_sigma``); the reference is not resampled.
    A resampled FID is biased upward (duplicated samples act like fewer samples: about +7 on
    359 digits), and its distribution is right-skewed, so the interval is the percentile interval
    shifted by the bootstrap's bias, ``[q_lo - b, q_hi - b]`` with ``b = mean(F*) - F`` (``F`` the
    full-sample value), clipped at 0 for an FID; the *basic* interval ``2 F - q`` would mirror the
    skew and go below 0. Differences between sets are paired and nearly unbiased.

    :param features: ``{name: [N, D]}``, row ``i`` of every set from sample seed ``i``.
    :returns: ``{"replicates", "seed", "level", "fid": {name: {"value", "ci": [lo, hi], "sd"}},
        "diff": {"a-b": {"value", "ci", "sd"}} for every ordered pair (a, b) of names}``.
    """
    ref = load_reference(reference) if isinstance(reference, (str, Path)) else reference  # or anything with arrays
    mu_r, sigma_r = np.asarray(ref.arrays["tf_mu"], np.float64), np.asarray(ref.arrays["tf_sigma"], np.float64)
    names = list(features)
    n = {len(f) for f in features.values()}
    if len(n) != 1 or min(n) < 2:
        raise ValueError(f"every set needs the same number (>= 2) of samples, got {sorted(n)}")
    n_samples = n.pop()

    def fid(f: np.ndarray) -> float:
        return clean_fid_frechet(f.mean(0), np.cov(f, rowvar=False), mu_r, sigma_r)  # clean-fid's own

    full = {k: fid(features[k]) for k in names}
    rng = np.random.default_rng(seed)
    boot = {k: np.empty(replicates) for k in names}
    for b in range(replicates):
        idx = rng.integers(0, n_samples, n_samples)
        for k in names:
            boot[k][b] = fid(features[k][idx])
    q = ((1 - level) / 2, (1 + level) / 2)

    def summary(value: float, draws: np.ndarray, floor: float | None) -> dict[str, Any]:
        bias = float(draws.mean() - value)
        lo, hi = (float(x) - bias for x in np.quantile(draws, q))
        if floor is not None:
            lo, hi = max(lo, floor), max(hi, floor)
        return {"value": value, "ci": [lo, hi], "sd": float(draws.std(ddof=1)), "bias": bias}

    return {"replicates": int(replicates), "seed": int(seed), "level": level, "n": int(n_samples),
            "interval": "bootstrap over generated samples, paired across sets; percentile interval shifted by "
                        "the bootstrap bias",
            "fid": {k: summary(full[k], boot[k], 0.0) for k in names},
            "diff": {f"{a}-{b}": summary(full[a] - full[b], boot[a] - boot[b], None)
                     for a in names for b in names if a != b}}
