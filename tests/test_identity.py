"""Code identity per run (issue: hardening round 2): every training log record, metrics.json and
fid_progress.json carries the git commit and dirty flag (or only the package's source hash
outside a checkout) and the sha256 of envs/requirements.lock; the collected tables and the
study index show them, and say so when a study's runs mix identities. model.pt does not: its
bytes depend on the config and seed only."""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
from pathlib import Path

import pytest
from conftest import ROOT

from timestep_lab.artifacts.identity import code_identity, current, describe, source_sha256


def _git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=cwd, check=True,
                          capture_output=True, text=True).stdout.strip()


def test_code_identity_in_and_outside_a_git_checkout(tmp_path):
    proj = tmp_path / "proj"
    shutil.copytree(ROOT / "src" / "timestep_lab", proj / "src" / "timestep_lab",
                    ignore=shutil.ignore_patterns("__pycache__"))
    (proj / "envs").mkdir()
    shutil.copy2(ROOT / "envs" / "requirements.lock", proj / "envs" / "requirements.lock")
    pkg, lock = proj / "src" / "timestep_lab", hashlib.sha256((ROOT / "envs" / "requirements.lock").read_bytes()).hexdigest()
    outside = code_identity(pkg)  # a copy, no git: the source hash is the identity
    assert outside == {"commit": None, "dirty": None, "source_sha256": source_sha256(ROOT / "src" / "timestep_lab"),
                       "lock_sha256": lock}
    assert describe(outside).startswith("not a git checkout, source ")
    _git(proj, "init", "-q")
    _git(proj, "add", "-A")
    _git(proj, "commit", "-qm", "x")
    clean = code_identity(pkg)
    assert clean == {**outside, "commit": _git(proj, "rev-parse", "HEAD"), "dirty": False}
    (pkg / "evidence" / "stats.py").write_text((pkg / "evidence" / "stats.py").read_text() + "# edited\n")
    dirty = code_identity(pkg)
    assert dirty["commit"] == clean["commit"] and dirty["dirty"] is True
    assert dirty["source_sha256"] != clean["source_sha256"]  # tells two dirty trees apart
    assert "(uncommitted changes)" in describe(dirty) and f"requirements.lock {lock[:8]}" in describe(dirty)
    (proj / "envs" / "requirements.lock").write_text("torch==0\n")
    assert code_identity(pkg)["lock_sha256"] != lock


def test_runs_and_metrics_carry_the_code_identity_and_model_pt_does_not(tiny_artifacts, tmp_path, capsys):
    from timestep_lab.artifacts.io import load_torch
    from timestep_lab.cli import main
    from timestep_lab.cli.common import code_identity

    a, me = tiny_artifacts, code_identity()  # the package's identity and this process's arithmetic
    assert set(current()) == {"commit", "dirty", "source_sha256", "lock_sha256"} and me["lock_sha256"]
    assert me == {**current(), "arithmetic": me["arithmetic"]} and me["arithmetic"]["level"] in ("native", "portable")
    log = [json.loads(line) for line in (a.run / "train_log.jsonl").read_text().splitlines()]
    assert log and all(rec["code"] == me for rec in log)
    assert "code" not in load_torch(a.run / "model.pt")
    common = ["--reference", a.reference, "--weights", a.cnn, "--no-progress", "--threads", "1"]
    assert main([str(x) for x in ["evaluate", "--samples", a.samples, "--out", tmp_path / "m.json", *common]]) == 0
    m = json.loads((tmp_path / "m.json").read_text())
    assert m["code"] == me and all(r["code"] == me for r in m["records"])
    assert main([str(x) for x in ["evaluate-snapshots", "--snapshots", a.run / "snapshots", "--out",
                                  tmp_path / "p.json", "--set", "sample.num_samples=8", "--set", "sample.steps=2",
                                  *common]]) == 0
    p = json.loads((tmp_path / "p.json").read_text())
    assert p["code"] == me and all(pt["code"] == me for pt in p["points"])


