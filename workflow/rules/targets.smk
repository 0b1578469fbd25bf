# Named targets for coarse callers (humans, scripts): `snakemake data`, `snakemake experiments`; dvc.yaml's one
# stage `study` runs `snakemake all dvc_export`.


localrules:
    data,
    experiments,
    dvc_export,


rule data:
    """Prepared data and the evaluation reference."""
    input:
        manifest(config["data"]["train_split"]),
        f"{RES}/eval/reference.npz",


rule experiments:
    """Every run trained, sampled and scored, and every analysis computed."""
    input:
        f"{RES}/metrics.csv",
        f"{RES}/verdicts.json",
        list(verdict_analyses().values()),
        f"{RES}/analyses/interference.json",
        f"{RES}/analyses/prediction_types.json",
        f"{RES}/analyses/consistency.json",
        f"{RES}/analyses/posterior.json",
        f"{RES}/analyses/contribution.json",
        optimal_inputs(),
        expand(f"{RES}/analyses/profiles/{{run}}.json", run=batch_size_runs()),


rule dvc_export:
    """DVC metrics and plots, outside the persisted result folders (dvc.yaml's stage `study` asks for it)."""
    input:
        summary=f"{RES}/summary.json",
        metrics=f"{RES}/metrics.csv",
        profile=f"{RES}/analyses/profiles/reference.json",
    output:
        metrics=f"dvc/{STUDY}/metrics.json",
        fid_progress=f"dvc/{STUDY}/fid_progress.csv",
        loss_profile=f"dvc/{STUDY}/loss_profile.csv",
    log:
        f"{LOGS}/dvc_export/dvc_export.log",
    benchmark:
        f"{BENCH}/dvc_export/dvc_export.tsv",
    conda:
        "../../envs/conda.yaml"
    shell:
        "python -m timestep_lab dvc-export --summary={input.summary:q} --metrics-csv={input.metrics:q}"
        " --profile={input.profile:q} --metrics-out={output.metrics:q} --fid-progress-out={output.fid_progress:q}"
        " --loss-profile-out={output.loss_profile:q} > {log:q} 2>&1"
