"""A study config as the workflow sees it: the YAML file, its schema defaults, and the run table.

:func:`load_plan` reads ``config/<study>.yaml``, fills in the defaults of
``workflow/schemas/config.schema.yaml`` exactly as Snakemake's ``validate(..., set_default=True)``
does in ``workflow/rules/common.smk``, builds the run table with
:func:`timestep_lab.workflow.study_runs` and checks every run config, so a study the workflow
would refuse is refused here with the same :class:`ConfigError`. :class:`Plan` then lists the run
ids each rule is expanded over, mirroring the input functions of ``common.smk``.

It knows which runs a rule covers; it knows nothing of FLOPs, devices or prices.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

import jsonschema

from timestep_lab.components import check_config
from timestep_lab.config import ConfigError, config_from_dict, load_yaml
from timestep_lab.config.schema import TRAINED_FEATURE_EXTRACTORS
from timestep_lab.processes.timeranges import chain_timesteps
from timestep_lab.workflow import Run, check_spelling, contribution_ranges, study_runs

__all__ = ["Plan", "load_plan", "plan_from_dict", "DATASETS", "schema_path"]

# Images per split and native image shape of the data sets `timestep_lab prepare` knows
# (resolution None: set by data.resolution). Only used for counts and disk sizes.
DATASETS: dict[str, dict[str, Any]] = {
    "digits": {"splits": {"train": 1438, "test": 359}, "resolution": 8, "channels": 1},
    "mnist5k": {"splits": {"train": 4000, "test": 1000, "all": 5000}, "resolution": 32, "channels": 1},
    "cifar10": {"splits": {"train": 50000, "test": 10000}, "resolution": 32, "channels": 3},
    "celebahq": {"splits": {"train": 30000}, "resolution": None, "channels": 3},
    "imagenet": {"splits": {"train": 1281167, "val": 50000}, "resolution": None, "channels": 3},
}

# The reports of workflow/rules/report.smk (one `report` job each) plus the index; the flow
# report only for a study with a flow_matching group (:meth:`Plan.reports`).
REPORTS = ("sampler_comparison", "schedules", "loss_profile", "slot_finetune", "batch_size",
           "timestep_contribution", "prediction_types", "consistency", "flow_matching")


def schema_path() -> Path | None:
    """``workflow/schemas/config.schema.yaml`` of this checkout (or of the current folder)."""
    rel = Path("workflow") / "schemas" / "config.schema.yaml"
    for root in (Path(__file__).resolve().parents[4], Path.cwd()):
        if (root / rel).is_file():
            return root / rel
    return None


def _with_defaults(study: dict[str, Any], source: str) -> dict[str, Any]:
    """Validate against the schema, filling in its defaults (Snakemake's ``set_default=True``)."""
    path = schema_path()
    if path is None:  # an installed package without the workflow folder: take the file as it is
        return study
    base = jsonschema.validators.validator_for(load_yaml(path))
    check_props = base.VALIDATORS["properties"]

    def set_defaults(validator, properties, instance, schema):
        for key, sub in properties.items():
            if isinstance(instance, dict) and isinstance(sub, dict) and "default" in sub:
                instance.setdefault(key, copy.deepcopy(sub["default"]))
        yield from check_props(validator, properties, instance, schema)

    validator = jsonschema.validators.extend(base, {"properties": set_defaults})(load_yaml(path))
    error = jsonschema.exceptions.best_match(validator.iter_errors(study))
    if error is not None:
        where = ".".join(str(k) for k in error.absolute_path)
        raise ConfigError(f"{source}: {where + ': ' if where else ''}{error.message}")
    return study


@dataclass(frozen=True)
class Plan:
    """A checked study and its run table; the ``*_runs`` methods mirror ``common.smk``."""

    study: dict[str, Any]
    runs: dict[str, Run]
    source: str

    @property
    def evaluation(self) -> dict[str, Any]:
        return self.study["evaluation"]

    @property
    def pretrained_reference(self) -> bool:
        return bool((self.study.get("reference") or {}).get("pretrained"))

    def trained_runs(self) -> list[str]:
        return [r for r in self.runs if not (r == "reference" and self.pretrained_reference)]

    def evaluated_runs(self) -> list[str]:
        return [r for r, run in self.runs.items() if run.groups]

    def progress_runs(self) -> list[str]:
        return [r for r, run in self.runs.items() if run.progress]

    def group_runs(self, group: str) -> list[str]:
        return [r for r, run in self.runs.items() if group in run.groups]

    def reports(self) -> list[str]:
        """The study's report jobs: a group's report only when the study has the group (the slot
        report: fine-tunes; consistency: its group's runs; workflow/rules/report.smk REPORT_NEEDS)."""
        needs = {"sampler_comparison": self.group_runs("sampler_comparison"), "schedules": self.group_runs("schedules"),
                 "slot_finetune": self.finetune_runs(), "batch_size": self.group_runs("batch_size"),
                 "prediction_types": self.group_runs("prediction_types"),
                 "consistency": self.group_runs("consistency"), "flow_matching": self.group_runs("flow_matching")}
        return [r for r in REPORTS if needs.get(r, True)]

    def finetune_runs(self) -> list[str]:
        return [r for r, run in self.runs.items() if run.extra.get("slot")]

    def control_runs(self) -> list[str]:
        """The uniform-t control fine-tunes of the slot analysis (one per seed)."""
        return [r for r, run in self.runs.items() if run.extra.get("control")]

    def profiled_runs(self) -> list[str]:
        """``profile_losses`` jobs: the reference, the slot fine-tunes, their controls and the batch-size runs
        (the toward-t=0 retraining and its uniform continuation included)."""
        out = ["reference", *self.finetune_runs(), *self.control_runs(), *self.group_runs("batch_size")]
        return list(dict.fromkeys(out))

    def prediction_runs(self) -> list[str]:
        """One run per prediction type of the prediction_types group (lowest seed)."""
        out: dict[str, str] = {}
        for r in sorted(self.group_runs("prediction_types"), key=lambda r: self.runs[r].axes["seed"]):
            out.setdefault(self.runs[r].axes["prediction"], r)
        return list(out.values())

    def consistency_runs(self) -> list[str]:
        """Runs of the consistency group with a constant optimizer schedule (their samples are compared)."""
        def schedule(r: str) -> str:
            return ((self.runs[r].config.get("optim") or {}).get("schedule") or {}).get("name", "constant")
        return [r for r in self.group_runs("consistency") if schedule(r) == "constant"]

    def contribution_labels(self) -> list[str]:
        return list(contribution_ranges(self.study))

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

    def optimal_profile(self) -> bool:
        return bool(((self.study.get("analyses") or {}).get("loss_profile") or {}).get("optimal"))

    def prepared_splits(self) -> list[str]:
        """Splits ``prepare_data`` writes: the train split, and the test split when a rule reads it."""
        data = self.study["data"]
        splits = [data["train_split"]]
        if self.evaluation["extractor"] in TRAINED_FEATURE_EXTRACTORS:  # train_features reads the test split
            splits.append(data.get("test_split") or "test")
        if data.get("test_split"):  # the floor reads it
            splits.append(data["test_split"])
        splits.append(data.get("test_split") or data["train_split"])  # the contribution analysis' ground truth
        return list(dict.fromkeys(splits))

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


def plan_from_dict(study: Mapping[str, Any], source: str = "study") -> Plan:
    """The plan of an in-memory study config (defaults filled in, every run checked)."""
    check_spelling(study, source)  # as common.smk: a retired key is named before the schema check
    data = _with_defaults(copy.deepcopy(dict(study)), source)
    runs = study_runs(data, source=source)
    for run in runs.values():  # as common.smk does at DAG build: registry names and parameters
        where = f"{source} (run {run.id})"
        check_config(config_from_dict(run.config, where), where)
    contribution_ranges(data)
    return Plan(data, runs, source)


def load_plan(path: str | Path) -> Plan:
    """The plan of ``config/<study>.yaml``; :class:`ConfigError` names the file and key on failure."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"{path}: no such study config")
    data = load_yaml(path)
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a mapping at the top level")
    return plan_from_dict(data, str(path))
