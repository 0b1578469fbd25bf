"""A changed hyperparameter in a study config reruns cleanly (issue 12): Snakemake retrains the
run, the train job finds the old run's training state, sets it aside (stale-<hash>/, logged) and
starts fresh instead of refusing to resume. `dvc exp run -S key=value` edits the same study config
(params.yaml links to config/config.yaml) and takes the same path."""

from __future__ import annotations

import pytest
import yaml
from worktree import copy_worktree, run, study_env

pytestmark = pytest.mark.workflow

RUN = "uniform_none_eps_b64_linear_s0"


def test_a_changed_learning_rate_retrains_the_run_from_scratch(tmp_path):
    root = copy_worktree(tmp_path / "repo")
    cfg_path = root / "config" / "tiny.yaml"
    cfg = yaml.safe_load((root / "config" / "smoke.yaml").read_text())
    cfg["study"] = "tiny"
    cfg["base"]["train"].update(total_kimg=0.128, log_every_kimg=0.064, checkpoint_every_kimg=0.064)
    cfg_path.write_text(yaml.safe_dump(cfg))
    target = f"results/tiny/runs/{RUN}/model.pt"
    cmd = ["snakemake", "--configfile", "config/tiny.yaml", "--cores", "2", target]
    r = run(cmd, root, study_env(), timeout=600)
    assert r.returncode == 0, r.stdout[-4000:]
    run_dir = root / "results" / "tiny" / "runs" / RUN
    assert yaml.safe_load((run_dir / "config.yaml").read_text())["optim"]["lr"] == cfg["base"]["optim"]["lr"]

    cfg["base"]["optim"]["lr"] = cfg["base"]["optim"]["lr"] / 2  # a non-length hyperparameter
    cfg_path.write_text(yaml.safe_dump(cfg))
    r = run(cmd, root, study_env(), timeout=600)
    assert r.returncode == 0, r.stdout[-4000:]
    assert yaml.safe_load((run_dir / "config.yaml").read_text())["optim"]["lr"] == cfg["base"]["optim"]["lr"]
    stale = sorted(run_dir.glob("stale-*"))
    assert len(stale) == 1, sorted(p.name for p in run_dir.iterdir())
    log = (root / "logs" / "tiny" / "train" / f"{RUN}.log").read_text()
    assert "stale-" in log and "Traceback" not in log
