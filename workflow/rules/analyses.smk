# The seed paper's analyses (docs/methods.md §3) and the consistency study (4): files in, files out.
# The computations live in timestep_lab.studies; these rules only wire files together.
# Every value reaches the shell quoted ({...:q}); multi-argument params are lists (common.smk).


rule profile_losses:
    """Per-timestep eps-MSE, VLB and gradient-norm variance on a fixed image and noise bank."""
    input:
        model=lambda wc: model_input(wc.run),
        data=lambda wc: run_data(wc.run),  # a latent run's bank is its encoded split's posterior means
    output:
        f"{RES}/analyses/profiles/{{run}}.json",
    params:
        arithmetic=ARITHMETIC,
        model=lambda wc: model_path(wc.run),
        data=parent_dir("data"),
        fmt=lambda wc: checkpoint_args(wc.run),
        bank=lambda wc: profile_args(wc.run),
    log:
        f"{LOGS}/profile_losses/{{run}}.log",
    benchmark:
        f"{BENCH}/profile_losses/{{run}}.tsv",
    wildcard_constraints:
        # a run of the study: never `optimal`, whose profile (optimal_profile) shares the folder; without
        # it Snakemake tries this rule's input functions on run=optimal and prints their KeyError
        run="|".join(re.escape(r) for r in sorted(ALL_RUNS, key=len, reverse=True)),
    threads: config["resources"]["threads"]
    resources:
        **gpu_resources(),
    conda:
        "../../envs/conda.yaml"
    shell:
        "python -m timestep_lab profile --model={params.model:q} {params.fmt:q} --data={params.data:q}"
        " {params.bank:q} --out={output:q} --threads={threads} --no-progress > {log:q} 2>&1"


rule optimal_profile:
    """Per-t losses of the training set's optimal denoiser on the profile bank: the floor under every
    model's loss (docs/methods.md 3.1)."""
    input:
        model=model_input("reference"),
        data=manifest(config["data"]["train_split"]),
    output:
        OPTIMAL_PROFILE,
    params:
        arithmetic=ARITHMETIC,
        model=lambda wc: model_path("reference"),
        fmt=checkpoint_args("reference"),
        data=parent_dir("data"),
        bank=profile_args("optimal"),
    log:
        f"{LOGS}/optimal_profile/optimal_profile.log",
    benchmark:
        f"{BENCH}/optimal_profile/optimal_profile.tsv",
    conda:
        "../../envs/conda.yaml"
    shell:
        "python -m timestep_lab optimal-profile --model={params.model:q} {params.fmt:q} --data={params.data:q}"
        " {params.bank:q} --out={output:q} > {log:q} 2>&1"


rule slots:
    """10 consecutive slots of equal summed eps-MSE of the reference model (seed Table 1), and of its
    excess over the optimal denoiser when that is profiled."""
    input:
        profile=f"{RES}/analyses/profiles/reference.json",
        optimal=optimal_inputs(),
    output:
        f"{RES}/analyses/slots.json",
    params:
        n=AN.get("slots", {}).get("n_slots", 10),
        optimal=lambda wc, input: W.opt("--optimal", input.optimal[0] if input.optimal else None),
    log:
        f"{LOGS}/slots/slots.log",
    benchmark:
        f"{BENCH}/slots/slots.tsv",
    conda:
        "../../envs/conda.yaml"
    shell:
        "python -m timestep_lab slots --profile={input.profile:q} --n-slots={params.n:q} {params.optimal:q}"
        " --out={output:q} > {log:q} 2>&1"


rule interference:
    """Relative loss change of every slot after fine-tuning the reference on one slot (Fig. 2):
    the reference seed's fine-tunes only, one matrix (the paper's figure; no finding rests on it)."""
    input:
        reference=f"{RES}/analyses/profiles/reference.json",
        finetuned=expand(f"{RES}/analyses/profiles/{{run}}.json", run=finetune_runs(reference_seed())),
        slots=f"{RES}/analyses/slots.json",
    output:
        f"{RES}/analyses/interference.json",
    params:
        arithmetic=ARITHMETIC,
        pairs=lambda wc, input: [f"{RUNS[r].extra['slot']}={p}"
                                 for r, p in zip(finetune_runs(reference_seed()), input.finetuned)],
    log:
        f"{LOGS}/interference/interference.log",
    benchmark:
        f"{BENCH}/interference/interference.tsv",
    conda:
        "../../envs/conda.yaml"
    shell:
        "python -m timestep_lab interference --reference={input.reference:q} --finetuned {params.pairs:q}"
        " --slots={input.slots:q} --out={output:q} > {log:q} 2>&1"


rule interference_control:
    """Slot interference relative to the uniform-t control fine-tune of the same seed, paired over
    every seed of analyses.slots.seeds, with 95% intervals (docs/methods.md §3.2, §9.1)."""
    input:
        reference=f"{RES}/analyses/profiles/reference.json",
        finetuned=expand(f"{RES}/analyses/profiles/{{run}}.json", run=finetune_runs()),
        controls=expand(f"{RES}/analyses/profiles/{{run}}.json", run=control_runs()),
        slots=f"{RES}/analyses/slots.json",
    output:
        f"{RES}/analyses/interference_control.json",
    params:
        arithmetic=ARITHMETIC,
        finetuned=lambda wc, input: [f"{RUNS[r].extra['seed']}:{RUNS[r].extra['slot']}={p}"
                                     for r, p in zip(finetune_runs(), input.finetuned)],
        controls=lambda wc, input: [f"{RUNS[r].extra['seed']}={p}" for r, p in zip(control_runs(), input.controls)],
    log:
        f"{LOGS}/interference_control/interference_control.log",
    benchmark:
        f"{BENCH}/interference_control/interference_control.tsv",
    conda:
        "../../envs/conda.yaml"
    shell:
        "python -m timestep_lab interference-control --reference={input.reference:q} --finetuned {params.finetuned:q}"
        " --controls {params.controls:q} --slots={input.slots:q} --out={output:q} > {log:q} 2>&1"


