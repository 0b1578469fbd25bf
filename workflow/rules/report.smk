# Reports: notebooks (reports/*.py, jupytext percent format) executed in the report job with the data
# paths as parameters and converted to self-contained HTML; a jinja2 index per study.

VERDICTS = f"{RES}/verdicts.json"  # every report shows the verdicts of the claims it covers
SUMMARY = f"{RES}/summary.json"  # the held-out floor (summary["floor"]) every FID report's regime block reads
TABLES = dict(metrics_csv=f"{RES}/metrics.csv", runs_csv=f"{RES}/runs.csv", summary=SUMMARY, verdicts=VERDICTS)


# Each study group's report (timestep_lab.groups: one record per group) declares named inputs
# (timestep_lab.groups.REPORT_INPUT_KINDS); each name -> {notebook parameter: file(s)} of a group.
REPORT_INPUT_KINDS = {
    "tables": lambda name: dict(TABLES),
    "verdicts": lambda name: {"verdicts": VERDICTS},
    "summary": lambda name: {"summary": SUMMARY},
    "reference_profile": lambda name: {"profile": f"{RES}/analyses/profiles/reference.json"},
    "slots": lambda name: {"slots": f"{RES}/analyses/slots.json"},
    # only where the study computes the optimal denoiser's profile
    "optimal": lambda name: {"optimal": OPTIMAL_PROFILE} if optimal_inputs() else {},
    "interference": lambda name: {"interference": f"{RES}/analyses/interference.json"},
    # only where the study runs the uniform-t controls
    "interference_control": lambda name: (
        {"interference_control": f"{RES}/analyses/interference_control.json"} if control_runs() else {}),
    "group_profiles": lambda name: {"profiles": expand(f"{RES}/analyses/profiles/{{run}}.json", run=group_runs(name))},
    "group_run_configs": lambda name: {"run_configs": expand(f"{RES}/runs/{{run}}/run.yaml", run=group_runs(name))},
    "prediction_profile": lambda name: {"profile": f"{RES}/analyses/prediction_types.json"},
    "consistency": lambda name: {"consistency": f"{RES}/analyses/consistency.json",
                                 **({"controls": f"{RES}/analyses/consistency_controls.npz"}
                                    if AN.get("consistency", {}).get("controls") else {})},
    "contribution": lambda name: {"contribution": f"{RES}/analyses/contribution.json",
                                  "posterior": f"{RES}/analyses/posterior.json"},
}
assert set(REPORT_INPUT_KINDS) == set(G.REPORT_INPUT_KINDS), "a report input kind is not wired here"


REPORTS_INPUTS = {
    entry.report: {k: v for kind in entry.report_inputs for k, v in REPORT_INPUT_KINDS[kind](entry.name).items()}
    for entry in G.GROUPS
    if report_needed(entry)
}
REPORT_NAMES = list(REPORTS_INPUTS)


localrules:
    index,


rule report:
    input:
        unpack(lambda wc: {"notebook": f"reports/{wc.name}.py", **REPORTS_INPUTS[wc.name]}),
    output:
        html=f"{REPORTS}/{{name}}.html",
        ipynb=f"{REPORTS}/{{name}}.ipynb",
    params:
        args=report_params,
    log:
        f"{LOGS}/report/{{name}}.log",
    benchmark:
        f"{BENCH}/report/{{name}}.tsv",
    wildcard_constraints:
        name="|".join(REPORT_NAMES),
    conda:
        "../../envs/conda.yaml"
    shell:
        "python -m timestep_lab report --notebook={input.notebook:q} --out={output.html:q} {params.args:q} > {log:q} 2>&1"


rule index:
    input:
        reports=expand(f"{REPORTS}/{{name}}.html", name=REPORT_NAMES),
        summary=f"{RES}/summary.json",
        verdicts=VERDICTS,
        slots=f"{RES}/analyses/slots.json",
        estimate=f"{RES}/estimate.json",
        template="reports/index.html.j2",
        # a budgeted study's plans (stage_plan_files, workflow/rules/stage_functions.smk); none without budget
        stages=lambda wc: [] if BUDGET is None else stage_plan_files(),
    output:
        f"{REPORTS}/index.html",
    params:
        args=index_args,
    log:
        f"{LOGS}/index/index.log",
    benchmark:
        f"{BENCH}/index/index.tsv",
    conda:
        "../../envs/conda.yaml"
    shell:
        "python -m timestep_lab index --template={input.template:q} --out={output:q} --summary={input.summary:q}"
        " --verdicts={input.verdicts:q} --slots={input.slots:q} --estimate={input.estimate:q}"
        " --reports {input.reports:q} {params.args:q} > {log:q} 2>&1"


rule estimate:
    """What the study should cost, per rule (the study index shows it beside the measured cost):
    priced with this machine's CPU calibration when there is one, without recording this study,
    which is only starting (`estimate` run by hand after the study records it)."""
    input:
        CONFIG_SOURCE,
    output:
        f"{RES}/estimate.json",
    log:
        f"{LOGS}/estimate/estimate.log",
    benchmark:
        f"{BENCH}/estimate/estimate.tsv",
    conda:
        "../../envs/conda.yaml"
    shell:
        "python -m timestep_lab estimate --out={output:q} --no-record -- {input:q} > {log:q} 2>&1"
