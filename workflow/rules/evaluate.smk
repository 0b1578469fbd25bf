# Sampling and FID/KID: reference statistics once per data set and feature extractor, then
# samples and metrics per run (one job each: rule sample_score), and FID against images seen for runs followed during training.
# Every value reaches the shell quoted ({...:q}); multi-argument params are lists (common.smk).


rule train_features:
    """A feature extractor trained here (digits-cnn, mnist-cnn): "FID (digits-CNN features)",
    "FID (mnist-cnn features)". Only when evaluation.extractor names one (feature_weights())."""
    input:
        train=manifest(config["data"]["train_split"]),
        test=manifest(config["data"]["test_split"] or "test"),
    output:
        f"{RES}/eval/{config['evaluation']['extractor']}.pt",
    params:
        arithmetic=ARITHMETIC,
        extractor=config["evaluation"]["extractor"],
        train=parent_dir("train"),
        test=parent_dir("test"),
    log:
        f"{LOGS}/train_features/train_features.log",
    benchmark:
        f"{BENCH}/train_features/train_features.tsv",
    threads: config["resources"]["threads"]
    conda:
        "../../envs/conda.yaml"
    shell:
        "python -m timestep_lab train-features --extractor={params.extractor:q} --data={params.train:q}"
        " --test-data={params.test:q} --out={output:q} --threads={threads} > {log:q} 2>&1"


rule reference_stats:
    input:
        data=manifest(config["data"]["train_split"]),
        weights=feature_weights_input(),
    output:
        f"{RES}/eval/reference.npz",
    params:
        arithmetic=ARITHMETIC,
        data=parent_dir("data"),
        extractor=config["evaluation"]["extractor"],
        weights=weights_arg(),
        max_images=lambda wc: W.opt("--max-images", config["evaluation"]["reference_max_images"]),
    log:
        f"{LOGS}/reference_stats/reference_stats.log",
    benchmark:
        f"{BENCH}/reference_stats/reference_stats.tsv",
    threads: config["resources"]["threads"]
    resources:
        **gpu_resources(),
    conda:
        "../../envs/conda.yaml"
    shell:
        "python -m timestep_lab reference-stats --data={params.data:q} --extractor={params.extractor:q} {params.weights:q}"
        " {params.max_images:q} --out={output:q} --threads={threads} --no-progress > {log:q} 2>&1"


rule floor:
    """The study's FID floor (docs/methods.md §9.7): the held-out split scored against the training
    reference with the same extractor and tools, evaluation.num_samples images (the split's size if
    smaller), a bootstrap interval; only for a study with data.test_split."""
    input:
        data=manifest(config["data"]["test_split"] or "test"),
        reference=f"{RES}/eval/reference.npz",
        weights=feature_weights_input(),
    output:
        FLOOR,
    params:
        arithmetic=ARITHMETIC,
        data=parent_dir("data"),
        weights=weights_arg(),
        num_samples=W.opt("--num-samples", W.fid_sample_count(config["evaluation"])),
        progress_samples=W.opt("--progress-samples", config["evaluation"].get("progress_num_samples")),
    log:
        f"{LOGS}/floor/floor.log",
    benchmark:
        f"{BENCH}/floor/floor.tsv",
    threads: config["resources"]["threads"]
    resources:
        **gpu_resources(),
    conda:
        "../../envs/conda.yaml"
    shell:
        "python -m timestep_lab floor --data={params.data:q} --reference={input.reference:q} {params.weights:q}"
        " {params.num_samples:q} {params.progress_samples:q} --out={output:q} --threads={threads} --no-progress"
        " > {log:q} 2>&1"


