"""The FID floor of a study: the held-out split scored against the training-set reference statistics.

Held-out images are real images the model never saw, from the same distribution as the
reference set; their FID is what a generator that samples the data distribution exactly would
score under this protocol (same extractor and weights, same tools, same reference statistics,
nearly the same sample count). A model's final FID is read against it: "112 with a floor of 8"
is early training, "9 with a floor of 8" is at the floor (docs/methods.md §9.7).

Sample count: the final FID's ``evaluation.num_samples`` when the held-out split has that many
images (a seeded subset, :func:`timestep_lab.metrics.reference_subset`), else the whole split;
``sample_count_basis`` says which. FID falls with the sample count (digits: 38 on 100 held-out
images, 9.1 on 359), so a floor on fewer images than the final FID sits above the floor at the
final FID's count: an upper bound of what a perfect generator would score there.

Interval: a bootstrap over the held-out images (resampled with replacement, the reference
statistics fixed), ``replicates`` times with ``numpy.random.default_rng(seed)``; each replicate's
Fréchet distance is :func:`timestep_lab.metrics.frechet_distance` (one routine for both tools;
the point values are each tool's own). A replicate draws a sample from the held-out sample, so
it carries the estimate's small-sample bias twice: on the default study the replicates' median
is 15.4 against a point value of 9.1. The interval is therefore the replicates' 2.5 and 97.5
percentiles *recentred* by that shift, ``q - (median(replicates) - value)``, clipped at 0; it
keeps the replicates' spread and skew. Checked on digits: disjoint 359-image subsets of the
training split scored against the other 1,079 images span 4.3-20.1 (2.5-97.5%), the recentred
interval of the held-out split 2.0-20.7; the plain percentile interval (8.3-27.1) would not
even be centred on the floor.

Output (``floor.json``, format :data:`timestep_lab.artifacts.floor.FLOOR_FORMAT`; docs/design.md#artifacts): per tool one
record ``{"tool", "tool_version", "metric": "fid", "label", "value", "ci": [lo, hi],
"bootstrap_median", "num_samples", "num_reference", "extractor", "feature_weights_sha256",
"reference_file", "reference_sha256"}``. Must not know how a model samples or how runs are organised.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch

from timestep_lab.artifacts.floor import FLOOR_FORMAT
from timestep_lab.artifacts.io import ArtifactError, atomic_write_json
from timestep_lab.config import EvalConfig
from timestep_lab.metrics.extractors import LABELS, to_extractor_input
from timestep_lab.metrics.fid import cf_features, clean_fid_frechet, frechet_distance, tf_features, tool_versions
from timestep_lab.metrics.progress import stages
from timestep_lab.metrics.reference import Reference, load_reference, reference_subset
from timestep_lab.metrics.score import scoring_spec

__all__ = ["BOOTSTRAP_REPLICATES", "BOOTSTRAP_SEED", "compute_floor", "write_floor"]

BOOTSTRAP_REPLICATES = 200
BOOTSTRAP_SEED = 0


def _tool_fid(tool: str, feats: np.ndarray, ref: Reference) -> float:
    """The tool's own FID of ``feats`` against the reference statistics (as its scoring path computes it)."""
    if tool == "torch-fidelity":
        import torch_fidelity
        from torch_fidelity.metric_fid import fid_features_to_statistics, fid_statistics_to_metric

        stats = fid_features_to_statistics(torch.from_numpy(feats))
        ref_stats = {"mu": ref.arrays["tf_mu"], "sigma": ref.arrays["tf_sigma"]}
        return float(fid_statistics_to_metric(stats, ref_stats, False)[torch_fidelity.KEY_METRIC_FID])
    return clean_fid_frechet(np.mean(feats, axis=0), np.cov(feats, rowvar=False), ref.arrays["cf_mu"],
                             ref.arrays["cf_sigma"])


def _bootstrap(feats: np.ndarray, value: float, mu: np.ndarray, sigma: np.ndarray, replicates: int,
               seed: int) -> tuple[list[float], float]:
    """Recentred 95% bootstrap interval of the FID over held-out images resampled with replacement
    (module docstring), and the replicates' median."""
    rng = np.random.default_rng(seed)
    f = feats.astype(np.float64)
    n = len(f)
    vals = []
    for _ in range(replicates):
        s = f[rng.integers(0, n, n)]
        vals.append(frechet_distance(s.mean(axis=0), np.cov(s, rowvar=False), mu, sigma))
    lo, med, hi = np.percentile(vals, [2.5, 50.0, 97.5])
    shift = float(med) - value
    return [max(0.0, float(lo) - shift), float(hi) - shift], float(med)


