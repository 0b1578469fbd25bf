"""The SLURM tests' snakemake (tests/slurm_polls.py) caps the executor's status-check back-off."""

from __future__ import annotations

import asyncio
import inspect
import sys
import types

import slurm_polls


def test_the_back_off_is_capped_and_every_job_still_comes_back(monkeypatch):
    class FakeExecutor:  # the plugin's shape: an async generator that sets the next wait at its end
        next_seconds_between_status_checks = None

        async def check_active_jobs(self, active_jobs):
            for job in active_jobs:
                yield job
            self.next_seconds_between_status_checks = 42.0  # the plugin after 4 quiet checks

    monkeypatch.setitem(sys.modules, "snakemake_executor_plugin_slurm", types.SimpleNamespace(Executor=FakeExecutor))
    assert slurm_polls.cap_status_polls(2.0)
    ex = FakeExecutor()

    async def drain(jobs):
        return [j async for j in ex.check_active_jobs(jobs)]

    assert asyncio.run(drain(["a", "b"])) == ["a", "b"] and ex.next_seconds_between_status_checks == 2.0
    ex.next_seconds_between_status_checks = None
    assert asyncio.run(drain([])) == [] and ex.next_seconds_between_status_checks == 2.0


def test_the_installed_plugin_has_what_the_cap_relies_on():
    """If a plugin update renames these, the cap would silently do nothing: fail here instead."""
    from snakemake_executor_plugin_slurm import Executor

    assert inspect.isasyncgenfunction(Executor.check_active_jobs)
    assert isinstance(inspect.getattr_static(Executor, "next_seconds_between_status_checks"), property)
