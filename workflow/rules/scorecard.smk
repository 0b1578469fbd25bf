# The scorecard across scales (docs/methods.md §9.9): this study beside the other studies'
# results -> reports/scorecard.html (one page for every study; each study's index links it when
# another study's results exist). A named target, not part of `all`: a study alone never waits
# on, or fails because of, another study's files.
#   snakemake scorecard --configfile config/mnist.yaml


rule scorecard:
    """Per claim, each study's verdicts and effect, and whether the claim holds, flips or is
    unresolved as scale grows; each study's scale and measured cost. The other studies are
    `scorecard.studies` (else every results/<study>/verdicts.json); one listed without results
    yet is named on the page as left out. This study runs to its index first (its cost complete)."""
    input:
        study=final_outputs(),
        verdicts=f"{RES}/verdicts.json",
        others=[f"results/{s}/verdicts.json" for s in scorecard_present()],
        template="reports/scorecard.html.j2",
    output:
        html="reports/scorecard.html",
        json="reports/scorecard.json",
    params:
        results=lambda wc: [RES] + [f"results/{s}" for s in scorecard_others()],
    log:
        f"{LOGS}/scorecard/scorecard.log",
    benchmark:
        f"{BENCH}/scorecard/scorecard.tsv",
    conda:
        "../../envs/conda.yaml"
    shell:
        "python -m timestep_lab scorecard --skip-missing --template={input.template:q}"
        " --out={output.html:q} --json={output.json:q} -- {params.results:q} > {log:q} 2>&1"
