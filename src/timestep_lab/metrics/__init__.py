"""FID, KID and precision/recall through torch-fidelity and clean-fid, side by side.

Both libraries compute every number we report (protocol: docs/methods.md 8.3-8.4). The package,
bottom to top:

``features``    the small CNNs that are FID feature extractors (``FEATURE_NETS``: trained here, or
                the rehearsal's random stand-in) and their trainer
``extractors``  the feature extractors (``digits-cnn``, ``mnist-cnn``, ``inception-v3``, the rehearsal's
                ``rehearsal-cnn``), their input form and
                where their weights come from (``download`` fetches missing files)
``fid``         the two library adapters (feature extraction, FID/KID/PR against stored
                statistics) and an independent Fréchet distance for tests
``progress``    a progress bar over a command's stages (one per tool)
``reference``   the reference statistics file ``REF.npz`` (compute once, load lazily)
``score``       images or a ``samples.npz`` -> the ``metrics.json`` record with its protocol

Scoring model snapshots needs sampling too, so it lives one level up in
:mod:`timestep_lab.generate.scoring`. Must not know: sampling, training, models or the command line.
"""

from timestep_lab.metrics.extractors import (
    CF_INCEPTION_FILE,
    EXTRACTORS,
    LABELS,
    TF_INCEPTION_FILE,
    TOOLS,
    CleanFidTrainedCNN,
    FeatureExtractorSpec,
    TorchFidelityTrainedCNN,
    WeightsMissingError,
    keep_pixels,
    load_feature_extractor,
)
from timestep_lab.metrics.fid import clean_fid_metrics, frechet_distance, tool_versions, torch_fidelity_metrics
from timestep_lab.metrics.reference import (
    REFERENCE_FORMAT,
    Reference,
    compute_reference,
    load_reference,
    reference_subset,
)
from timestep_lab.metrics.score import METRICS_FORMAT, bootstrap_fid, evaluate_file, evaluate_samples, sample_features, scoring_spec

__all__ = [
    "reference_subset",
    "EXTRACTORS", "TOOLS", "LABELS", "REFERENCE_FORMAT", "METRICS_FORMAT", "TF_INCEPTION_FILE", "CF_INCEPTION_FILE",
    "WeightsMissingError", "FeatureExtractorSpec", "Reference", "frechet_distance",
    "load_feature_extractor", "compute_reference", "load_reference", "evaluate_samples", "evaluate_file",
    "tool_versions", "torch_fidelity_metrics", "clean_fid_metrics", "TorchFidelityTrainedCNN", "CleanFidTrainedCNN",
    "keep_pixels", "scoring_spec", "sample_features", "bootstrap_fid",
]
