# Configuration, the run table and input functions (no rules here).
# Imports here run at every DAG build: timestep_lab.config and timestep_lab.workflow are torch-
# and pandas-free; jobs that need pandas import it themselves (collect, dvc_export).
import glob
import json
import os
import re
import sys

from snakemake.utils import validate

from timestep_lab import groups as G
from timestep_lab import workflow as W
from timestep_lab.workflow import stages as WS
from timestep_lab.arithmetic import pin as pin_arithmetic
from timestep_lab.config import ConfigError, budget_config, load_yaml
from timestep_lab.config.schema import TRAINED_FEATURE_EXTRACTORS


CONFIG_SOURCE = str((workflow.overwrite_configfiles or workflow.configfiles or ["config"])[-1])
if os.path.isabs(CONFIG_SOURCE) and not os.path.relpath(CONFIG_SOURCE).startswith(".."):
    CONFIG_SOURCE = os.path.relpath(CONFIG_SOURCE)  # a moved or cloned project reruns nothing
if W.config_source_error(CONFIG_SOURCE):  # an input of the estimate job: a brace would be a wildcard
    sys.exit(f"error: {W.config_source_error(CONFIG_SOURCE)}")


def config_error(exc):
    """Exit with one line that starts with the config file."""
    sys.exit(f"error: {exc}" if CONFIG_SOURCE in str(exc) else f"error: {CONFIG_SOURCE}: {exc}")


# Snakemake has read the config files with a lenient YAML reader: a key given twice silently wins,
# and an alias bomb is expanded by whatever walks the config next (the schema check's error
# message). Each file is read again here, strictly and before anything walks it: a duplicated
# key, too deep a nesting or aliases that expand past a small bound are one error line.
for _source in [*(workflow.overwrite_configfiles or workflow.configfiles or [])]:
    try:
        load_yaml(_source)
    except ConfigError as exc:
        sys.exit(f"error: {exc}")

try:  # retired keys first: the schema could only say "unexpected", not what to write instead
    W.check_spelling(config, CONFIG_SOURCE)
    W.check_group_names(config, CONFIG_SOURCE)
    BUDGET = budget_config(config, CONFIG_SOURCE)  # None: the fixed design (docs/methods.md §14)
except ConfigError as exc:
    config_error(exc)
try:
    validate(config, "../schemas/config.schema.yaml", set_default=True)
except Exception as exc:  # snakemake's WorkflowError around a jsonschema ValidationError
    sys.exit(f"error: {CONFIG_SOURCE}: {W.schema_error_summary(str(exc))}")
STUDY = config["study"]
# The study's reproducibility level in this process's environment, before any job starts: every
# job, the warm-start server and a cluster job's own snakemake (which reads this file again)
# inherit it, and `python -m timestep_lab` pins its libraries' CPU code paths from it. Every rule
# that computes numbers has it as a param: it is in none of their inputs, and a changed param
# reruns the job (Snakemake's params trigger), so a switched level recomputes the study.
ARITHMETIC = config["reproducibility"]
pin_arithmetic(os.environ, ARITHMETIC)
RES = f"results/{STUDY}"
REPORTS = f"reports/{STUDY}"
LOGS = f"logs/{STUDY}"
BENCH = f"{RES}/benchmarks"  # one Snakemake benchmark file per rule and job (benchmarks/study_cost.py)

try:
    PREPARED = W.prepared_base(config["data"])  # data.prepared; never the file-system root
    # with budget: stage 0's runs, and ALL_RUNS every run a later stage may add (docs/methods.md §14.5)
    RUNS, ALL_RUNS = WS.run_tables(config, BUDGET, CONFIG_SOURCE)
    W.check_analysis_needs(config, RUNS, CONFIG_SOURCE)  # a study missing a group fails now, not after its training
    CONTRIB_RANGES = W.contribution_ranges(config)  # the contribution arms: label -> replaced t range
    if workflow.is_main_process:  # jobs re-read this file; their runs were checked when the DAG was built
        # registry names and parameters of every run, before any job runs. Checking builds the
        # cheap sampler objects, so it imports torch (2-4 s): only for run configs not recorded
        # as checked in .snakemake/ (a no-op rerun imports no torch); job processes never do.
        W.check_run_configs([(r.id, r.config) for r in RUNS.values()], CONFIG_SOURCE)
except ConfigError as exc:
    config_error(exc)
for _source in [*(workflow.overwrite_configfiles or workflow.configfiles or [])]:  # not where a job writes
    _clash = W.config_in_outputs(str(_source), [RES, REPORTS, LOGS, f"dvc/{STUDY}", PREPARED])
    if _clash:
        sys.exit(f"error: {_clash}")

wildcard_constraints:
    run="[A-Za-z0-9._-]+",


def run_dir(run):
    return f"{RES}/runs/{run}"


