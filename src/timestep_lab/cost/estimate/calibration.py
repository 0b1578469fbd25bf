"""Per-rule CPU throughput fitted to what finished studies cost on this machine.

After a study has run, every job has left its exact CPU seconds in its log and its benchmark
file (:mod:`timestep_lab.cost.measured`). :func:`observe` pairs each measured job with the
work :func:`rules.rule_costs` says it does (matched by rule and job name), and :class:`Store`
keeps those observations per machine and per study in one JSON file that the caller names
(``python -m timestep_lab estimate --calibration``). :func:`fit` turns them into one model per
rule, for the jobs of every study measured on the machine together:

    cpu_s(job) = overhead + a * GFLOP(job) + b * steps(job)                       (a, b, overhead >= 0)

An observation may also be a whole rule of a study (``jobs`` > 1: its jobs' work summed, its
CPU-s summed; the measured studies of :func:`measured_studies`, of which only per-rule totals
were kept): the overhead then counts once per job.

``GFLOP`` is the job's network work (FlopCounterMode counts, every pass it makes: training,
sampling, feature extraction), ``steps`` its optimizer steps (training only: the optimizer,
EMA and sampler bookkeeping cost per step, whatever the batch), ``overhead`` what a job of the
rule costs whatever its size (reading inputs, scoring statistics, writing outputs). The
coefficients minimise the squared *relative* error over the jobs (non-negative least squares,
reweighted by the predicted cost until it settles), so a small study's jobs weigh as much as a
large one's, and measurement noise does not pull the estimate low.
Where the jobs give no spread of a quantity (every job of the rule the same size) that quantity
cannot be told apart from the overhead: the rule is then fitted as proportional to its work
(no overhead), and says so. A rule whose jobs carry no work is fitted as a per-job overhead; a
local rule (run inside Snakemake's process) costs no CPU of its own, as ``study_cost`` counts it.

Each fit carries its range: the ratio of predicted to measured cost of the rule, per study it was
fitted to; the estimate's low and high ends divide by the largest and smallest of those ratios.

Knows rules' work and measured costs; reads only the paths it is given.
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Mapping

import numpy as np
from scipy.optimize import nnls

from timestep_lab.artifacts.io import atomic_write_json
from timestep_lab.config import ConfigError
from timestep_lab.cost.estimate.rules import RuleCost, Work

__all__ = ["FORMAT", "MEASURED_FORMAT", "measured_studies", "rule_totals", "Observation", "RuleFit", "Calibration",
           "Store", "job_features", "observe", "fit", "predict"]

FORMAT = "timestep_lab.calibration/1"
MEASURED_FORMAT = "timestep_lab.measured_studies/1"
FEATURES = ("gflop", "steps")
SPREAD = 1.05  # a quantity whose largest value is within 5% of its smallest has no spread to fit


def job_features(work: Iterable[Work]) -> dict[str, float]:
    """The quantities a job's cost is fitted on: GFLOP of all its passes, optimizer steps."""
    work = list(work)
    return {"gflop": sum(w.flops for w in work) / 1e9, "steps": float(sum(w.steps for w in work))}


@dataclass(frozen=True)
class Observation:
    """One measured job: its rule and name, its exact CPU-s, how it started when its usage line
    names a start (None: a process of its own), and its work (:func:`job_features`)."""

    rule: str
    job: str
    cpu_s: float
    start: str | None
    features: Mapping[str, float]

    def as_dict(self) -> dict:
        return {"rule": self.rule, "job": self.job, "cpu_s": float(f"{self.cpu_s:.6g}"), "start": self.start,
                "features": {k: float(f"{v:.6g}") for k, v in self.features.items()}}


def observe(rules: Iterable[RuleCost], measured: Mapping[str, Mapping[str, object]],
            local: Iterable[str] = ()) -> tuple[list[Observation], list[str]]:
    """Pair the jobs of ``measured`` (``{rule: {job: Usage or None}}``, each job's usage line as
    :func:`timestep_lab.cost.measured.job_usages` reads it) with their work in ``rules``.

    A job is observed at its usage line's CPU; a job of a ``local`` rule without one at 0 CPU-s (it
    ran inside Snakemake's process); any other job without a usage line (its CPU only sampled) is
    left out. Returns the observations and the
    measured jobs the plan does not know (its config changed since the study ran), as ``rule/job``."""
    local = set(local)
    by_rule = {r.rule: r for r in rules}
    out: list[Observation] = []
    unknown: list[str] = []
    for rule, jobs in measured.items():
        cost = by_rule.get(rule)
        for job, usage in jobs.items():
            if cost is None or job not in cost.job_work:
                unknown.append(f"{rule}/{job}")
            elif usage is not None or rule in local:
                cpu, start = (float(usage.cpu_s), usage.start) if usage is not None else (0.0, None)
                out.append(Observation(rule, job, cpu, start, job_features(cost.job_work[job])))
    return out, unknown


