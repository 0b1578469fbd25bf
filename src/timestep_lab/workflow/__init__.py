"""A study as runs and files: what the Snakefile needs, split by concern.

==========================  =========================================================  =====================
module                      holds                                                      imports
==========================  =========================================================  =====================
``runs``                    the groups' run table: axes, ids, overrides -> run configs  config
``spaces``                  each run's space in a latent study: pixel or latent          config
``study``                   + the runs the analyses derive; contribution ranges         config, timeranges
``run_yaml``                ``run.yaml`` with the run-time facts (init model, slots)    config
``snakefile``               launcher, shell flags, schema-error summary                 stdlib
``checked``                 run configs checked at DAG build, once (.snakemake record)  config (torch lazily)
``stages``                  a budgeted study's stage 0, run universe, plan file         claims, artifacts
``stage_plan``              stage k's verdicts + prices -> stage k+1's plan             evidence (scipy)
``collect``                 results -> metrics.csv, runs.csv, summary.json              pandas, studies
``dvc_export``              summary/metrics -> DVC metrics and plots files              pandas
==========================  =========================================================  =====================

This package's ``__init__`` and the first six modules import no torch, pandas or scipy: the
Snakefile imports them when it builds the DAG. ``stage_plan`` is imported by its command
(``python -m timestep_lab plan-stage``) only. ``collect`` and ``dvc_export`` are imported by
their commands (``python -m timestep_lab collect`` / ``dvc-export``) and are not re-exported
here.
"""

from timestep_lab.processes.timeranges import scale_range
from timestep_lab.workflow.checked import check_run_configs
from timestep_lab.workflow.run_yaml import write_run_config
from timestep_lab.workflow.runs import (
    AXES,
    Run,
    arm_columns,
    arm_id,
    base_columns,
    build_runs,
    deep_merge,
    eval_sample,
    fid_sample_count,
    is_latent,
    latent_dir,
    prepared_base,
    prepared_dir,
    run_config,
    run_table,
    scoring_sample,
)
from timestep_lab.workflow.snakefile import config_in_outputs, config_source_error, launcher, opt, schema_error_summary
from timestep_lab.workflow.spaces import LATENT, PIXEL, check_spaces, run_space
from timestep_lab.workflow.study import (
    SUPERRES_RUN,
    check_analysis_needs,
    check_group_names,
    check_spelling,
    contribution_ranges,
    contribution_sample_count,
    reference_run,
    study_runs,
    superres_run,
)

__all__ = [
    "Run",
    "AXES",
    "arm_columns",
    "arm_id",
    "base_columns",
    "build_runs",
    "study_runs",
    "reference_run",
    "superres_run",
    "SUPERRES_RUN",
    "run_config",
    "run_table",
    "eval_sample",
    "fid_sample_count",
    "scoring_sample",
    "deep_merge",
    "scale_range",
    "prepared_base",
    "prepared_dir",
    "latent_dir",
    "is_latent",
    "run_space",
    "check_spaces",
    "PIXEL",
    "LATENT",
    "contribution_ranges",
    "contribution_sample_count",
    "check_group_names",
    "check_spelling",
    "check_analysis_needs",
    "write_run_config",
    "launcher",
    "opt",
    "schema_error_summary",
    "config_source_error",
    "config_in_outputs",
    "check_run_configs",
]