def prepared(split):
    return W.prepared_dir(config["data"], split)


def manifest(split):
    """The manifest of a prepared split: the file that says the split is complete."""
    return os.path.join(prepared(split), "manifest.json")


def run_data(run):
    """The manifest of the data ``run`` trains on and is profiled on: its config's ``data.path``,
    the encoded split for a latent run (rule encode_latents), the prepared split for a pixel one
    (each run's space: timestep_lab.workflow.spaces)."""
    return os.path.join(ALL_RUNS[run].config["data"]["path"], "manifest.json")


def parent_dir(key):
    """A param function: the folder holding input ``key`` (e.g. the prepared data folder)."""
    return lambda wildcards, input: os.path.dirname(input[key])


def report_params(wildcards, input):
    """Every input of a report reaches the notebook as a parameter (lists joined by commas), as a
    list of words for ``{params.args:q}`` (each quoted on its own)."""
    parts = ["-p", "results_dir", RES]
    for key, value in input.items():
        if key == "notebook":
            continue
        parts += ["-p", key, ",".join(value) if isinstance(value, list) else value]
    if config.get("rehearsal"):  # every page of a rehearsal says so
        parts += ["--banner", f"REHEARSAL, NOT A RESULT: a scaled-down rehearsal of {config['rehearsal']['of']} on "
                              "fake data and random weights; no number on this page measures anything."]
    return parts


def train_resources():
    r = config["resources"]
    res = {"mem_mb": r["mem_mb"], "runtime": r["runtime_min"]}
    if r["device"] == "cuda":
        res["gpu"] = max(1, r["gpus"])
        if r.get("gpu_model"):
            res["gpu_model"] = r["gpu_model"]
    return res


