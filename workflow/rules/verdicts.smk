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
        base_batch=lambda wc: RUNS["reference"].axes.get("batch_size") if "reference" in RUNS else None,
    log:
        f"{LOGS}/verdicts/verdicts.log",
    benchmark:
        f"{BENCH}/verdicts/verdicts.tsv",
    run:
        from timestep_lab.workflow.collect import write_verdicts  # pandas: imported by this job only

        write_verdicts(input.metrics, output[0], runs_csv=input.runs, base_batch=params.base_batch, study=params.study,
                       **{k: input.get(k) for k in ("interference", "consistency", "floor")})
