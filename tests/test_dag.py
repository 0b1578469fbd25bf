"""The smoke study's DAG, planned by `snakemake -n` in a fresh copy of the repo: the verdict
wiring (interference against its control over every seed, verdicts.json, every report and the
index reading it) and the single-seed interference matrix built from the reference seed only.
The paper configs' cluster DAG (`--profile cluster -n`, as the README submits them): a
pretrained reference is read in its format and never trained, and jobs get the configured threads;
the latent ones (imagenet, celebahq) encode their split once and train each run in its space."""

from __future__ import annotations

import re

import pytest
import yaml
from worktree import copy_worktree, run, study_env

pytestmark = pytest.mark.workflow


@pytest.fixture(scope="module")
def repo(tmp_path_factory):
    return copy_worktree(tmp_path_factory.mktemp("dag") / "repo")


@pytest.fixture(scope="module")
def plan(repo) -> str:
    """The smoke study planned with the `scorecard` target beside another study's finished results."""
    other = repo / "results" / "other"
    other.mkdir(parents=True, exist_ok=True)
    (other / "verdicts.json").write_text("{}")  # a dry run reads no file: its presence is what counts
    r = run(["snakemake", "all", "scorecard", "-n", "-p", "--configfile", "config/smoke.yaml"], repo, study_env(),
            timeout=300)
    assert r.returncode == 0, r.stdout[-4000:]
    return r.stdout


def _jobs(plan: str, rule: str) -> list[str]:
    """The dry run's block of every job of ``rule`` (from its ``rule <name>:`` line to the next job)."""
    blocks = re.split(r"\n(?=\[[^\]]+\]\n(?:local)?rule )", plan)
    return [b for b in blocks if re.search(rf"^(?:local)?rule {rule}:", b.split("\n", 2)[1] if "\n" in b else "")]


def test_interference_control_and_verdicts_are_planned(plan):
    counts = dict(re.findall(r"^(\w+)\s+(\d+)$", plan.split("Job stats:", 1)[1], flags=re.M))
    assert counts["interference"] == "1" and counts["interference_control"] == "1" and counts["verdicts"] == "1"
    (ctl,) = _jobs(plan, "interference_control")
    # every seed's slot fine-tunes (smoke: slots 3 and 9, seeds 0 and 1) and both uniform-t controls
    for seed, run_suffix in ((0, ""), (1, "_s1")):
        for k in (3, 9):
            assert f"{seed}:{k}=results/smoke/analyses/profiles/finetune_slot{k}{run_suffix}.json" in ctl
        assert f"{seed}=results/smoke/analyses/profiles/finetune_uniform{run_suffix}.json" in ctl
    (verdicts,) = _jobs(plan, "verdicts")
    for path in ("metrics.csv", "runs.csv", "analyses/interference_control.json", "analyses/consistency.json"):
        assert f"results/smoke/{path}" in verdicts
    assert "output: results/smoke/verdicts.json" in verdicts
    # one command that reruns by hand (it was a run: block), at the study's arithmetic
    assert "python -m timestep_lab verdicts --metrics-csv=results/smoke/metrics.csv --runs=results/smoke/runs.csv" in verdicts


def test_the_dag_builds_without_an_input_function_failing(plan):
    """The optimal denoiser's profile shares the profiles' folder with every run's: profile_losses' run
    wildcard is limited to the study's runs, so Snakemake never tries it on run=optimal (it printed four
    `InputFunctionException ... KeyError: 'optimal'` blocks at every DAG build of every study)."""
    assert "InputFunctionException" not in plan and "KeyError" not in plan, plan[:3000]
    assert "output: results/smoke/analyses/profiles/optimal.json" in "".join(_jobs(plan, "optimal_profile"))


def test_single_seed_matrix_uses_the_reference_seed_only(plan):
    (job,) = _jobs(plan, "interference")
    assert "--finetuned 3=results/smoke/analyses/profiles/finetune_slot3.json " \
           "9=results/smoke/analyses/profiles/finetune_slot9.json --slots" in job
    assert "_s1" not in job  # no slot given twice (the other seed's fine-tunes collided here before)


def test_every_report_and_the_index_read_the_verdicts(plan):
    reports = _jobs(plan, "report")
    assert len(reports) == 9
    for job in reports:
        assert "-p verdicts results/smoke/verdicts.json" in job, job[:300]
    (slot,) = [j for j in reports if "reports/slot_finetune.py" in j]
    assert "-p interference_control results/smoke/analyses/interference_control.json" in slot
    (flow,) = [j for j in reports if "reports/flow_matching.py" in j]  # each flow run's sampler and weighting
    assert "-p run_configs results/smoke/runs/uniform_none_v_b64_linear_s0_flow_heun/run.yaml," in flow
    (consistency,) = [j for j in reports if "reports/consistency.py" in j]  # the controls' samples it draws
    assert "-p controls results/smoke/analyses/consistency_controls.npz" in consistency
    (index,) = _jobs(plan, "index")
    assert "results/smoke/verdicts.json" in index