rule sample_score:
    """Sample a run and score the samples in one job (one process start, not two): samples.npz,
    the PNG grid and metrics.json stay separate outputs, the same files `sample` then `evaluate`
    write (tests/test_metrics.py)."""
    input:
        model=lambda wc: model_input(wc.run),
        runcfg=lambda wc: run_yaml(wc.run),
        reference=f"{RES}/eval/reference.npz",
        weights=feature_weights_input(),
    output:
        npz=f"{RES}/runs/{{run}}/samples.npz",
        png=f"{RES}/runs/{{run}}/samples.png",
        metrics=f"{RES}/runs/{{run}}/metrics.json",
    params:
        arithmetic=ARITHMETIC,
        model=lambda wc: model_path(wc.run),
        fmt=lambda wc: checkpoint_args(wc.run),
        weights=weights_arg(),
        sets=lambda wc: eval_sample_overrides(wc.run),
        runcfg=run_config_opt,
    log:
        f"{LOGS}/sample_score/{{run}}.log",
    benchmark:
        f"{BENCH}/sample_score/{{run}}.tsv",
    threads: config["resources"]["threads"]
    resources:
        **gpu_resources(),
    conda:
        "../../envs/conda.yaml"
    shell:
        "python -m timestep_lab sample-score --model={params.model:q} {params.fmt:q} --out={output.npz:q}"
        " --grid={output.png:q} {params.sets:q} --reference={input.reference:q} {params.weights:q}"
        " --metrics={output.metrics:q} {params.runcfg:q} --threads={threads} --no-progress > {log:q} 2>&1"


rule evaluate_progress:
    """FID against images seen: sample and score every snapshot of a run."""
    input:
        snapshots=f"{RES}/runs/{{run}}/snapshots",
        runcfg=lambda wc: run_yaml(wc.run),
        reference=f"{RES}/eval/reference.npz",
        weights=feature_weights_input(),
    output:
        f"{RES}/runs/{{run}}/fid_progress.json",
    params:
        arithmetic=ARITHMETIC,
        weights=weights_arg(),
        sets=lambda wc: eval_sample_overrides(wc.run, progress=True)
        + ([] if config["evaluation"].get("progress_kid_pr", True)
           else ["--set", "eval.kid=false", "--set", "eval.precision_recall=false"]),
        events=lambda wc: f"{LOGS}/tensorboard/{wc.run}",  # beside the run's training curves
        runcfg=run_config_opt,
    log:
        f"{LOGS}/evaluate_progress/{{run}}.log",
    benchmark:
        f"{BENCH}/evaluate_progress/{{run}}.tsv",
    threads: config["resources"]["threads"]
    resources:
        **gpu_resources(),
    conda:
        "../../envs/conda.yaml"
    shell:
        "python -m timestep_lab evaluate-snapshots --snapshots={input.snapshots:q} --reference={input.reference:q}"
        " {params.weights:q} {params.sets:q} {params.runcfg:q} --out={output:q} --events={params.events:q} --threads={threads}"
        " --no-progress > {log:q} 2>&1"


rule collect:
    """One tidy table of every metric of the study (read it with pandas); summary.json carries the floor."""
    input:
        metrics=expand(f"{RES}/runs/{{run}}/metrics.json", run=evaluated_runs()),
        progress=expand(f"{RES}/runs/{{run}}/fid_progress.json", run=progress_runs()),
        # runs trained here (a pretrained reference has no training log: asking for one trained it)
        logs=expand(f"{RES}/runs/{{run}}/train_log.jsonl", run=[r for r in evaluated_runs() if r in trained_runs()]),
        floor=floor_input(),
    output:
        metrics=f"{RES}/metrics.csv",
        runs=f"{RES}/runs.csv",
        summary=f"{RES}/summary.json",
        # every comparison the claims read, computed here once; the verdicts job reads them
        comparisons=f"{RES}/comparisons.json",
    params:
        # the study as validated here: collect rebuilds its run table (timestep_lab.workflow.run_table)
        study=json.dumps(config),  # key order kept: run ids slug overrides in their order
        res=lambda wc, output: os.path.dirname(output.summary),  # results/<study>
        floor=lambda wc, input: W.opt("--floor", input.floor[0] if input.floor else None),
    log:
        f"{LOGS}/collect/collect.log",
    benchmark:
        f"{BENCH}/collect/collect.tsv",
    conda:
        "../../envs/conda.yaml"
    shell:
        "python -m timestep_lab collect --study={params.study:q} --results={params.res:q} {params.floor:q}"
        " --metrics={output.metrics:q} --runs={output.runs:q} --summary={output.summary:q}"
        " --comparisons={output.comparisons:q} > {log:q} 2>&1"