def compute_floor(images_nhwc: np.ndarray, reference: str | Path | Reference, *, num_samples: int | None,
                  cfg: EvalConfig = EvalConfig(), weights: str | Path | None = None,
                  replicates: int = BOOTSTRAP_REPLICATES, seed: int = BOOTSTRAP_SEED, device: Any = "cpu",
                  data_info: dict[str, Any] | None = None, progress: bool = False,
                  also_at: tuple[int, ...] = ()) -> dict[str, Any]:
    """The floor record (module docstring) of the held-out ``images_nhwc`` (uint8 NHWC).

    ``num_samples``: the final FID's sample count (None: every held-out image). ``also_at``: other
    sample counts (the progress points', ``evaluation.progress_num_samples``) at which each tool's
    record also gives the floor, ``at_counts`` ``{str(n): FID}`` on a seeded subset of n of the same
    images (no interval): a FID at n samples is set against the floor at n (issue 42: a progress
    FID at 128 samples was divided by the floor at 359, and FID falls with the count).
    """
    if replicates < 10:
        raise ArtifactError(f"the floor's bootstrap needs at least 10 replicates, got {replicates}")
    ref = reference if isinstance(reference, Reference) else load_reference(reference)
    spec = scoring_spec(ref, cfg, weights)
    images = np.asarray(images_nhwc)
    total = len(images)
    idx, selection = reference_subset(total, num_samples)
    if num_samples is None:
        basis = f"all {total} held-out images"
    elif total < num_samples:
        basis = f"the held-out split's {total} images: fewer than the final FID's {num_samples} samples"
    else:
        basis = f"{num_samples} held-out images, the final FID's sample count (split of {total})"
    x = to_extractor_input(images[idx], spec)
    if len(x) < 2:
        raise ArtifactError(f"the floor needs at least 2 held-out images, got {len(x)}")
    versions = tool_versions()
    extract = {"torch-fidelity": tf_features, "clean-fid": cf_features}
    stats = {"torch-fidelity": ("tf_mu", "tf_sigma"), "clean-fid": ("cf_mu", "cf_sigma")}
    records = []
    for tool in stages(cfg.tools, "floor", progress):
        feats = extract[tool](x, spec, torch.device(device), cfg.batch_size).astype(np.float32)
        mu, sigma = (np.asarray(ref.arrays[k], dtype=np.float64) for k in stats[tool])
        value = _tool_fid(tool, feats, ref)
        ci, median = _bootstrap(feats, value, mu, sigma, replicates, seed)
        at_counts = {str(int(n)): _tool_fid(tool, feats[reference_subset(len(feats), int(n))[0]], ref)
                     for n in also_at if 2 <= int(n) < len(feats)}
        records.append({
            "tool": tool, "tool_version": versions[tool], "metric": "fid", "label": LABELS[spec.name]["fid"],
            "value": value, "ci": ci, "bootstrap_median": median,
            "num_samples": int(len(x)), "num_reference": ref.count, "extractor": spec.name,
            "feature_weights_sha256": spec.sha256[tool], "reference_file": str(ref.path),
            "reference_sha256": ref.sha256, **({"at_counts": at_counts} if at_counts else {}),
        })
    return {
        "format": FLOOR_FORMAT, "label": spec.label, "metric": "fid", "num_samples": int(len(x)),
        "sample_count_basis": basis, "selection": selection, "data": data_info or {},
        "bootstrap": {"replicates": replicates, "seed": seed,
                      "interval": "95%: replicate percentiles 2.5 and 97.5 minus (replicate median - value), >= 0",
                      "resampled": "held-out images, with replacement; the reference statistics fixed"},
        "reference_file": str(ref.path), "reference_sha256": ref.sha256, "records": records,
    }


def write_floor(images_nhwc: np.ndarray, reference: str | Path, out_json: str | Path, **kw: Any) -> dict[str, Any]:
    """:func:`compute_floor`, written atomically to ``out_json``."""
    result = compute_floor(images_nhwc, reference, **kw)
    atomic_write_json(out_json, result)
    return result
