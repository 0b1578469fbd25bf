"""Study-config values never run as shell code (issue: shell injection in the Snakemake rules).

Free names (split names, catalogue labels, tags, the GPU model) are refused by the schema before
any job runs, with the key in the one error line. Paths (data.source, reference.pretrained,
evaluation.weights) may hold any character: every rule pastes them shell-quoted (``{...:q}``),
so a hostile path reaches the command as one literal argument and a path with a space works.

Jobs here run against a stub ``python`` first on PATH that records its argv and exits 1: what a
job's shell command would have executed is visible without running the real commands.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
import yaml

from worktree import ROOT, copy_worktree, run, study_env

HOSTILE = ["x' ; touch PWNED ; echo '", "/m$(touch PWNED).pt", 'a"; touch PWNED; echo "b', "`touch PWNED`"]


def _study(change) -> dict:
    cfg = yaml.safe_load((ROOT / "config" / "smoke.yaml").read_text())
    cfg["study"] = "inj"
    change(cfg)
    return cfg


def _pwned(*roots: Path) -> list[Path]:
    return [p for r in roots for p in r.rglob("*PWNED*")] + [p for p in Path.cwd().glob("*PWNED*")]


def _stub_env(tmp_path: Path) -> tuple[dict[str, str], Path]:
    """study_env() with a ``python`` that appends its argv (JSON) to a log and fails."""
    bin_dir = tmp_path / "stub-bin"
    bin_dir.mkdir()
    stub = bin_dir / "python"
    stub.write_text(f"#!{sys.executable}\nimport json, os, sys\n"
                    "with open(os.environ['ARGV_LOG'], 'a') as fh:\n"
                    "    fh.write(json.dumps(sys.argv[1:]) + '\\n')\n"
                    "sys.exit(1)\n")
    stub.chmod(0o755)
    env = study_env()
    env["PATH"] = os.pathsep.join([str(bin_dir), env["PATH"]])
    env["ARGV_LOG"] = str(tmp_path / "argv.jsonl")
    return env, tmp_path / "argv.jsonl"


def _argvs(log: Path) -> list[list[str]]:
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


SCHEMA_KEYS = {
    "data.train_split": lambda c, v: c["data"].update(train_split=v),
    "data.test_split": lambda c, v: c["data"].update(test_split=v),
    "resources.gpu_model": lambda c, v: c["resources"].update(gpu_model=v),
    "samplers": lambda c, v: c["samplers"].update({v: {"name": "uniform"}}),
    "groups.consistency.list.0.tag": lambda c, v: c["groups"]["consistency"]["list"][0].update(tag=v),
    "groups.sampler_comparison.grid.sampler.0": lambda c, v: c["groups"]["sampler_comparison"]["grid"].update(
        sampler=[v]),
}


@pytest.mark.parametrize("key", list(SCHEMA_KEYS))
def test_hostile_names_are_refused_by_the_schema_naming_the_key(key, tmp_path):
    root = copy_worktree(tmp_path / "repo")
    (root / "bad.yaml").write_text(yaml.safe_dump(_study(lambda c: SCHEMA_KEYS[key](c, HOSTILE[0]))))
    r = run(["snakemake", "--configfile", "bad.yaml", "--cores", "1", "-n"], root, study_env(), timeout=120)
    assert r.returncode != 0
    errors = [ln for ln in r.stdout.splitlines() if ln.startswith("error:")]
    assert len(errors) == 1 and "bad.yaml" in errors[0], r.stdout[-3000:]
    assert f"{key}:" in errors[0], errors[0]
    assert "Traceback" not in r.stdout
    assert not _pwned(root, tmp_path)


PATH_KEYS = {
    # key: (set the value, the target whose job takes it, the flag it must follow)
    "data.source": (lambda c, v: c["data"].update(source=v), "data/prepared/digits-train/manifest.json", "--source"),
    "reference.pretrained": (lambda c, v: c["reference"].update(pretrained=v), "results/inj/analyses/posterior.json",
                             "--model"),
    "evaluation.weights": (lambda c, v: c["evaluation"].update(extractor="inception-v3", weights=v),
                           "results/inj/eval/reference.npz", "--weights"),
}


@pytest.mark.parametrize("key", list(PATH_KEYS))
def test_hostile_paths_reach_the_command_as_one_literal_argument(key, tmp_path):
    change, target, flag = PATH_KEYS[key]
    root = copy_worktree(tmp_path / "repo")
    # the prepared training split exists, so the job under test is the one that runs
    prepared = root / "data" / "prepared" / "digits-train"
    if key != "data.source":
        prepared.mkdir(parents=True)
        (prepared / "manifest.json").write_text("{}")
        (prepared / "images.npy").write_bytes(b"")
    env, log = _stub_env(tmp_path)
    values = [*HOSTILE, "folder with space/file.pt"]
    for i, value in enumerate(values):
        (root / f"cfg{i}.yaml").write_text(yaml.safe_dump(_study(lambda c: change(c, value))))
        r = run(["snakemake", target, "--configfile", f"cfg{i}.yaml", "--cores", "1", "--force"], root, env,
                timeout=180)
        assert r.returncode != 0  # the stub fails every job
        assert "Traceback" not in r.stdout, r.stdout[-3000:]
        calls = _argvs(log)
        assert calls, f"no job ran for {value!r}:\n{r.stdout[-3000:]}"
        argv = calls[-1]
        assert argv[:2] == ["-m", "timestep_lab"], argv
        assert flag in argv and argv[argv.index(flag) + 1] == value, argv  # one argument, verbatim
        assert not _pwned(root, tmp_path), f"{key}={value!r} ran a command"
        log.unlink()


def test_a_pretrained_model_in_a_folder_with_a_space_works(digits_dir, tmp_path):
    """The real `posterior` job on a checkpoint under "my models/": the path stays one argument."""
    from conftest import tiny_config
    from timestep_lab.train import train

    model = train(tiny_config(digits_dir, train={"total_kimg": 0.064}), tmp_path / "my models" / "ref",
                  progress=False).model_path
    root = copy_worktree(tmp_path / "repo")
    (root / "space.yaml").write_text(yaml.safe_dump(_study(lambda c: c["reference"].update(pretrained=str(model)))))
    r = run(["snakemake", "results/inj/analyses/posterior.json", "--configfile", "space.yaml", "--cores", "1"], root,
            study_env(), timeout=300)
    assert r.returncode == 0, r.stdout[-3000:]
    out = json.loads((root / "results" / "inj" / "analyses" / "posterior.json").read_text())
    assert out  # written by the real command from the model under "my models/"
    assert not _pwned(root, tmp_path)