def test_the_scorecard_across_scales_reads_every_study_and_the_index_none_but_its_own(plan):
    (job,) = _jobs(plan, "scorecard")
    assert "results/other/verdicts.json" in job and "results/smoke/verdicts.json" in job
    assert "python -m timestep_lab scorecard --skip-missing " in job and " -- results/smoke results/other " in job
    assert "reports/smoke/index.html" in job.split("output:")[0]  # after this study's index: its cost complete
    (index,) = _jobs(plan, "index")
    assert "results/other" not in index  # the link is a parameter: a study alone never waits on another


def _checked(output: str) -> tuple[int, int]:
    """(checked now, unchanged) from the DAG build's run-config check line (workflow/checked.py)."""
    m = re.search(r"^checked (\d+) run configs(?: \((\d+) unchanged since last check\))?$", output, re.M)
    if m:
        return int(m[1]), int(m[2] or 0)
    m = re.search(r"^(\d+) run configs unchanged since last check$", output, re.M)
    assert m, output[-3000:]
    return 0, int(m[1])


def test_a_rerun_checks_no_unchanged_run_config_and_imports_no_torch(tmp_path):
    """The first DAG build checks every run config (torch); the second finds them recorded in
    .snakemake/ and imports no torch; a config changed after that is checked and refused again."""
    import sys

    import yaml

    root = copy_worktree(tmp_path / "repo")
    env = study_env()
    dry = ["snakemake", "-n", "--configfile", "config/smoke.yaml"]
    first = run(dry, root, env, timeout=300)
    assert first.returncode == 0, first.stdout[-4000:]
    n, unchanged = _checked(first.stdout)
    assert n > 10 and unchanged == 0  # smoke: every run of every group, none recorded yet
    assert (root / ".snakemake" / "timestep_lab_checked.json").is_file()

    # python -X importtime lists every module the snakemake process imports (no job runs in -n)
    second = run([sys.executable, "-X", "importtime", "-m", *dry], root, env, timeout=300)
    assert second.returncode == 0, second.stdout[-4000:]
    assert _checked(second.stdout) == (0, n)
    imported = {line.rsplit("|", 1)[1].strip() for line in second.stdout.splitlines() if line.startswith("import time:")}
    assert "timestep_lab.workflow" in imported  # the probe sees the Snakefile's imports
    assert "torch" not in imported and not any(m.startswith("torch.") for m in imported)

    cfg = yaml.safe_load((root / "config" / "smoke.yaml").read_text())
    cfg["samplers"]["speed"]["params"]["k"] = -5  # injected after the first check: must not slip through
    (root / "config" / "smoke.yaml").write_text(yaml.safe_dump(cfg))
    bad = run(dry, root, env, timeout=300)
    assert bad.returncode != 0
    errors = [line for line in bad.stdout.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "config/smoke.yaml (run speed_" in errors[0] and "Traceback" not in bad.stdout, \
        bad.stdout[-3000:]


def test_a_study_config_replaces_the_default_without_the_profile(plan, tmp_path):
    """What a cluster job's own snakemake sees: the study config given with --configfile and no
    profile (the executor passes neither the profile nor replace-workflow-config on). It must plan
    the study's runs, not a merge of the study into config/config.yaml, whose group overrides would
    rename the runs (a flow run of the default study carries `_kimg<N>`) and fail every job's lookup."""
    root = copy_worktree(tmp_path / "repo")
    r = run(["snakemake", "-n", "--configfile", "config/smoke.yaml", "--workflow-profile", "none"], root, study_env(),
            timeout=300)
    assert r.returncode == 0, r.stdout[-4000:]
    ids = set(re.findall(r"results/smoke/runs/([A-Za-z0-9._-]+)/model\.pt", r.stdout))
    assert ids == set(re.findall(r"results/smoke/runs/([A-Za-z0-9._-]+)/model\.pt", plan)) and ids
    flow_kimg = yaml.safe_load((root / "config" / "config.yaml").read_text())["groups"]["flow_matching"]["overrides"]
    slug = f"_kimg{flow_kimg['train.total_kimg']:g}"  # what a merge with the default study would add
    assert not [i for i in ids if slug in i]


@pytest.mark.parametrize("study, fmt, pretrained", [("cifar10", "diffusers", "data/pretrained/ddpm-cifar10-32"),
                                                    ("imagenet", "guided_diffusion",
                                                     "data/pretrained/256x256_diffusion_uncond.pt"),
                                                    ("celebahq", "diffusers", "data/pretrained/ddpm-celebahq-256")])
def test_paper_config_on_the_cluster_reads_the_pretrained_reference_and_keeps_its_threads(repo, study, fmt,
                                                                                          pretrained):
    """The README's cluster command, dry run: the pretrained reference is scored and analysed
    read in its format, no job trains a `reference` model (collect asked for its training log),
    and every job gets the config's 8 threads, not the submitting host's core count (the local
    profile's `cores: all` capped them at 2)."""
    r = run(["snakemake", "--profile", "cluster", "-n", "-p", "--configfile", f"config/{study}.yaml"], repo,
            study_env(), timeout=300)
    assert r.returncode == 0, r.stdout[-4000:]
    out = r.stdout
    trains = _jobs(out, "train")
    # 48 of the groups and analyses + superres, the contribution analysis's super-resolution model (issue 42)
    assert len(trains) == 49 and not [j for j in trains if "wildcards: run=reference\n" in j + "\n"]
    assert [j for j in trains if "wildcards: run=superres\n" in j + "\n"]
    assert f"results/{study}/runs/reference/" not in "".join(trains)
    (collect,) = _jobs(out, "collect")
    assert f"results/{study}/runs/reference/metrics.json" in collect
    assert f"results/{study}/runs/reference/train_log.jsonl" not in collect
    (ref,) = [j for j in _jobs(out, "sample_score") if "wildcards: run=reference\n" in j]
    assert f"sample-score --model={pretrained} --format={fmt} " in ref
    (contribution,) = _jobs(out, "contribution")  # every arm forked from one chain of the super-resolution model
    assert f"contribution --model=results/{study}/runs/superres/model.pt " in contribution
    assert set(re.findall(r"threads: (\d+)", out)) == {"8"}
    assert set(re.findall(r"--threads[= ](\d+)", out)) == {"8"}
    if study != "cifar10":
        _check_spaces(out, study, trains)


def _check_spaces(out: str, study: str, trains: list[str]) -> None:
    """A mixed latent study's cluster DAG (docs/methods.md 7.9): the training split encoded once;
    every group's run trains on the latents, the pixel reference's fine-tunes and the SR model on
    the prepared images; the reference's and the fine-tunes' loss profiles read the images, the
    batch-size group's profiles and the prediction-type profiles the latents."""
    images = f"data/prepared/{study}-256-train/manifest.json"
    latents = f"data/prepared/{study}-256-train-latents/manifest.json"
    (encode,) = _jobs(out, "encode_latents")
    assert f"encode-latents --data=data/prepared/{study}-256-train --vae=data/weights/sd-vae-ft-ema " in encode
    assert images in encode and latents in encode

    def run_of(job: str) -> str:
        return re.search(r"wildcards: run=(\S+)", job).group(1)

    pixel = {run_of(j) for j in trains if images in j and latents not in j}
    latent = {run_of(j) for j in trains if latents in j and images not in j}
    assert pixel == {"superres", "finetune_uniform", *(f"finetune_slot{k}" for k in (3, 5, 7, 9))}
    assert len(latent) == len(trains) - len(pixel) == 43  # the groups' 42 and the small-batch continuation
    profiles = {run_of(j): j for j in _jobs(out, "profile_losses")}
    on_images = {r for r, j in profiles.items() if images in j and latents not in j}
    assert on_images == {"reference"} | pixel - {"superres"}  # the interference analysis's
    on_latents = {r for r, j in profiles.items() if latents in j and images not in j}
    assert on_latents == set(profiles) - on_images and "toward_zero_from-uniform_none_eps_b32_linear_s0" in on_latents
    (predictions,) = _jobs(out, "profile_predictions")
    assert latents in predictions and images not in predictions


def test_a_study_config_is_the_whole_config_in_every_process(repo):
    """A cluster job's own snakemake gets the study's --configfile but not the profile's
    --replace-workflow-config: the default study (config/config.yaml) merged under it gave the
    jobs other runs than the DAG they were planned in (the paper configs' post-processing job
    looked for fine-tunes of seeds 1 and 2 of the default study's analyses.slots.seeds)."""
    r = run(["snakemake", "-n", "--workflow-profile", "none", "--configfile", "config/cifar10.yaml"], repo,
            study_env(), timeout=300)
    assert r.returncode == 0, r.stdout[-4000:]
    assert "config/config.yaml" not in r.stdout.split("Building DAG", 1)[0]  # not read, so not merged
    (ctl,) = _jobs(r.stdout, "interference_control")
    assert "finetune_slot3.json" in ctl and "_s1" not in ctl and "_s2" not in ctl
