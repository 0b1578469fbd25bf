"""Start-up cost: a command loads only what it uses. `--help`, `estimate --help` and the `report`
command never import torch (3-5 s of a job's start on a 2-core machine, issue 13); the errors the
entry turns into one line come from torch-free modules."""

from __future__ import annotations

import os
import subprocess
import sys

from conftest import ROOT

# Runs the entry in a fresh interpreter and prints whether torch was imported by the time the
# command's own work would start (report: the notebook renderer is replaced by a probe, since
# rendering imports what the notebook imports) and once main() returned.
PROBE = """
import sys
import timestep_lab.cli as cli
import timestep_lab.cli.report as report
seen = []
report.render_notebook = lambda notebook, out, params, **kw: seen.append("torch" in sys.modules)
try:
    rc = cli.main(sys.argv[1:])
except SystemExit as exc:  # --help
    rc = exc.code
print("RESULT", rc, seen, "torch" in sys.modules)
"""


def _probe(*args: str) -> str:
    r = subprocess.run([sys.executable, "-c", PROBE, *args], cwd=ROOT, capture_output=True, text=True, timeout=120,
                       env={**os.environ, "PYTHONPATH": str(ROOT / "src")})
    assert r.returncode == 0, r.stderr[-3000:]
    return r.stdout.strip().splitlines()[-1]


def test_help_and_estimate_help_do_not_import_torch():
    assert _probe("--help") == "RESULT 0 [] False"
    assert _probe("estimate", "--help") == "RESULT 0 [] False"


def test_report_command_does_not_import_torch(tmp_path):
    notebook = tmp_path / "nb.py"
    notebook.write_text("# a notebook\n")
    out = _probe("report", "--notebook", str(notebook), "--out", str(tmp_path / "nb.html"), "-p", "results_dir", "r")
    assert out == "RESULT 0 [False] False"  # the command ran (the probe was called) without torch


def test_a_diverged_run_is_still_exit_status_3(tmp_path, monkeypatch, capsys):
    """The entry catches the error training raises (one class, now in a torch-free module)."""
    import timestep_lab.cli.report as report
    from timestep_lab.cli import main
    from timestep_lab.errors import NonFiniteLossError
    from timestep_lab.train import NonFiniteLossError as raised_by_training

    assert raised_by_training is NonFiniteLossError

    def diverge(*args, **kwargs):
        raise raised_by_training("non-finite loss at optimizer step 7")

    monkeypatch.setattr(report, "render_notebook", diverge)
    notebook = tmp_path / "nb.py"
    notebook.write_text("# a notebook\n")
    assert main(["report", "--notebook", str(notebook), "--out", str(tmp_path / "nb.html")]) == 3
    assert capsys.readouterr().err.strip().splitlines()[-1] == "error: non-finite loss at optimizer step 7"


def test_run_configs_are_checked_once_and_rechecked_when_changed(tmp_path):
    """workflow/checked.py: the record skips configs checked before; a changed or damaged record,
    or a changed config, checks again; an invalid config is refused, the valid ones before it kept."""
    import io

    import pytest

    from timestep_lab.config import ConfigError
    from timestep_lab.workflow.checked import check_run_configs

    record = tmp_path / ".snakemake" / "checked.json"
    runs = [("a", {"train": {"batch_size": 16}}), ("b", {"timesteps": {"name": "uniform"}})]

    def check(runs):
        log = io.StringIO()
        return check_run_configs(runs, "study.yaml", record, log=log), log.getvalue().strip()

    assert check(runs) == (2, "checked 2 run configs")
    assert check(runs) == (0, "2 run configs unchanged since last check")
    changed = [runs[0], ("b", {"timesteps": {"name": "uniform"}, "train": {"batch_size": 8}})]
    assert check(changed) == (1, "checked 1 run configs (1 unchanged since last check)")
    record.write_text("{not json")
    assert check(runs)[0] == 2
    bad = [("c", {"train": {"batch_size": 4}}), ("d", {"timesteps": {"name": "nope"}}), *runs]
    with pytest.raises(ConfigError, match=r"study.yaml \(run d\).*nope"):
        check(bad)
    assert check(bad[:1])[0] == 0  # c passed before d failed: recorded
