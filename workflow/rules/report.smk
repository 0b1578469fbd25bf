# Reports: papermill notebooks (reports/*.py, jupytext percent format) executed with the data
# paths as parameters and converted to self-contained HTML; a jinja2 index per study.

VERDICTS = f"{RES}/verdicts.json"  # every report shows the verdicts of the claims it covers
SUMMARY = f"{RES}/summary.json"  # the held-out floor (summary["floor"]) every FID report's regime block reads
TABLES = dict(metrics_csv=f"{RES}/metrics.csv", runs_csv=f"{RES}/runs.csv", summary=SUMMARY, verdicts=VERDICTS)
REPORTS_INPUTS = {
    "sampler_comparison": dict(TABLES),
    "schedules": dict(TABLES),
    "loss_profile": dict(profile=f"{RES}/analyses/profiles/reference.json", slots=f"{RES}/analyses/slots.json",
                         verdicts=VERDICTS, **({"optimal": OPTIMAL_PROFILE} if optimal_inputs() else {})),
    "slot_finetune": dict(
        interference=f"{RES}/analyses/interference.json",
        slots=f"{RES}/analyses/slots.json",
        verdicts=VERDICTS,
        **({"interference_control": f"{RES}/analyses/interference_control.json"} if control_runs() else {}),
    ),
    "batch_size": dict(
        TABLES,
        profiles=expand(f"{RES}/analyses/profiles/{{run}}.json", run=batch_size_runs()),
        **({"optimal": OPTIMAL_PROFILE} if optimal_inputs() else {}),
    ),
    "timestep_contribution": dict(
        contribution=f"{RES}/analyses/contribution.json",
        posterior=f"{RES}/analyses/posterior.json",
        summary=SUMMARY,
        verdicts=VERDICTS,
    ),
    "prediction_types": dict(TABLES, profile=f"{RES}/analyses/prediction_types.json"),
    "consistency": dict(
        TABLES,
        consistency=f"{RES}/analyses/consistency.json",
        # the notebook draws the closed-form controls' samples (consistency.json names the file)
        **({"controls": f"{RES}/analyses/consistency_controls.npz"} if AN.get("consistency", {}).get("controls") else {}),
    ),
}
if group_runs("flow_matching"):  # a study without the group (the paper configs) has no flow report
    REPORTS_INPUTS["flow_matching"] = dict(
        TABLES, run_configs=expand(f"{RES}/runs/{{run}}/run.yaml", run=group_runs("flow_matching")),
    )
# A report of a group, or of an analysis of one, is planned only when the study has what it compares:
# without it there would be nothing to show, or a job failing after all the training; the claims it
# covers read "not run" on the index (verdict_analyses, common.smk).
REPORT_NEEDS = {
    "sampler_comparison": group_runs("sampler_comparison"),
    "schedules": group_runs("schedules"),
    "slot_finetune": finetune_runs(),
    "batch_size": batch_size_runs(),
    "prediction_types": group_runs("prediction_types"),
    "consistency": consistency_runs(),
}
REPORTS_INPUTS = {name: inputs for name, inputs in REPORTS_INPUTS.items() if REPORT_NEEDS.get(name, True)}
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
    output:
        f"{REPORTS}/index.html",
    params:
        study=STUDY,
        config_source=CONFIG_SOURCE,
        results_dir=lambda wc, input: os.path.dirname(input.summary),  # results/<study>: its benchmark files
        logs_dir=LOGS,  # logs/<study>/<rule>/<job>.log: each job's exact CPU (its usage line)
        rules_dir=os.path.join(workflow.basedir, "workflow", "rules"),  # which rules are local (no CPU of their own)
        rehearsal=config.get("rehearsal"),  # a rehearsal's index carries a banner: no number on it is a result
        scales=scorecard_present(),  # other studies with results: the index links reports/scorecard.html
        reproducibility=ARITHMETIC,  # the level asked for, beside the records' own
    log:
        f"{LOGS}/index/index.log",
    benchmark:
        f"{BENCH}/index/index.tsv",
    run:
        from timestep_lab.reporting import render_index

        render_index(input.template, output[0], summary=input.summary, slots=input.slots, verdicts=input.verdicts,
                     estimate=input.estimate, reports=list(input.reports), **dict(params.items()))


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
