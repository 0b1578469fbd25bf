# One training job per run of the run table (results/<study>/runs/<run>/).


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
        config=lambda wc: RUNS[wc.run].config,
        slot=lambda wc: RUNS[wc.run].extra.get("slot"),
        init=init_path,
    log:
        f"{LOGS}/run_config/{{run}}.log",
    benchmark:
        f"{BENCH}/run_config/{{run}}.tsv",
    run:
        W.write_run_config(params.config, output[0], init_from=params.init,
                           slots_file=input.get("slots"), slot=params.slot)


rule train:
    input:
        cfg=f"{RES}/runs/{{run}}/run.yaml",
        data=manifest(config["data"]["train_split"]),
        init=init_model,
    output:
        model=f"{RES}/runs/{{run}}/model.pt",
        log=f"{RES}/runs/{{run}}/train_log.jsonl",
        snapshots=directory(f"{RES}/runs/{{run}}/snapshots"),
    params:
        out=lambda wc: run_dir(wc.run),
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
        "{params.launcher:q} train --config={input.cfg:q} --out={params.out:q} --threads={threads}"
        " --set=train.on_nonfinite=record --no-progress > {log:q} 2>&1"
