"""The study groups' registry (timestep_lab.groups): every layer reads one record per group, and a
new group added by the documented recipe (docs/design.md#adding-a-study-group) reaches the DAG,
the index, the estimate, the rehearsal and dvc.yaml with nothing else changed."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest
import yaml
from worktree import ROOT, copy_worktree, study_env

from timestep_lab.config import ConfigError
from timestep_lab.groups import GROUPS, REPORT_INPUT_KINDS, baselines, config_groups
from timestep_lab.workflow import check_group_names

NAME = "weighting_race"  # spelled nowhere in the repository before the recipe adds it
ENTRY = f'''
GROUPS += (StudyGroup("{NAME}", "which loss weighting trains fastest at uniform t?",
                      baseline={{"sampler": "uniform", "weighting": "none"}}),)
'''
NOTEBOOK = f'''# %% [markdown]
# # Which loss weighting trains fastest at uniform t?

# %% tags=["parameters"]
metrics_csv = "results/smoke/metrics.csv"
runs_csv = "results/smoke/runs.csv"
summary = "results/smoke/summary.json"
verdicts = "results/smoke/verdicts.json"
results_dir = "results/smoke"
group = "{NAME}"

# %%
from timestep_lab.reporting.notebook import load_study, setup, show_comparisons

setup()
study = load_study(group, metrics_csv, runs_csv)
show_comparisons(study, summary)
'''


def test_every_group_has_its_notebook_and_every_config_group_a_record():
    for g in GROUPS:
        assert (ROOT / "reports" / f"{g.report}.py").is_file(), g.name
        assert set(g.report_inputs) <= set(REPORT_INPUT_KINDS)
    assert [g.name for g in GROUPS] == list(dict.fromkeys(g.name for g in GROUPS))  # one record per name
    for cfg in sorted((ROOT / "config").glob("*.yaml")):
        names = (yaml.safe_load(cfg.read_text()).get("groups") or {}).keys()
        assert set(names) <= set(config_groups()), cfg.name
    assert set(baselines()) == {g.name for g in GROUPS if g.baseline is not None}


def test_a_group_without_a_record_is_refused_naming_the_recorded_ones():
    with pytest.raises(ConfigError, match=r"groups\.sampler_comparisons: not a study group; the recorded ones are "
                                          r"sampler_comparison, schedules"):
        check_group_names({"groups": {"sampler_comparisons": {"grid": {"sampler": ["uniform"]}}}}, "x.yaml")


def _jobs(dry_run: str) -> dict[str, int]:
    """Snakemake's job-count table of a dry run: {rule: jobs}."""
    table = dry_run.split("Job stats:", 1)[1]
    return {m[1]: int(m[2]) for m in re.finditer(r"^(\w+)\s+(\d+)$", table, re.M) if m[1] != "total"}


def test_a_new_group_by_the_recipe_alone_reaches_every_layer(tmp_path):
    repo = copy_worktree(tmp_path / "repo")
    # the recipe: a record, a notebook (listed in dvc.yaml's deps), a study config that runs the group
    with open(repo / "src/timestep_lab/groups/entries.py", "a") as fh:
        fh.write(ENTRY)
    (repo / "reports" / f"{NAME}.py").write_text(NOTEBOOK)
    dvc = (repo / "dvc.yaml").read_text()
    (repo / "dvc.yaml").write_text(dvc.replace("      - reports/flow_matching.py\n",
                                               f"      - reports/flow_matching.py\n      - reports/{NAME}.py\n"))
    cfg = yaml.safe_load((repo / "config/smoke.yaml").read_text())
    cfg["groups"][NAME] = {"grid": {"sampler": ["uniform"], "weighting": ["none", "speed"]}, "seeds": [0, 1]}
    (repo / "config" / "race.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False))
    env = {**study_env(), "PYTHONPATH": str(repo / "src")}

    def run(*cmd):
        out = subprocess.run(cmd, cwd=repo, env=env, capture_output=True, text=True, timeout=300)
        assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
        return out.stdout + out.stderr

    # the DAG: the group's runs train, and its report is rendered and linked from the index
    dry = run(sys.executable, "-m", "snakemake", "-n", "-p", "--configfile", "config/race.yaml")
    assert f"python -m timestep_lab report --notebook=reports/{NAME}.py" in dry
    index = dry.split("rule index:", 1)[1].split("\n\n", 1)[0]
    assert f"reports/smoke/{NAME}.html" in index
    jobs = _jobs(dry)
    # the estimate prices the same jobs, rule by rule
    run(sys.executable, "-m", "timestep_lab", "estimate", "config/race.yaml", "--gpu", "cpu", "--no-calibration",
        "--out", str(tmp_path / "estimate.json"))
    priced = {r["rule"]: r["jobs"] for r in json.loads((tmp_path / "estimate.json").read_text())["rules"]}
    assert {r: n for r, n in priced.items() if n} == jobs
    # the rehearsal scales the group's runs like any other group's
    run(sys.executable, "-m", "timestep_lab", "rehearse", "config/race.yaml", "--prepare-only", "--no-estimate",
        "--dir", "rehearsal")
    rehearsal = yaml.safe_load((repo / "rehearsal/smoke/config.yaml").read_text())
    assert rehearsal["groups"][NAME]["grid"]["weighting"] == ["none", "speed"]
    # dvc repro reruns when the notebook changes
    deps = yaml.safe_load((repo / "dvc.yaml").read_text())["stages"]["study"]["deps"]
    assert any(f"reports/{NAME}.py" == d or f"reports/{NAME}.py".startswith(d.rstrip("/") + "/") for d in deps), deps
    # and the name is written in the record, the notebook, the config and dvc.yaml only (this test aside)
    files = subprocess.run(["grep", "-rl", NAME, "--", "src", "workflow", "reports", "config", "dvc.yaml", "Snakefile",
                            "docs", "README.md", "profiles", "cluster"], cwd=repo, capture_output=True, text=True).stdout.split()
    assert sorted(files) == sorted(["src/timestep_lab/groups/entries.py", f"reports/{NAME}.py", "config/race.yaml",
                                    "dvc.yaml"])

