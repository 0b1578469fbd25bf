# A budgeted study's stage functions (docs/methods.md §14.5): the runs of each stage, from the plans
# the checkpoint plan_stage writes (workflow/rules/stages.smk, included right after this file, only
# with a `budget:` block).

STAGES = f"{RES}/stages"
UNIVERSE_STUDY = json.dumps(WS.staged_study(config, BUDGET.max_seeds))  # collect's run table: every run a stage may add
SEQUENTIAL = json.dumps({"prior_sd": BUDGET.prior_sd,
                         "horizon": BUDGET.max_seeds if BUDGET.calibration == "skew_envelope" else None})


def stage_plan(k):
    """The plan of stage k (k >= 1): the checkpoint's output after stage k - 1 (Snakemake re-plans
    the DAG once it exists)."""
    return WS.read_plan(checkpoints.plan_stage.get(k=k - 1).output[0])


def stage_added(k):
    """The runs stages 1..k added (run ids of ALL_RUNS, in the order added)."""
    return list(stage_plan(k).runs) if k > 0 else []


def last_stage():
    """The stage whose plan stops the study (every plan up to it exists: each get() waits on it)."""
    k = 0
    while WS.read_plan(checkpoints.plan_stage.get(k=k).output[0]).stop is None:
        k += 1
    return k


def stage_collect_inputs(wildcards):
    k = int(wildcards.k)
    added = [r for r in stage_added(k) if r not in RUNS]
    runs = evaluated_runs() + added
    prog = progress_runs() + [r for r in added if ALL_RUNS[r].progress]
    return {"metrics": expand(f"{RES}/runs/{{run}}/metrics.json", run=runs),
            "progress": expand(f"{RES}/runs/{{run}}/fid_progress.json", run=prog),
            "logs": expand(f"{RES}/runs/{{run}}/train_log.jsonl", run=[r for r in runs if r in trained_runs()]),
            "floor": floor_input()}


def stage_only(wildcards):
    """collect's --only: the runs of stage 0's run table and those the plans added."""
    return ",".join(list(RUNS) + [r for r in stage_added(int(wildcards.k)) if r not in RUNS])


def stage_verdict_inputs(wildcards):
    """verdict_inputs with stage k's own tables and comparisons (the analyses and the floor are the study's)."""
    stage = f"{STAGES}/{wildcards.k}"
    return {**verdict_inputs(wildcards), "metrics": f"{stage}/metrics.csv", "runs": f"{stage}/runs.csv",
            "comparisons": f"{stage}/comparisons.json"}


def final_stage_files(names):
    """The last stage's files ``names`` (each copied under the same name into results/<study>/)."""
    return lambda wildcards: [f"{STAGES}/{last_stage()}/{n}" for n in names]


def stage_plan_files(wildcards=None):
    """Every plan written, stage 1's to the one that stopped the study (the index reads them)."""
    return [f"{STAGES}/{k}/next.json" for k in range(last_stage() + 1)]
