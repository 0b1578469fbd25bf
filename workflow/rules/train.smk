# One training job per run of the run table (results/<study>/runs/<run>/). Its live curves
# (TensorBoard event files) go to logs/<study>/tensorboard/<run>/: `tensorboard --logdir
# logs/<study>/tensorboard` watches the study (not a DVC out; the run's records are train_log.jsonl).


localrules:
    run_config,
    collect,


rule run_config:
    """The run's config file: every hyperparameter arrives through params, so changing one
    reruns exactly the runs it affects."""
    input:
        unpack(run_config_inputs),
    output:
        f"{RES}/runs/{{run}}/run.yaml",
    params:
        # the run's whole config, one JSON word: a changed hyperparameter reruns exactly this run
        config=lambda wc: json.dumps(ALL_RUNS[wc.run].config),  # key order kept: it is the order of run.yaml
        args=run_config_args,
    log:
        f"{LOGS}/run_config/{{run}}.log",
    benchmark:
        f"{BENCH}/run_config/{{run}}.tsv",
    conda:
        "../../envs/conda.yaml"
    shell:
        "python -m timestep_lab run-config --config-json={params.config:q} {params.args:q} --out={output:q} > {log:q} 2>&1"


rule train:
    """`exec`: the shell becomes the training process, so a SIGTERM to the job's processes (SLURM's
    time-limit warning, workflow/profiles/cluster) reaches training without killing a shell
    between it and Snakemake first; training saves its state and exits with status 75, and the
    job is resubmitted (`retries`)."""
    input:
        cfg=f"{RES}/runs/{{run}}/run.yaml",
        data=lambda wc: run_data(wc.run),
        init=init_model,
    output:
        model=f"{RES}/runs/{{run}}/model.pt",
        log=f"{RES}/runs/{{run}}/train_log.jsonl",
        snapshots=directory(f"{RES}/runs/{{run}}/snapshots"),
    params:
        arithmetic=ARITHMETIC,
        out=lambda wc: run_dir(wc.run),
        events=lambda wc: f"{LOGS}/tensorboard/{wc.run}",
        launcher=lambda wc, threads: W.launcher(config["resources"]["gpus"]),
    log:
        f"{LOGS}/train/{{run}}.log",
    benchmark:
        f"{BENCH}/train/{{run}}.tsv",
    threads: config["resources"]["threads"]
    resources:
        **train_resources(),
    conda:
        "../../envs/conda.yaml"
    shell:
        "exec {params.launcher:q} train --config={input.cfg:q} --out={params.out:q} --threads={threads}"
        " --set=train.on_nonfinite=record --events={params.events:q} --no-progress > {log:q} 2>&1"