def gpu_resources():
    r = config["resources"]
    res = {"mem_mb": r["mem_mb"], "runtime": max(10, r["runtime_min"] // 4)}
    if r["device"] == "cuda":
        res["gpu"] = 1
        if r.get("gpu_model"):
            res["gpu_model"] = r["gpu_model"]
    return res


def external(path):
    """An input that lives outside the workflow (raw data, pretrained checkpoints, Inception
    weights): tracked when present; when absent (a dry run on a laptop) the job that needs it
    fails with a message naming the file instead of the whole DAG refusing to build."""
    return [path] if path and os.path.exists(path) else []


def model_path(run):
    """The model file of a run; the reference may be a pretrained checkpoint on disk."""
    if run == "reference" and config["reference"]["pretrained"]:
        return config["reference"]["pretrained"]
    return f"{run_dir(run)}/model.pt"


def model_input(run):
    """``model_path`` as a rule input (external checkpoints only when present)."""
    if run == "reference" and config["reference"]["pretrained"]:
        return external(config["reference"]["pretrained"])
    return [model_path(run)]


def run_yaml(run):
    """The run.yaml of a run trained here as an input list (``[]`` for a pretrained reference): a
    scoring job checks the model it scores against it (``--run-config``)."""
    return [f"{run_dir(run)}/run.yaml"] if run in trained_runs() else []


def run_config_opt(wildcards, input):
    """``--run-config=<run.yaml>``: score the model only as the run it was trained as (or nothing)."""
    return W.opt("--run-config", input.runcfg[0] if input.get("runcfg") else None)


def init_model(wildcards):
    run = ALL_RUNS[wildcards.run]
    return model_input(run.init_from) if run.init_from else []


def trained_runs():
    return [r for r in ALL_RUNS if not (r == "reference" and config["reference"]["pretrained"])]


def evaluated_runs():
    return [r for r, run in RUNS.items() if run.groups]


def progress_runs():
    return [r for r, run in RUNS.items() if run.progress]


def group_runs(group):
    return [r for r, run in RUNS.items() if group in run.groups]


def trained_extractor():
    """Whether the study's feature extractor is a CNN trained here (digits-cnn, mnist-cnn)."""
    return config["evaluation"]["extractor"] in TRAINED_FEATURE_EXTRACTORS


def feature_weights():
    """The feature extractor's weights: the CNN trained here (rule train_features), or configured Inception weights."""
    if trained_extractor():
        return f"{RES}/eval/{config['evaluation']['extractor']}.pt"
    return config["evaluation"]["weights"]


def feature_weights_input():
    w = feature_weights()
    return [w] if trained_extractor() else external(w)


# Every value pasted into a shell command goes through the `q` format spec (shell-quoted; a list
# is quoted element by element), so helpers that build several arguments return lists, never
# pre-joined strings: no config value is read by the shell as code, a path with a space stays one
# argument. An option with a value is one word, `--flag=value`, so a value starting with '-'
# stays a value (tests/test_injection.py renders every rule's command).


def weights_arg():
    return W.opt("--weights", feature_weights())


def eval_sample_overrides(run="reference", progress=False):
    """``--set sample.*`` of the scoring protocol for ``run`` (``timestep_lab.workflow.scoring_sample``):
    the FID sample count (at progress points: ``evaluation.progress_num_samples``), then
    ``evaluation.sample`` with ``evaluation.sample_by_kind`` for its process (a flow run is
    scored with its ODE solver)."""
    s = W.scoring_sample(config["evaluation"], ALL_RUNS[run].config if run in ALL_RUNS else {}, progress=progress)
    return [f"--set=sample.{k}={'null' if v is None else v}" for k, v in s.items()]


def final_outputs():
    return [f"{REPORTS}/index.html"]


def scorecard_others():
    """The other studies of the scorecard across scales (the `scorecard` target; docs/methods.md §9.9),
    `scorecard.studies` of the config, whether or not they have results yet, else every
    results/<study>/ holding a verdicts.json; this study left out."""
    listed = (config.get("scorecard") or {}).get("studies") or []
    if listed:
        return [s for s in dict.fromkeys(listed) if s != STUDY]
    found = glob.glob(os.path.join("results", "*", "verdicts.json"))
    return sorted(os.path.basename(os.path.dirname(f)) for f in found if os.path.basename(os.path.dirname(f)) != STUDY)


def scorecard_present():
    """Those of `scorecard_others()` with a verdicts.json now: the index links the scorecard when
    there is one (read when the DAG is built; no input of the index, so a study alone never waits on another)."""
    if config.get("rehearsal"):  # a rehearsal's numbers are no scale of anything
        return []
    return [s for s in scorecard_others() if os.path.isfile(f"results/{s}/verdicts.json")]


def run_config_inputs(wildcards):
    run = ALL_RUNS[wildcards.run]
    inputs = {}
    if run.init_from:
        inputs["init"] = model_input(run.init_from)
    if run.extra.get("slots_file"):
        inputs["slots"] = f"{RES}/{run.extra['slots_file']}"
    return inputs


AN = config["analyses"]
PROFILE = AN.get("loss_profile", {})
OPTIMAL_PROFILE = f"{RES}/analyses/profiles/optimal.json"


def optimal_inputs():
    """The optimal denoiser's profile as a (possibly empty) input list: only when profiled."""
    return [OPTIMAL_PROFILE] if PROFILE.get("optimal") else []


def contribution_args():
    """The contribution command's ranges, sample count, chain and interval settings (a list of words)."""
    spec = AN.get("timestep_contribution", {})
    sample = spec.get("sample", {})
    steps = sample.get("steps")
    # one word per option (--flag=value): a value can never be read as an option
    return ["--ranges", *[str(x) for lo_hi in spec.get("ranges", []) for x in lo_hi],
            f"--num-samples={W.contribution_sample_count(config)}", f"--method={sample.get('method', 'ddpm')}",
            f"--steps={'null' if steps is None else steps}", f"--eta={sample.get('eta', 1.0)}",
            f"--spacing={sample.get('spacing', 'uniform')}", f"--min-steps={spec.get('min_steps', 2)}",
            f"--bootstrap={spec.get('bootstrap', 200)}"]


def consistency_control_inputs():
    """The training images and a model for the consistency controls (when analyses.consistency.controls)."""
    if not AN.get("consistency", {}).get("controls") or not consistency_runs():
        return {}
    return {"control_data": manifest(config["data"]["train_split"]),
            "control_model": model_path(consistency_runs()[0])}


def consistency_control_args(input, output):
    if "control_data" not in input.keys():
        return []
    return [f"--control-data={os.path.dirname(input.control_data)}", f"--control-model={input.control_model}",
            f"--controls-out={output.controls}"]


def model_format(run):
    if run == "reference" and config["reference"]["pretrained"]:
        return config["reference"]["format"]
    return "timestep_lab"


def checkpoint_args(run):
    """``--format`` of a run's model file, and for a guided-diffusion file (which does not record
    its resolution) ``--image-size`` = data.resolution: the options of cli.common.checkpoint_args."""
    fmt = model_format(run)
    size = config["data"].get("resolution")
    return [f"--format={fmt}"] + ([f"--image-size={size}"] if fmt == "guided_diffusion" and size else [])


def profile_args(run):
    p = PROFILE
    args = {"num-images": p.get("num_images", 256), "stride": p.get("stride", 1), "seed": p.get("seed", 1234),
            "batch-size": p.get("batch_size", 256)}
    if run == "reference":  # gradient-norm variance only for the reference model
        args.update({"grad-timesteps": p.get("grad_timesteps", 0), "grad-samples": p.get("grad_samples", 16)})
    return [f"--{k}={v}" for k, v in args.items()]


def finetune_runs(seed=None):
    """Slot fine-tunes (``extra["slot"]``, 1-based): of every seed, or of ``seed`` only."""
    return [r for r, run in RUNS.items() if run.extra.get("slot") and (seed is None or run.extra.get("seed") == seed)]


def control_runs():
    """The uniform-t control fine-tunes, one per seed of ``analyses.slots.seeds`` (docs/methods.md §3.2)."""
    return [r for r, run in RUNS.items() if run.extra.get("control")]


def reference_seed():
    """The reference's training seed: its slot fine-tunes are the single-seed interference matrix."""
    return RUNS["reference"].axes.get("seed", 0) if "reference" in RUNS else 0


def batch_size_runs():
    return group_runs("batch_size")


def prediction_runs():
    """{prediction type: run id} of the prediction_types group (lowest seed), unweighted runs only
    (the arms at equal per-t weighting in eps units are FID arms, not profiled)."""
    out = {}
    for r in sorted(group_runs("prediction_types"), key=lambda r: RUNS[r].axes["seed"]):
        if RUNS[r].axes.get("weighting", "none") == "none":
            out.setdefault(RUNS[r].axes["prediction"], r)
    return out


def _optim_schedule(run):
    return W.arm_columns(RUNS[run].config, RUNS[run].init_from)["optim_schedule"]


def consistency_runs():
    """Runs of the consistency group that differ only in seed or width (constant optimizer)."""
    return [r for r in group_runs("consistency") if _optim_schedule(r) == "constant"]


def momentum_runs():
    """The consistency group's runs with momentum decay, and its constant-momentum baseline."""
    return [r for r in group_runs("consistency") if _optim_schedule(r) != "constant"]


def run_config_args(wildcards, input):
    """The run-config command's optional options (the model the run starts from, the measured
    slots), a list of words for ``{params.args:q}``."""
    run = ALL_RUNS[wildcards.run]
    return [*W.opt("--init", model_path(run.init_from) if run.init_from else None),
            *W.opt("--slots", input.get("slots"))]


FLOOR = f"{RES}/eval/floor.json"  # the held-out split's FID against the training reference (rule floor)


def floor_input():
    """``[floor.json]`` for a study with a held-out split, else ``[]`` (no floor: the regime says so)."""
    return [FLOOR] if config["data"]["test_split"] else []


def verdict_analyses():
    """{analysis: output} of the analyses a claim reads, those this study runs (absent -> "not run")."""
    out = {}
    if finetune_runs() and control_runs():
        out["interference"] = f"{RES}/analyses/interference_control.json"
    if consistency_runs():
        out["consistency"] = f"{RES}/analyses/consistency.json"
    return out


def verdict_inputs(wildcards):
    floor = {"floor": FLOOR} if floor_input() else {}
    return {"metrics": f"{RES}/metrics.csv", "runs": f"{RES}/runs.csv", "comparisons": f"{RES}/comparisons.json",
            **verdict_analyses(), **floor}


def report_needed(entry):
    """Whether the study has what the group's report compares (StudyGroup.needs): without it there
    would be nothing to show, or a job failing after all the training; the claims it covers read
    "not run" on the index (verdict_analyses, common.smk)."""
    return {"group_runs": lambda: bool(group_runs(entry.name)), "constant_runs": lambda: bool(consistency_runs()),
            "finetune_runs": lambda: bool(finetune_runs()), "always": lambda: True}[entry.needs]()


def verdicts_args(wildcards, input):
    """The verdicts command's options, as a list of words for ``{params.args:q}`` (each quoted on its own)."""
    flags = {"metrics": "metrics-csv", "runs": "runs", "comparisons": "comparisons", "interference": "interference",
             "consistency": "consistency", "floor": "floor"}
    parts = [f"--{flag}={input[key]}" for key, flag in flags.items() if key in input.keys()]
    # the study's own column values, what a baseline's "{base}" stands for (timestep_lab.workflow.base_columns)
    parts.append(f"--base={json.dumps(W.base_columns(config), sort_keys=True)}")
    return parts + [f"--study={STUDY}"]


def index_args(wildcards, input):
    """The index command's other options, a list of words for ``{params.args:q}``."""
    scales = scorecard_present()
    return [f"--study={STUDY}", f"--config-source={CONFIG_SOURCE}",
            f"--results-dir={os.path.dirname(input.summary)}",  # results/<study>: its benchmark files
            f"--logs-dir={LOGS}",  # logs/<study>/<rule>/<job>.log: each job's exact CPU (its usage line)
            # a rehearsal's index carries a banner: no number on it is a result
            *W.opt("--rehearsal", json.dumps(config["rehearsal"], sort_keys=True) if config.get("rehearsal") else None),
            # other studies with results: the index links reports/scorecard.html
            *(["--scales", *scales] if scales else []),
            f"--reproducibility={ARITHMETIC}",  # the level asked for, beside the records' own
            *(["--stages", *input.stages] if input.get("stages") else [])]  # a budgeted study's plans