rule contribution:
    """Ground-truth replacement per t range along one shared chain of the super-resolution model
    (run superres), each held-out image's chain conditioned on its own low-resolution copy, with the
    final step only as the control and "none" as the model alone (Fig. 3a, Sec. 2.1; docs/methods.md
    3.4): every arm's samples, grid and metrics, and contribution.json with the intervals."""
    input:
        model=model_input(W.SUPERRES_RUN),
        gt=manifest(config["data"]["test_split"] or config["data"]["train_split"]),
        reference=f"{RES}/eval/reference.npz",
        weights=feature_weights_input(),
    output:
        json=f"{RES}/analyses/contribution.json",
        npz=expand(f"{RES}/analyses/contribution/{{label}}/samples.npz", label=list(CONTRIB_RANGES)),
        png=expand(f"{RES}/analyses/contribution/{{label}}/samples.png", label=list(CONTRIB_RANGES)),
        metrics=expand(f"{RES}/analyses/contribution/{{label}}/metrics.json", label=list(CONTRIB_RANGES)),
    params:
        arithmetic=ARITHMETIC,
        model=lambda wc: model_path(W.SUPERRES_RUN),
        fmt=checkpoint_args(W.SUPERRES_RUN),
        gt=parent_dir("gt"),
        out_dir=lambda wc, output: os.path.dirname(os.path.dirname(output.npz[0])),  # <out_dir>/<label>/samples.npz
        args=contribution_args(),
        weights=weights_arg(),
    log:
        f"{LOGS}/contribution/contribution.log",
    benchmark:
        f"{BENCH}/contribution/contribution.tsv",
    threads: config["resources"]["threads"]
    resources:
        **gpu_resources(),
    conda:
        "../../envs/conda.yaml"
    shell:
        "python -m timestep_lab contribution --model={params.model:q} {params.fmt:q} --gt-data={params.gt:q}"
        " {params.args:q} --reference={input.reference:q} {params.weights:q} --out-dir={params.out_dir:q}"
        " --out={output.json:q} --threads={threads} --no-progress > {log:q} 2>&1"


rule posterior:
    """Posterior-mean coefficients of x0 and x_t over t (Fig. 3b) and the replacement ranges."""
    input:
        model=model_input("reference"),
    output:
        f"{RES}/analyses/posterior.json",
    params:
        arithmetic=ARITHMETIC,
        model=lambda wc: model_path("reference"),
        fmt=checkpoint_args("reference"),
        ranges=[str(x) for lo_hi in AN.get("timestep_contribution", {}).get("ranges", []) for x in lo_hi],
    log:
        f"{LOGS}/posterior/posterior.log",
    benchmark:
        f"{BENCH}/posterior/posterior.tsv",
    conda:
        "../../envs/conda.yaml"
    shell:
        "python -m timestep_lab posterior --model={params.model:q} {params.fmt:q} --ranges {params.ranges:q}"
        " --out={output:q} > {log:q} 2>&1"


rule profile_predictions:
    """Per-t x0 error of the eps, x0, v and mixed models and the winner per t (Sec. 2.2), and each
    one's excess over the optimal denoiser when that is profiled."""
    input:
        models=[model_path(r) for r in prediction_runs().values()],
        data=lambda wc: run_data(next(iter(prediction_runs().values()))),  # their space (they differ in the head only)
        optimal=optimal_inputs(),
    output:
        f"{RES}/analyses/prediction_types.json",
    params:
        arithmetic=ARITHMETIC,
        models=[f"{k}={model_path(r)}" for k, r in prediction_runs().items()],
        data=parent_dir("data"),
        bank=lambda wc, input: profile_args("predictions") + W.opt("--optimal", input.optimal[0] if input.optimal else None),
    log:
        f"{LOGS}/profile_predictions/profile_predictions.log",
    benchmark:
        f"{BENCH}/profile_predictions/profile_predictions.tsv",
    threads: config["resources"]["threads"]
    resources:
        **gpu_resources(),
    conda:
        "../../envs/conda.yaml"
    shell:
        "python -m timestep_lab predictions-profile --models {params.models:q} --data={params.data:q} {params.bank:q}"
        " --out={output:q} --threads={threads} > {log:q} 2>&1"


rule consistency:
    """Same noise, different seeds/widths: paired vs unpaired sample distances, tested over models,
    with the closed-form denoisers as "same early solution" controls (2404.07946; docs/methods.md 4.1)."""
    input:
        samples=[f"{run_dir(r)}/samples.npz" for r in consistency_runs()],
        weights=feature_weights_input(),
        **consistency_control_inputs(),
    output:
        json=f"{RES}/analyses/consistency.json",
        **({"controls": f"{RES}/analyses/consistency_controls.npz"} if AN.get("consistency", {}).get("controls") else {}),
    params:
        arithmetic=ARITHMETIC,
        samples=[f"{r}={run_dir(r)}/samples.npz" for r in consistency_runs()],
        weights=weights_arg() if trained_extractor() else [],
        controls=lambda wc, input, output: consistency_control_args(input, output),
        permutations=AN.get("consistency", {}).get("permutations", 999),
    log:
        f"{LOGS}/consistency/consistency.log",
    benchmark:
        f"{BENCH}/consistency/consistency.tsv",
    conda:
        "../../envs/conda.yaml"
    shell:
        "python -m timestep_lab consistency --samples {params.samples:q} {params.weights:q} {params.controls:q}"
        " --permutations={params.permutations:q} --out={output.json:q} > {log:q} 2>&1"
