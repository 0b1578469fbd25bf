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