@dataclass(frozen=True)
class RuleFit:
    """``cpu_s = overhead + per_gflop * GFLOP + per_step * steps`` for one rule's jobs."""

    rule: str
    overhead: float
    per_gflop: float
    per_step: float
    jobs: int
    studies: tuple[str, ...]
    low: float  # the estimate's low end as a factor of the central figure (<= 1)
    high: float  # its high end (>= 1)
    note: str = ""

    def predict(self, features: Mapping[str, float]) -> float:
        return (self.overhead * features.get("jobs", 1.0) + self.per_gflop * features.get("gflop", 0.0)
                + self.per_step * features.get("steps", 0.0))

    def describe(self) -> str:
        parts = [f"{self.overhead:.2f} CPU-s/job"] if self.overhead else []
        if self.per_gflop:
            parts.append(f"{1 / self.per_gflop:.1f} GFLOP/CPU-s")
        if self.per_step:
            parts.append(f"{self.per_step * 1000:.1f} CPU-ms/step")
        return " + ".join(parts) or "no CPU of its own"


def predict(rule_fit: RuleFit, work: Iterable[Work]) -> float:
    return rule_fit.predict(job_features(work))


def _spread(values: np.ndarray) -> bool:
    """Whether the jobs differ in this quantity enough to tell its cost from the overhead."""
    return values.size > 1 and values.max() > 0 and values.max() > SPREAD * values.min()


def _relative_fit(design: np.ndarray, y: np.ndarray, rounds: int = 20) -> np.ndarray:
    """Non-negative ``c`` with ``design @ c ~ y`` in relative terms: iteratively reweighted least
    squares with weights 1 / predicted (a Gamma model: the spread of a job's cost grows with its
    size). Dividing by the *measured* cost instead would pull every estimate low (a job measured
    slow weighs less than one measured fast); dividing by the prediction does not."""
    scale = y.copy()
    coef = np.zeros(design.shape[1])
    for _ in range(rounds):
        coef, _ = nnls(design / scale[:, None], y / scale)
        pred = design @ coef
        new = np.maximum(pred, 1e-3 * y)
        if np.allclose(new, scale, rtol=1e-6):
            break
        scale = new
    return coef


def fit_rule(rule: str, obs: list[tuple[str, Observation]]) -> RuleFit:
    """One rule's fit from ``(study, observation)`` pairs (module docstring)."""
    studies = tuple(sorted({s for s, _ in obs}))
    y = np.array([o.cpu_s for _, o in obs], dtype=float)
    if not (y > 0).any():
        return RuleFit(rule, 0.0, 0.0, 0.0, len(obs), studies, 1.0, 1.0, "no CPU of its own (a local rule)")
    keep = y > 0
    x = {k: np.array([o.features.get(k, 0.0) for _, o in obs], dtype=float) for k in FEATURES}
    jobs = np.array([o.features.get("jobs", 1.0) for _, o in obs], dtype=float)  # the overhead's count
    columns, note = [], ""
    for k in FEATURES:
        if (x[k][keep] > 0).any():
            columns.append(k)
    spread = [k for k in columns if _spread(x[k][keep])]
    with_overhead = not columns or bool(spread)
    if columns and not spread:
        note = "every job the same size: cost taken as proportional to its work"
    elif len(spread) < len(columns):  # keep the quantities that vary; the others ride on the overhead
        columns = spread
    design = np.stack(([jobs] if with_overhead else []) + [x[k] for k in columns], axis=1)
    coef = _relative_fit(design[keep], y[keep])
    values = dict(zip((["overhead"] if with_overhead else []) + columns, coef.tolist()))
    result = RuleFit(rule, values.get("overhead", 0.0), values.get("gflop", 0.0), values.get("steps", 0.0),
                     len(obs), studies, 1.0, 1.0, note)
    ratios = []
    for study in studies:
        pred = sum(result.predict(o.features) for s, o in obs if s == study)
        meas = sum(o.cpu_s for s, o in obs if s == study)
        if meas > 0 and pred > 0:
            ratios.append(pred / meas)
    if ratios:
        result = RuleFit(result.rule, result.overhead, result.per_gflop, result.per_step, result.jobs, studies,
                         min(1.0, 1.0 / max(ratios)), max(1.0, 1.0 / min(ratios)), note)
    return result


