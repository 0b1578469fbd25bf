"""What a study group is: one :class:`StudyGroup` record per group, read by every layer.

A *study group* is a question a study asks with its own runs (``groups.<name>`` of a study config:
the sampler comparison, the prediction types, ...) or with an analysis of the reference model
(``analyses.<key>``: the loss profile, the slot fine-tunes, the timestep contribution). Its record
says, in one place, what the rule files, the verdicts, the reports, the cluster profile and the
estimate used to re-derive each on their own: the arm its comparisons are made against, the report
notebook and the inputs it declares, when the study has what the report needs, and the jobs the
group adds (with the ones that need a GPU).

Pure Python (the Snakefile reads it at DAG build).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

__all__ = ["StudyGroup", "REPORT_INPUT_KINDS", "NEEDS"]

#: The named inputs a report notebook may declare (``report_inputs``); workflow/rules/report.smk
#: turns each into the notebook's parameters and files:
#:   ``tables``               metrics_csv, runs_csv, summary, verdicts (the collected tables)
#:   ``verdicts``, ``summary``  one of them alone
#:   ``reference_profile``    profile: the reference model's per-t loss profile
#:   ``slots``                slots: the 10 equal-loss slots
#:   ``optimal``              optimal: the optimal denoiser's profile (when the study computes it)
#:   ``interference``         interference: the slot fine-tunes' interference matrix
#:   ``interference_control`` interference_control: against the uniform-t controls (when the study has them)
#:   ``group_profiles``       profiles: the per-t loss profile of every run of the group
#:   ``group_run_configs``    run_configs: every run's run.yaml of the group
#:   ``prediction_profile``   profile: the prediction-types analysis
#:   ``consistency``          consistency: the consistency analysis (+ controls: its closed-form controls' samples)
#:   ``contribution``         contribution, posterior: the timestep-contribution analysis
REPORT_INPUT_KINDS = ("tables", "verdicts", "summary", "reference_profile", "slots", "optimal", "interference",
                      "interference_control", "group_profiles", "group_run_configs", "prediction_profile", "consistency", "contribution")

#: When a study has what a group's report compares (workflow/rules/report.smk plans the report
#: only then; its claims read "not run" otherwise):
#:   ``group_runs``        the study has runs in ``groups.<name>``
#:   ``constant_runs``     ... and some of them train with a constant optimizer schedule
#:   ``finetune_runs``     the study runs the slot fine-tunes (``analyses.slots.finetune``)
#:   ``always``            every study (analyses of the reference model)
NEEDS = ("group_runs", "constant_runs", "finetune_runs", "always")


@dataclass(frozen=True)
class StudyGroup:
    """One study group.

    ``name``: its key in the study config (``groups.<name>``, or the analysis it reports) and its
    report's name (``reports/<report>.py``, ``report`` defaults to ``name``). ``question``: what it
    asks, one line (the README's table and the index). ``config_key``: ``groups`` (runs of its own)
    or ``analyses``. ``baseline``: the arm every other arm of the group is compared with, as column
    values of the run table (timestep_lab.workflow.ARM_COLUMNS and the axes; ``"{base}"`` is the
    study's own value); None for a group that is not compared arm by arm. ``stratify``: a column
    whose values are compared separately (uniform vs the others within each noise schedule).
    ``report_inputs``: the named inputs its notebook declares (:data:`REPORT_INPUT_KINDS`).
    ``needs``: when the study has what its report compares (:data:`NEEDS`). ``rules``: the jobs
    it adds beyond every run's training and scoring; ``gpu_rules``: which of those need a GPU
    (the cluster profile requests one for them).
    """

    name: str
    question: str
    config_key: str = "groups"
    baseline: Mapping[str, Any] | None = None
    stratify: str | None = None
    report: str = ""
    report_inputs: tuple[str, ...] = ("tables",)
    needs: str = "group_runs"
    rules: tuple[str, ...] = ()
    gpu_rules: tuple[str, ...] = field(default=())

    def __post_init__(self) -> None:
        if not self.report:
            object.__setattr__(self, "report", self.name)
        unknown = [k for k in self.report_inputs if k not in REPORT_INPUT_KINDS]
        if unknown:
            raise ValueError(f"study group {self.name}: unknown report input(s) {unknown}; "
                             f"known: {', '.join(REPORT_INPUT_KINDS)}")
        if self.needs not in NEEDS:
            raise ValueError(f"study group {self.name}: needs={self.needs!r}; known: {', '.join(NEEDS)}")
        if self.config_key not in ("groups", "analyses"):
            raise ValueError(f"study group {self.name}: config_key={self.config_key!r}; groups or analyses")
        if not set(self.gpu_rules) <= set(self.rules):
            raise ValueError(f"study group {self.name}: gpu_rules {sorted(set(self.gpu_rules) - set(self.rules))} "
                             f"are not among its rules")
