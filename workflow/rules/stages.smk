# A budgeted study's stages (docs/methods.md §14.5), included only with a `budget:` block (the
# fixed design's DAG has none of these rules). Stage k's runs are stage 0's (RUNS) plus those the
# plans added; each stage is collected and judged sequentially under results/<study>/stages/<k>/;
# the checkpoint plan_stage reads stage k's verdicts and writes stage k+1's plan; the study's own
# metrics.csv, runs.csv, summary.json and verdicts.json are the last stage's, so every report
# and the index read the whole study. A run keeps its id and folder whichever stage trains it:
# a finished run is never redone. At most budget.max_stages stages: the plan after the last stops.


wildcard_constraints:
    k="[0-9]+",


ruleorder: adopt_collect > collect
ruleorder: adopt_verdicts > verdicts


localrules:
    collect_stage,
    verdicts_stage,
    plan_stage,
    adopt_collect,
    adopt_verdicts,


rule collect_stage:
    """Stage k's tables: collect over stage k's runs only (its estimand: the seeds judged at that look)."""
    input:
        unpack(stage_collect_inputs),
    output:
        metrics=f"{STAGES}/{{k}}/metrics.csv",
        runs=f"{STAGES}/{{k}}/runs.csv",
        summary=f"{STAGES}/{{k}}/summary.json",
        comparisons=f"{STAGES}/{{k}}/comparisons.json",  # the stage's comparisons, which its verdicts read
    params:
        study=UNIVERSE_STUDY,
        res=lambda wc, output: os.path.dirname(os.path.dirname(os.path.dirname(output.summary))),  # results/<study>
        only=stage_only,
        floor=lambda wc, input: W.opt("--floor", input.floor[0] if input.floor else None),
    log:
        f"{LOGS}/collect_stage/{{k}}.log",
    benchmark:
        f"{BENCH}/collect_stage/{{k}}.tsv",
    conda:
        "../../envs/conda.yaml"
    shell:
        "python -m timestep_lab collect --study={params.study:q} --results={params.res:q} {params.floor:q}"
        " --only={params.only:q} --metrics={output.metrics:q} --runs={output.runs:q} --summary={output.summary:q}"
        " --comparisons={output.comparisons:q} > {log:q} 2>&1"


rule verdicts_stage:
    """Stage k's verdicts, judged sequentially (anytime-valid p-values and confidence sequences, §14.1)."""
    input:
        unpack(stage_verdict_inputs),
    output:
        f"{STAGES}/{{k}}/verdicts.json",
    params:
        arithmetic=ARITHMETIC,
        args=lambda wc, input: [*verdicts_args(wc, input), f"--sequential={SEQUENTIAL}"],
    log:
        f"{LOGS}/verdicts_stage/{{k}}.log",
    benchmark:
        f"{BENCH}/verdicts_stage/{{k}}.tsv",
    conda:
        "../../envs/conda.yaml"
    shell:
        "python -m timestep_lab verdicts {params.args:q} --out={output:q} > {log:q} 2>&1"


checkpoint plan_stage:
    """After stage k: stage k+1's plan (the runs it adds, or why the study stops), §14.3."""
    input:
        verdicts=f"{STAGES}/{{k}}/verdicts.json",
        estimate=f"{RES}/estimate.json",
        previous=lambda wc: [f"{STAGES}/{int(wc.k) - 1}/next.json"] if int(wc.k) > 0 else [],
    output:
        f"{STAGES}/{{k}}/next.json",
    params:
        study=json.dumps(config),
        previous=lambda wc, input: W.opt("--previous", input.previous[0] if input.previous else None),
    log:
        f"{LOGS}/plan_stage/{{k}}.log",
    benchmark:
        f"{BENCH}/plan_stage/{{k}}.tsv",
    conda:
        "../../envs/conda.yaml"
    shell:
        "python -m timestep_lab plan-stage --study={params.study:q} --verdicts={input.verdicts:q}"
        " --estimate={input.estimate:q} {params.previous:q} --stage={wildcards.k:q} --out={output:q} > {log:q} 2>&1"


rule adopt_collect:
    """The study's tables are its last stage's."""
    input:
        final_stage_files(["metrics.csv", "runs.csv", "summary.json"]),
    output:
        metrics=f"{RES}/metrics.csv",
        runs=f"{RES}/runs.csv",
        summary=f"{RES}/summary.json",
    params:
        res=lambda wc, output: os.path.dirname(output[0]),  # results/<study>
    log:
        f"{LOGS}/adopt_collect/adopt_collect.log",
    benchmark:
        f"{BENCH}/adopt_collect/adopt_collect.tsv",
    conda:
        "../../envs/conda.yaml"
    shell:
        "cp {input:q} {params.res:q}/ > {log:q} 2>&1"


rule adopt_verdicts:
    """The study's verdicts are its last stage's (judged sequentially)."""
    input:
        final_stage_files(["verdicts.json"]),
    output:
        f"{RES}/verdicts.json",
    params:
        res=lambda wc, output: os.path.dirname(output[0]),  # results/<study>
    log:
        f"{LOGS}/adopt_verdicts/adopt_verdicts.log",
    benchmark:
        f"{BENCH}/adopt_verdicts/adopt_verdicts.tsv",
    conda:
        "../../envs/conda.yaml"
    shell:
        "cp {input:q} {params.res:q}/ > {log:q} 2>&1"
