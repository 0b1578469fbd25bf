"""The suite's own parallel setup (`make test`: two pytest-xdist workers, tests/xdist_groups.py):
the Makefile passes the options and CI runs it; every test on the SLURM cluster or its rehearsal
is in xdist group "study", every test on the smoke study in group "smoke", both collected first;
and under those options each group really is one work unit whose session fixtures are set up
once, the two in different workers (a small xdist session of its own, a few seconds)."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from worktree import ROOT
from xdist_groups import GROUP_ORDER, SMOKE_GROUP, STUDY_GROUP, once_per_run, study_group, uses_study_fixtures

TESTS = Path(__file__).resolve().parent


def make_test_pytest_args() -> list[str]:
    """The pytest options of the Makefile's `test` recipe, its variables at their defaults."""
    text = (ROOT / "Makefile").read_text()
    defaults = dict(re.findall(r"^(\w+)\s*\?=\s*(.*?)\s*$", text, flags=re.M))
    recipe = re.search(r"^test:.*\n((?:\t.*\n)+)", text, flags=re.M)
    assert recipe, "no test target in the Makefile"
    (line,) = [ln for ln in recipe.group(1).splitlines() if " -m pytest" in ln]
    line = re.sub(r"\$\((\w+)\)", lambda m: defaults.get(m.group(1), m.group(0)), line)
    return shlex.split(line.split(" -m pytest", 1)[1])


def test_make_test_runs_two_workers_that_keep_groups_and_ci_runs_make_test():
    args = make_test_pytest_args()
    assert args[args.index("-n") + 1] == "2", args
    assert args[args.index("--dist") + 1] == "loadgroup", args
    ci = [ln.strip() for ln in (ROOT / ".ci" / "run").read_text().splitlines() if ln.strip()]
    assert ci[-1] == "make test"
    assert "make test" in (ROOT / "README.md").read_text()


def test_tests_on_the_cluster_or_the_studies_are_their_groups_collected_first(request):
    items = request.session.items
    grouped = [item for item in items if uses_study_fixtures(item)]
    assert items[:len(grouped)] == grouped  # the long chains start first
    slow = [item.get_closest_marker("slow") is not None for item in items[len(grouped):]]
    assert slow == sorted(slow, reverse=True)  # then the slow tests: none of them handed out last
    assert [study_group(item) for item in grouped] == sorted((study_group(i) for i in grouped), key=GROUP_ORDER.index)
    loadgroup = getattr(request.config.option, "loadgroup", False)
    for item in items:
        groups = [m.args[0] if m.args else m.kwargs.get("name") for m in item.iter_markers("xdist_group")]
        if item in grouped:
            assert groups == [study_group(item)], (item.nodeid, groups)
            if loadgroup:  # what the scheduler reads (tests/xdist_groups.py)
                assert item.nodeid.endswith(f"@{groups[0]}"), item.nodeid
        # the fixture closure finds them: test_slurm.py's tests and test_pipeline.py's `study` tests
        if item.path.name == "test_slurm.py":
            assert study_group(item) == STUDY_GROUP, item.nodeid
        if item.path.name == "test_pipeline.py" and "study" in item.fixturenames:
            assert study_group(item) == SMOKE_GROUP, item.nodeid


CONFTEST = f"""
import os
import sys

import pytest

sys.path.insert(0, {str(TESTS)!r})
from xdist_groups import once_per_run, pytest_collection_modifyitems  # noqa: E402,F401


def record(request):
    with open(os.environ["PROBE_LOG"], "a") as fh:
        fh.write(f"{{os.environ.get('PYTEST_XDIST_WORKER')}} {{request.node.nodeid}}\\n")


@pytest.fixture(scope="session")
def slurm_cluster(tmp_path_factory):
    once_per_run(tmp_path_factory, "slurm_cluster")


@pytest.fixture(scope="session")
def cluster_rehearsal(slurm_cluster, tmp_path_factory):
    once_per_run(tmp_path_factory, "cluster_rehearsal")


@pytest.fixture(scope="session")
def smoke_study(tmp_path_factory):
    once_per_run(tmp_path_factory, "smoke_study")
"""

PIPELINE = """
import pytest
from conftest import record

@pytest.fixture(scope="module")
def study(smoke_study):
    return smoke_study

@pytest.mark.parametrize("i", range(3))
def test_on_study(i, study, request):
    record(request)

@pytest.mark.parametrize("i", range(8))
def test_plain_a(i, request):
    record(request)
"""

SLURM = """
import pytest
from conftest import record

def test_on_cluster(slurm_cluster, request):
    record(request)

def test_on_cluster_study(slurm_cluster, cluster_rehearsal, request):
    record(request)

@pytest.mark.parametrize("i", range(8))
def test_plain_b(i, request):
    record(request)
"""


def test_the_study_group_is_one_work_unit_under_make_tests_options(tmp_path):
    """A small session with the Makefile's options, the real hook and stand-in session fixtures
    (each fails if a second worker sets it up): the 2 tests on the cluster run in one worker and
    the 3 on the smoke study in the other, each group before any other test there, and the two
    workers share the rest."""
    project = tmp_path / "project"
    project.mkdir()
    (project / "conftest.py").write_text(CONFTEST)
    (project / "test_a_pipeline.py").write_text(PIPELINE)
    (project / "test_b_slurm.py").write_text(SLURM)
    log = tmp_path / "probe.log"
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}  # not this run's worker
    env["PROBE_LOG"] = str(log)
    r = subprocess.run([sys.executable, "-m", "pytest", *make_test_pytest_args(), "-p", "no:cacheprovider",
                        f"--basetemp={tmp_path / 'basetemp'}", str(project)],
                       cwd=project, env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    ran = [line.split(" ", 1) for line in log.read_text().splitlines()]
    assert len(ran) == 21, ran
    workers = {}
    for group, marker, n in ((STUDY_GROUP, "on_cluster", 2), (SMOKE_GROUP, "on_study", 3)):
        tests = [(worker, nodeid) for worker, nodeid in ran if marker in nodeid]
        assert len(tests) == n and all(nodeid.endswith(f"@{group}") for _, nodeid in tests), tests
        (workers[group],) = {w for w, _ in tests}
        assert [nodeid for w, nodeid in ran if w == workers[group]][:n] == [nodeid for _, nodeid in tests]
    assert workers[STUDY_GROUP] != workers[SMOKE_GROUP]  # the two long chains side by side
    assert {w for w, _ in ran} == {"gw0", "gw1"}, ran


def test_a_session_fixture_set_up_by_a_second_worker_fails(tmp_path, monkeypatch):
    class Factory:
        def getbasetemp(self):
            return tmp_path / f"popen-{os.environ['PYTEST_XDIST_WORKER']}"

    monkeypatch.setenv("PYTEST_XDIST_WORKER", "gw0")
    once_per_run(Factory(), "slurm_cluster")
    once_per_run(Factory(), "smoke_study")
    monkeypatch.setenv("PYTEST_XDIST_WORKER", "gw1")
    with pytest.raises(pytest.fail.Exception, match="already set up by xdist worker gw0.*group 'study'"):
        once_per_run(Factory(), "slurm_cluster")
    monkeypatch.delenv("PYTEST_XDIST_WORKER")
    once_per_run(Factory(), "slurm_cluster")  # one process: nothing to check
