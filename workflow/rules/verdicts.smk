# Both verdicts per claim (docs/methods.md §9.3): the collected metrics, the analyses' effects and
# the study's floor in, verdicts.json out. Its own file: the scorecard reads every group and two analyses.


localrules:
    verdicts,


rule verdicts:
    """Direction and size verdicts per claim (timestep_lab.claims.CLAIMS), Holm across the scorecard."""
    input:
        unpack(verdict_inputs),
    output:
        f"{RES}/verdicts.json",
    params:
        arithmetic=ARITHMETIC,
        args=verdicts_args,
    log:
        f"{LOGS}/verdicts/verdicts.log",
    benchmark:
        f"{BENCH}/verdicts/verdicts.tsv",
    conda:
        "../../envs/conda.yaml"
    shell:
        "python -m timestep_lab verdicts {params.args:q} --out={output:q} > {log:q} 2>&1"
