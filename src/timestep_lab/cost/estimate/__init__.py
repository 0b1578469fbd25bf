"""What a study costs before it runs: jobs, images, network evaluations, FLOPs, GPU-hours (with
their range and sources) and disk per Snakemake rule, and the budget to ask a cluster for
(``python -m timestep_lab estimate STUDY.yaml``).

Layers, bottom up: ``dag`` (the jobs Snakemake plans for the study, its validated config and run
configs, from Snakemake's own DAG build), ``study`` (that plan), ``flops`` (FlopCounterMode counts
of the networks), ``anchors`` (published GPU throughput with citations, and how it is carried to our
networks), ``throughput`` (measured images/s, else the anchors, else an assumed MFU), ``rules``
(work per DAG job, by rule kind), ``calibration`` (per-rule CPU fits to the measured studies and
this machine's finished ones), ``budget`` (time limits and resubmissions per training job),
``table`` (prices and layout), ``command`` (the CLI command).
Nothing here runs a job or touches a GPU.
"""

import importlib

# Public name -> submodule. Loaded on first use (PEP 562) so that registering the ``estimate``
# command in the CLI does not import torch (``flops``/``study`` need it; ``--help`` must not).
_WHERE = {
    **dict.fromkeys(("NetworkCost", "count_flops", "extractor_flops", "network_cost"), "flops"),
    **dict.fromkeys(("RuleCost", "Work", "rule_costs", "snapshot_count", "trained_images"), "rules"),
    **dict.fromkeys(("Plan", "load_plan", "plan_from_dict"), "study"),
    **dict.fromkeys(("Job", "StudyDag", "study_dag"), "dag"),
    **dict.fromkeys(("Estimate", "estimate", "format_table", "to_json"), "table"),
    **dict.fromkeys(("DEVICES", "MEASURED", "device_for", "rate"), "throughput"),
    **dict.fromkeys(("ANCHORS", "CARDS", "scaled_anchors"), "anchors"),
    **dict.fromkeys(("Calibration", "Store", "fit", "observe", "measured_studies"), "calibration"),
    **dict.fromkeys(("Advice", "advise"), "budget"),
}
__all__ = list(_WHERE)


def __getattr__(name: str):
    if name not in _WHERE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{_WHERE[name]}"), name)
