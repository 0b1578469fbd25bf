"""A study as the workflow plans it: its validated config, its run configs and its jobs.

:func:`load_plan` asks Snakemake for the study's DAG (:func:`dag.study_dag`): the config as
``workflow/rules/common.smk`` loaded and validated it (schema defaults filled in there, not here),
every run's ``run.yaml`` as its ``run_config`` job writes it, and every job of the default target
with its wildcards and the runs whose files it reads. A study the workflow refuses is refused with
the workflow's own error line (:class:`ConfigError`). Which runs a rule covers is the DAG's
answer, never worked out here.

It knows the plan; it knows nothing of FLOPs, devices or prices.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from timestep_lab.config import ConfigError, dump_yaml
from timestep_lab.cost.estimate.dag import Job, StudyDag, study_dag
from timestep_lab.processes.timeranges import chain_timesteps
from timestep_lab.workflow import contribution_ranges

__all__ = ["Plan", "load_plan", "plan_from_dict", "DATASETS"]

# Images per split and native image shape of the data sets `timestep_lab prepare` knows
# (resolution None: set by data.resolution): counts of data not yet prepared, for the work of the
# jobs that read a whole split and for disk sizes.
DATASETS: dict[str, dict[str, Any]] = {
    "digits": {"splits": {"train": 1438, "test": 359}, "resolution": 8, "channels": 1},
    "mnist5k": {"splits": {"train": 4000, "test": 1000, "all": 5000}, "resolution": 32, "channels": 1},
    "cifar10": {"splits": {"train": 50000, "test": 10000}, "resolution": 32, "channels": 3},
    "celebahq": {"splits": {"train": 30000}, "resolution": None, "channels": 3},
    "imagenet": {"splits": {"train": 1281167, "val": 50000}, "resolution": None, "channels": 3},
}


@dataclass(frozen=True)
class Plan:
    """A study's DAG: ``study`` the validated config, ``runs`` run id -> run.yaml, ``jobs`` every job."""

    study: dict[str, Any]
    runs: dict[str, dict[str, Any]]
    jobs: tuple[Job, ...]
    source: str

    @classmethod
    def of(cls, dag: StudyDag) -> "Plan":
        return cls(dag.config, dag.runs, dag.jobs, dag.source)

    @property
    def evaluation(self) -> dict[str, Any]:
        return self.study["evaluation"]

    def vae_config(self) -> str | None:
        """The text of the study's VAE folder's ``config.json`` (``latent.vae``, relative to where the
        estimate runs: the project root), None when it is not there (priced as sd-vae-ft-ema)."""
        folder = (self.study.get("latent") or {}).get("vae")
        path = Path(str(folder)) / "config.json" if folder else None
        return path.read_text() if path is not None and path.is_file() else None

    def rules(self) -> list[str]:
        """The rules of the DAG in Snakemake's topological order (of their first jobs)."""
        return list(dict.fromkeys(j.rule for j in self.jobs))

    def rule_jobs(self, rule: str) -> list[Job]:
        return [j for j in self.jobs if j.rule == rule]

    def local_rules(self) -> set[str]:
        return {j.rule for j in self.jobs if j.local}

    def contribution_chain(self) -> list[int]:
        """The original timesteps of the contribution analysis' chain."""
        T = int(((self.study.get("base") or {}).get("diffusion") or {}).get("num_timesteps", 1000))
        sample = ((self.study.get("analyses") or {}).get("timestep_contribution") or {}).get("sample") or {}
        return chain_timesteps(T, sample.get("steps"), sample.get("spacing", "uniform"))

    def contribution_evaluations(self) -> int:
        """Network evaluations per sample of the contribution job: the whole chain once ("none"),
        plus every step below each replaced range (a replaced step needs no network)."""
        used = self.contribution_chain()
        ranges = [r for r in contribution_ranges(self.study).values() if r is not None]
        return len(used) + sum(sum(u < lo for u in used) for lo, _ in ranges)

    def image_shape(self) -> tuple[int, int]:
        """``(resolution, channels)`` of the prepared images."""
        data = self.study["data"]
        known = DATASETS.get(data["dataset"], {})
        res = data.get("resolution") or known.get("resolution")
        if not res:
            raise ConfigError(f"{self.source}: data.resolution: needed for data set {data['dataset']!r}")
        return int(res), int(known.get("channels", 3))

    def split_size(self, split: str) -> int:
        sizes = DATASETS.get(self.study["data"]["dataset"], {}).get("splits", {})
        if split not in sizes:
            raise ConfigError(f"{self.source}: data: no image count known for split {split!r} of "
                              f"{self.study['data']['dataset']!r} (known: {sorted(sizes)})")
        return int(sizes[split])


def load_plan(path: str | Path, snakefile: str | Path = "Snakefile") -> Plan:
    """The plan of ``config/<study>.yaml`` as ``snakefile`` builds it; :class:`ConfigError` names
    the file and key on failure."""
    return Plan.of(study_dag(path, snakefile))


def plan_from_dict(study: Mapping[str, Any], source: str = "study", snakefile: str | Path = "Snakefile") -> Plan:
    """The plan of an in-memory study config (written to a temporary file for Snakemake to read)."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / Path(source).name
        path.write_text(dump_yaml(dict(study)))
        try:
            plan = load_plan(path, snakefile)
        except ConfigError as exc:  # name the study as the caller knows it
            raise ConfigError(str(exc).replace(str(path), source)) from None
    return Plan(plan.study, plan.runs, plan.jobs, source)
