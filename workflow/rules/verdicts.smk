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
        study=STUDY,
        base=lambda wc: W.base_columns(config),
    log:
        f"{LOGS}/verdicts/verdicts.log",
    benchmark:
        f"{BENCH}/verdicts/verdicts.tsv",
    run:
        from timestep_lab.workflow.collect import write_verdicts  # pandas: imported by this job only

        write_verdicts(input.metrics, output[0], runs_csv=input.runs, base=params.base, study=params.study,
                       **{k: input.get(k) for k in ("interference", "consistency", "floor")})
