# timestep-lab study workflow. Thin: configuration, validation and rules live in workflow/.
#   snakemake                                   # the embedded default (digits, CPU)
#   snakemake --configfile config/smoke.yaml    # the CI-sized study
#   snakemake --profile cluster --configfile config/cifar10.yaml
from snakemake.utils import min_version

min_version("8.20")


# The embedded default study, unless a study is given with --configfile: that one is then the whole
# config, here and in every cluster job's own snakemake (which gets the --configfile but not
# --replace-workflow-config, so a default study merged under it would give the jobs other runs and
# inputs than the DAG they were planned in: tests/test_dag.py)
if not workflow.overwrite_configfiles:

    configfile: "config/config.yaml"


include: "workflow/rules/benchmark.smk"
include: "workflow/rules/common.smk"
include: "workflow/rules/data.smk"
include: "workflow/rules/train.smk"
include: "workflow/rules/evaluate.smk"
include: "workflow/rules/analyses.smk"
include: "workflow/rules/verdicts.smk"
include: "workflow/rules/report.smk"
include: "workflow/rules/targets.smk"
include: "workflow/rules/scorecard.smk"
include: "workflow/rules/warmstart.smk"


if BUDGET is not None:  # a budgeted study runs in stages (docs/methods.md §14.5)

    include: "workflow/rules/stage_functions.smk"
    include: "workflow/rules/stages.smk"


rule all:
    default_target: True
    input:
        final_outputs(),
