# Raw data -> prepared folders (uint8 array + manifest). DVC tracks data/.


rule prepare_data:
    output:
        manifest="data/prepared/{name}-{split}/manifest.json",
        images="data/prepared/{name}-{split}/images.npy",
    params:
        dataset=config["data"]["dataset"],
        source=config["data"]["source"] or "",
        resolution=config["data"]["resolution"] or "",
        out=lambda wc, output: os.path.dirname(output.manifest),
    log:
        "logs/prepare/{name}-{split}.log",
    benchmark:
        f"{BENCH}/prepare_data/{{name}}-{{split}}.tsv",
    conda:
        "../../envs/conda.yaml"
    shell:
        "python -m timestep_lab prepare {params.dataset} --split {wildcards.split} --out {params.out}"
        " $( [ -n '{params.source}' ] && echo --source '{params.source}' )"
        " $( [ -n '{params.resolution}' ] && echo --resolution {params.resolution} ) > {log} 2>&1"