@dataclass(frozen=True)
class Calibration:
    """The fitted rules of one machine, and where they came from."""

    machine: str
    rules: dict[str, RuleFit]
    studies: tuple[str, ...]
    jobs: int
    helper_cpu_s: dict[str, float]  # per helper row ("(NAME)"), the mean CPU of one (one per snakemake run)
    source: str  # the store's path

    def describe(self) -> str:
        return (f"calibrated: per-rule CPU fit to {self.jobs} measured jobs or rules' totals of "
                f"{', '.join(self.studies)} ({self.source}; this machine: {self.machine})")


def rule_totals(rules: Iterable[RuleCost], measured: Mapping[str, float]) -> list[Observation]:
    """One observation per measured rule of a study (``measured``: rule -> CPU-s of all its jobs):
    its jobs' work summed, ``jobs`` their number (the overhead's count)."""
    out = []
    for cost in rules:
        if cost.rule in measured:
            features = job_features(w for work in cost.job_work.values() for w in work)
            out.append(Observation(cost.rule, f"({cost.jobs} jobs)", float(measured[cost.rule]), None,
                                   {**features, "jobs": float(cost.jobs)}))
    return out


def measured_studies(path: str | Path) -> dict[str, dict]:
    """The studies measured for the estimate's own calibration (a file of this package,
    ``measured_studies.json``: per study its commit, date, conditions, per-rule totals as
    :func:`rule_totals` and helper rows), as :meth:`Store.machine` gives a machine's studies."""
    import json

    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError) as exc:
        raise ConfigError(f"{path}: not a measured-studies file ({exc})") from None
    if not isinstance(data, dict) or data.get("format") != MEASURED_FORMAT:
        raise ConfigError(f"{path}: not a measured-studies file (format {MEASURED_FORMAT!r} expected)")
    return data["studies"]


def fit(studies: Mapping[str, Mapping], machine: str, source: str) -> Calibration | None:
    """A :class:`Calibration` from a machine's stored studies (``Store.machine(...)``), or None."""
    pairs: dict[str, list[tuple[str, Observation]]] = {}
    helpers: dict[str, list[float]] = {}
    for study, rec in sorted(studies.items()):
        for d in rec.get("jobs", []):
            o = Observation(d["rule"], d["job"], float(d["cpu_s"]), d.get("start"), d.get("features", {}))
            pairs.setdefault(o.rule, []).append((study, o))
        # a record made before the serving processes were named (its "server_cpu_s") adds no row until
        # the study is recorded again (any `estimate` of it without --no-record)
        for row, cpu in rec.get("helper_cpu_s", {}).items():
            helpers.setdefault(row, []).extend(float(c) for c in cpu)
    if not pairs:
        return None
    rules = {rule: fit_rule(rule, obs) for rule, obs in pairs.items()}
    return Calibration(machine, rules, tuple(sorted(studies)), sum(len(v) for v in pairs.values()),
                       {row: sum(cpu) / len(cpu) for row, cpu in helpers.items() if cpu}, source)


class Store:
    """The calibration file: ``{"format", "machines": {machine: {"studies": {study: record}}}}``
    where a record holds the study's observed jobs, its helper rows' CPU per run, the date and
    the config it was matched against. Recording a study replaces its earlier record."""

    def __init__(self, path: str | Path, data: dict | None = None):
        self.path = Path(path)
        self.data = data or {"format": FORMAT, "machines": {}}

    @classmethod
    def load(cls, path: str | Path) -> "Store":
        """The store at ``path`` (empty if there is none); :class:`ConfigError` names a bad file."""
        path = Path(path)
        if not path.exists():
            return cls(path)
        import json

        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError) as exc:
            raise ConfigError(f"{path}: not a calibration file ({exc})") from None
        if not isinstance(data, dict) or data.get("format") != FORMAT:
            raise ConfigError(f"{path}: not a calibration file (format {FORMAT!r} expected)")
        return cls(path, data)

    def machine(self, machine: str) -> dict[str, dict]:
        return self.data["machines"].get(machine, {}).get("studies", {})

    def record(self, machine: str, study: str, observations: list[Observation],
               helper_cpu_s: Mapping[str, list[float]], config: str) -> None:
        studies = self.data["machines"].setdefault(machine, {"studies": {}})["studies"]
        studies[study] = {"recorded": datetime.date.today().isoformat(), "config": config,
                          "jobs": [o.as_dict() for o in observations],
                          "helper_cpu_s": {row: [round(c, 3) for c in cpu] for row, cpu in helper_cpu_s.items()}}

    def save(self) -> None:
        atomic_write_json(self.path, self.data)

    def calibration(self, machine: str) -> Calibration | None:
        return fit(self.machine(machine), machine, str(self.path))