def _run(root: Path, rid: str, code: dict | None) -> None:
    d = root / "runs" / rid
    d.mkdir(parents=True)
    (d / "train_log.jsonl").write_text(json.dumps({"nimg": 1000, "loss": 0.1, "wall_time_s": 1.0, "code": code}) + "\n")
    rec = {"metric": "fid", "value": 10.0, "tool": "torch-fidelity", "label": "FID (digits-CNN features)",
           "num_generated": 10, "num_reference": 20, "sampler": "ddim", "steps": 5, "ema": True, "code": code}
    (d / "metrics.json").write_text(json.dumps({"status": "ok", "nimg": 1000, "code": code, "records": [rec]}))


@pytest.mark.parametrize("mixed", [False, True])
def test_the_index_prints_the_code_identity_and_says_when_runs_mix_them(tmp_path, mixed):
    import pandas as pd

    from timestep_lab.reporting import render_index
    from timestep_lab.workflow.collect import collect

    one = {"commit": "a" * 40, "dirty": False, "source_sha256": "b" * 64, "lock_sha256": "c" * 64}
    other = {**one, "commit": "d" * 40, "dirty": True}
    axes = {"sampler": "uniform", "weighting": "none", "prediction": "eps", "batch_size": 64, "schedule": "linear"}
    runs = {f"r{s}": {"axes": {**axes, "seed": s}, "groups": ["g"]} for s in range(3)}
    for i, rid in enumerate(runs):
        _run(tmp_path, rid, other if mixed and i == 2 else one)
    collect(runs, str(tmp_path), str(tmp_path / "m.csv"), str(tmp_path / "r.csv"), str(tmp_path / "s.json"))
    summary = json.loads((tmp_path / "s.json").read_text())
    assert summary["code"]["mixed"] is mixed and len(summary["code"]["identities"]) == 1 + mixed
    table = pd.read_csv(tmp_path / "r.csv").set_index("run")
    assert table.loc["r0", "train_code"] == table.loc["r0", "score_code"] == describe(one)
    assert (pd.read_csv(tmp_path / "m.csv")["code_commit"] == one["commit"]).sum() == 3 - mixed
    html = render_index(ROOT / "reports" / "index.html.j2", tmp_path / "index.html", study="toy",
                        summary=tmp_path / "s.json", reports=[], config_source="config/x.yaml").read_text()
    assert f"git {'a' * 12}, source bbbbbbbb, requirements.lock cccccccc" in html  # commit, dirty flag and lock
    assert ("Mixed code" in html) is mixed and ("2 different code identities" in html) is mixed
    if mixed:
        assert f"git {'d' * 12} (uncommitted changes)" in html and "(1 runs: r2)" in html
    else:
        assert "for every run (trained and scored)" in html


@pytest.mark.workflow
def test_the_smoke_study_records_and_prints_its_code_identity(smoke_study):
    """The real study: every metrics.json and training log carries the identity of the code the
    jobs imported (this checkout's package), the index and the sampler report print it, none mixed."""
    assert smoke_study.returncode == 0, smoke_study.log[-3000:]
    res = smoke_study.root / "results" / "smoke"
    idents = {json.dumps(json.loads(p.read_text())["code"], sort_keys=True) for p in res.glob("runs/*/metrics.json")}
    idents |= {json.dumps(json.loads(line)["code"], sort_keys=True)
               for p in res.glob("runs/*/train_log.jsonl") for line in p.read_text().splitlines()}
    assert len(idents) == 1
    ident = json.loads(idents.pop())
    arithmetic = ident.pop("arithmetic")  # the study's level: reproducibility: portable
    assert ident == current()
    assert arithmetic["level"] == "portable" and arithmetic["torch_cpu_capability"] == "AVX2"
    label = describe({**ident, "arithmetic": arithmetic})
    assert label.endswith("arithmetic portable (torch AVX2, OpenBLAS Haswell)")
    reports = smoke_study.root / "reports" / "smoke"
    assert label in (reports / "index.html").read_text() and "Mixed code" not in (reports / "index.html").read_text()
    assert label in (reports / "sampler_comparison.html").read_text()
