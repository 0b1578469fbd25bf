"""The study groups (:class:`~timestep_lab.groups.record.StudyGroup`), in report order.

Adding one (docs/design.md#adding-a-study-group): append its record here, write its notebook
``reports/<name>.py`` (its parameters cell names the inputs its record declares) and list it in
``dvc.yaml``'s deps, and give a study config a ``groups.<name>:`` section (the run grid, as any group). The Snakefile plans its runs and
its report, the index links it, the verdicts compare its arms against ``baseline``, the estimate
prices its jobs and ``rehearse`` scales its runs like every other group's; its claims (if any) go
in :mod:`timestep_lab.claims` with ``group="<name>"``.
"""

from __future__ import annotations

from timestep_lab.claims import CONSTANT_BASE, FLOW_BASELINE, FLOW_GROUP, UNIFORM
from timestep_lab.groups.record import StudyGroup

__all__ = ["GROUPS"]

GROUPS: tuple[StudyGroup, ...] = (
    StudyGroup("sampler_comparison", "which timestep sampler / weighting trains fastest (FID vs images seen)?",
               baseline=UNIFORM),
    StudyGroup("schedules", "do the samplers' conclusions hold across noise schedules?", baseline=UNIFORM,
               stratify="schedule"),
    StudyGroup("loss_profile", "the reference model's per-timestep loss, its 10 equal-loss slots and the floor",
               config_key="analyses", report_inputs=("reference_profile", "slots", "verdicts", "optimal"),
               needs="always", rules=("profile_losses", "optimal_profile", "slots"),
               gpu_rules=("profile_losses",)),
    StudyGroup("slot_finetune", "does fine-tuning one slot of timesteps undo the others?", config_key="analyses",
               report_inputs=("interference", "slots", "verdicts", "interference_control"), needs="finetune_runs",
               rules=("interference", "interference_control")),
    StudyGroup("batch_size", "small vs large batch at an equal per-timestep budget",
               baseline={"batch_size": "{base}", "init_from": "none", "total_kimg": "{base}"},
               report_inputs=("tables", "group_profiles", "optimal"), rules=("profile_losses",),
               gpu_rules=("profile_losses",)),
    StudyGroup("timestep_contribution", "which timesteps' predictions matter for the final image?",
               config_key="analyses", report_inputs=("contribution", "summary", "verdicts"), needs="always",
               rules=("contribution", "posterior"), gpu_rules=("contribution",)),
    StudyGroup("prediction_types", "eps, x0, v and mixed prediction heads", baseline={"prediction": "eps"},
               report_inputs=("tables", "prediction_profile"), rules=("profile_predictions",),
               gpu_rules=("profile_predictions",)),
    StudyGroup("consistency", "same noise, same image across seeds and widths; momentum decay",
               baseline=CONSTANT_BASE, report_inputs=("tables", "consistency"), needs="constant_runs",
               rules=("consistency",)),
    StudyGroup(FLOW_GROUP, "the flow-matching trainers' timestep options on rectified flow",
               baseline=FLOW_BASELINE, report_inputs=("tables", "group_run_configs")),
)
