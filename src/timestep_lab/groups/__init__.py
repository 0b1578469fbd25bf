"""The study groups: one record per group (:mod:`.record`), the registry (:mod:`.entries`).

``GROUPS`` (report order), ``config_groups()`` (the names a study config may
use under ``groups:``) and ``baselines()`` (what the verdicts compare each group against).
Pure Python: the Snakefile imports it at DAG build.
"""

from __future__ import annotations

from typing import Any, Mapping

from timestep_lab.groups.entries import GROUPS
from timestep_lab.groups.record import NEEDS, REPORT_INPUT_KINDS, StudyGroup

__all__ = ["GROUPS", "StudyGroup", "REPORT_INPUT_KINDS", "NEEDS", "RUN_GPU_RULES", "config_groups", "baselines",
           "gpu_rules"]

#: The rules every study runs per trained run or on its data that need a GPU on a cuda study: training,
#: scoring and FID during training, the reference statistics, the floor and, on a latent study, the
#: VAE encoding of its data (what the groups add is in their records)
RUN_GPU_RULES = ("train", "sample_score", "evaluate_progress", "reference_stats", "floor", "encode_latents")


def config_groups() -> tuple[str, ...]:
    """The names a study config may give under ``groups:`` (groups with runs of their own)."""
    return tuple(g.name for g in GROUPS if g.config_key == "groups")


def baselines() -> dict[str, tuple[Mapping[str, Any], str | None]]:
    """Per compared group: its baseline arm's column values and its stratifying column."""
    return {g.name: (g.baseline, g.stratify) for g in GROUPS if g.baseline is not None}


def gpu_rules() -> tuple[str, ...]:
    """Every rule that requests a GPU on a cuda study (the cluster profile asks SLURM for the GPU
    model on these): :data:`RUN_GPU_RULES` and the groups' ``gpu_rules``, once each."""
    return tuple(dict.fromkeys(RUN_GPU_RULES + tuple(r for g in GROUPS for r in g.gpu_rules)))
