"""Running the suite on pytest-xdist workers (`make test`: ``-n 2 --dist loadgroup``).

The SLURM cluster, the cluster rehearsal and the smoke study are session fixtures of ONE process:
two clusters on one host would collide, and a study (minutes) must run once. So every test that
uses one of them, directly or through another fixture, joins its xdist group (one work unit: one
worker): ``study`` for the cluster and the paper-config rehearsal run through it (the suite's
longest chain: the rehearsal through SLURM, the tests on its results, the scancel test), ``smoke``
for the smoke study run locally. The groups come first in the collection, the longest first, so
the two workers start one each and then share everything else, the tests marked ``slow``
first. A test never needs the mark by
hand: the fixture closure decides.

Light on purpose (pytest only): conftest.py imports the hook from here, and
tests/test_suite_config.py runs it in a small xdist session of its own.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

STUDY_GROUP = "study"
SMOKE_GROUP = "smoke"
#: session fixture -> the xdist group of every test that uses it; groups in collection order
FIXTURE_GROUPS = {"slurm_cluster": STUDY_GROUP, "cluster_rehearsal": STUDY_GROUP, "smoke_study": SMOKE_GROUP}
GROUP_ORDER = (STUDY_GROUP, SMOKE_GROUP)
STUDY_FIXTURES = tuple(FIXTURE_GROUPS)


def study_group(item) -> str | None:
    """The xdist group ``item`` needs for its session studies (its fixture closure), or None.
    One test cannot need two groups' fixtures: they are set up in different workers."""
    groups = {FIXTURE_GROUPS[name] for name in getattr(item, "fixturenames", ()) if name in FIXTURE_GROUPS}
    if len(groups) > 1:
        raise pytest.UsageError(f"{item.nodeid} uses session fixtures of xdist groups {sorted(groups)}, which two "
                                "workers set up (tests/xdist_groups.py)")
    return groups.pop() if groups else None


def uses_study_fixtures(item) -> bool:
    """Whether ``item`` needs the session's SLURM cluster, cluster rehearsal or smoke study."""
    return study_group(item) is not None


def group_suffix(item) -> str | None:
    """``@name`` that xdist's loadgroup appends to the node id of a test with xdist_group marks
    (several groups joined, sorted, by ``_``), or None without one."""
    names = {str(m.args[0] if m.args else m.kwargs.get("name", "default")) for m in item.iter_markers("xdist_group")}
    return "@" + "_".join(sorted(names)) if names else None


@pytest.hookimpl(wrapper=True)
def pytest_collection_modifyitems(config, items):
    # before every other implementation (xdist's reads the marks): mark the groups, put them first
    groups = {item: study_group(item) for item in items}
    for item, group in groups.items():
        if group is not None:
            item.add_marker(pytest.mark.xdist_group(group))
    first = [item for group in GROUP_ORDER for item in items if groups[item] == group]
    grouped = set(map(id, first))
    rest = [item for item in items if id(item) not in grouped]
    # then the slow tests (minutes: the local paper rehearsals), then the rest: a long test handed
    # out last would keep one worker busy after the other has finished everything
    rest.sort(key=lambda item: item.get_closest_marker("slow") is None)  # stable within each part
    items[:] = first + rest
    result = yield
    # after xdist's: loadgroup passes a test's group to the scheduler as a node-id suffix, which
    # pytest-xdist 3.8.0 writes to Node._nodeid, a field pytest 9.2 no longer reads (node ids are
    # structured, Node._id): the suffix is lost and every test becomes its own work unit, so the
    # cluster would start once per worker (pytest-xdist issue #1386, open). Write the suffix where
    # this pytest reads it; with an xdist that already did, nothing changes.
    if getattr(config.option, "loadgroup", False):
        for item in items:
            suffix = group_suffix(item)
            if suffix is None or item.nodeid.endswith(suffix):
                continue
            node_id = getattr(item, "_id", None)
            if node_id is None or not hasattr(type(node_id), "parse"):
                raise pytest.UsageError(f"--dist loadgroup cannot group {item.nodeid} with this pytest and "
                                        "pytest-xdist (see tests/xdist_groups.py)")
            item._id = type(node_id).parse(item.nodeid + suffix)
            assert item.nodeid.endswith(suffix), item.nodeid
    return result


def once_per_run(tmp_path_factory, name: str) -> None:
    """Fail (instead of colliding) when a second xdist worker sets up session fixture ``name``:
    its tests were not kept in one group. A claim file in the run's shared temporary folder."""
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if not worker:
        return
    claim = Path(tmp_path_factory.getbasetemp()).parent / f"{name}.owner"  # basetemp/popen-gwN -> basetemp
    try:
        fd = os.open(claim, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
    except FileExistsError:
        pytest.fail(f"session fixture {name} was already set up by xdist worker {claim.read_text()}; "
                    f"{worker} needs it too: every test using it must be in xdist group "
                    f"{FIXTURE_GROUPS.get(name, STUDY_GROUP)!r}")
    with os.fdopen(fd, "w") as fh:
        fh.write(worker)
