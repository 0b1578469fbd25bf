"""What a study costs before it runs: jobs, images, network evaluations, FLOPs, GPU-hours and
disk per Snakemake rule (``python -m timestep_lab estimate STUDY.yaml``).

Layers, bottom up: ``study`` (the config as the workflow sees it, and which runs each rule
covers), ``flops`` (FlopCounterMode counts of the networks), ``throughput`` (measured images/s,
else peak FLOP/s x an assumed MFU), ``rules`` (work per rule), ``table`` (prices and layout),
``command`` (the CLI command). Nothing here runs a job or touches a GPU.
"""

import importlib

# Public name -> submodule. Loaded on first use (PEP 562) so that registering the ``estimate``
# command in the CLI does not import torch (``flops``/``study`` need it; ``--help`` must not).
_WHERE = {
    **dict.fromkeys(("NetworkCost", "count_flops", "extractor_flops", "network_cost"), "flops"),
    **dict.fromkeys(("RuleCost", "Work", "rule_costs", "snapshot_count", "trained_images"), "rules"),
    **dict.fromkeys(("Plan", "load_plan", "plan_from_dict"), "study"),
    **dict.fromkeys(("Estimate", "estimate", "format_table", "to_json"), "table"),
    **dict.fromkeys(("DEVICES", "MEASURED", "device_for", "rate"), "throughput"),
}
__all__ = list(_WHERE)


def __getattr__(name: str):
    if name not in _WHERE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{_WHERE[name]}"), name)
