# Raw data -> prepared folders (uint8 array + manifest) under data.prepared. DVC tracks data/.


rule prepare_data:
    output:
        manifest=f"{PREPARED}/{{name}}-{{split}}/manifest.json",
        images=f"{PREPARED}/{{name}}-{{split}}/images.npy",
    params:
        dataset=config["data"]["dataset"],
        split=lambda wc: wc.split,
        source=W.opt("--source", config["data"]["source"]),
        resolution=W.opt("--resolution", config["data"]["resolution"]),
        out=lambda wc, output: os.path.dirname(output.manifest),
    log:
        f"{LOGS}/prepare_data/{{name}}-{{split}}.log",
    benchmark:
        f"{BENCH}/prepare_data/{{name}}-{{split}}.tsv",
    conda:
        "../../envs/conda.yaml"
    shell:  # every value quoted (:q); optional flags are lists, empty when unset
        "python -m timestep_lab prepare {params.dataset:q} --split={params.split:q} --out={params.out:q}"
        " {params.source:q} {params.resolution:q} > {log:q} 2>&1"


ruleorder: encode_latents > prepare_data  # "<set>-train-latents" also reads as split "latents" of "<set>-train"


rule encode_latents:
    """A latent study's training split through its VAE, once (docs/methods.md 7.7): the posterior's
    mean and std of every image, and of its flip when the runs flip (base.data.hflip)."""
    input:
        # the VAE folder is a param, as data.source is: downloaded once outside the workflow (README)
        data=f"{PREPARED}/{{name}}-{{split}}/manifest.json",
    output:
        f"{PREPARED}/{{name}}-{{split}}-latents/manifest.json",
    params:
        data=parent_dir("data"),
        vae=config["latent"]["vae"] or "",
        out=lambda wc, output: os.path.dirname(output[0]),
        flip=["--flip"] if (config["base"].get("data") or {}).get("hflip") else [],
        scaling=W.opt("--scaling-factor", config["latent"]["scaling_factor"]),
    log:
        f"{LOGS}/encode_latents/{{name}}-{{split}}.log",
    benchmark:
        f"{BENCH}/encode_latents/{{name}}-{{split}}.tsv",
    threads: config["resources"]["threads"]
    resources:
        **gpu_resources(),
    conda:
        "../../envs/conda.yaml"
    shell:
        "python -m timestep_lab encode-latents --data={params.data:q} --vae={params.vae:q} --out={params.out:q}"
        " {params.flip:q} {params.scaling:q} --threads={threads} --no-progress > {log:q} 2>&1"
