"""What to ask the cluster for: per training job the device-hours, whether one job fits the
configured ``resources.runtime_min``, and the time limit and resubmissions to ask for.

The workflow gives every training job ``resources.runtime_min`` minutes (SLURM ``--time``) and
every other GPU job ``max(10, runtime_min // 4)`` (``train_resources`` / ``gpu_resources`` in
``workflow/rules/common.smk``). A training job stopped at its limit is resubmitted (the cluster
profile's ``retries``) and resumes from its last checkpoint, so each resubmission may redo up to
``train.checkpoint_every_kimg`` of training (none where the job saves when SLURM warns it of the
limit); a sampling or scoring job has no checkpoint and must fit in one go. Everything here is
judged at the slow end of the estimate's range: the figure a budget must survive.

    wall (per job)   = device-hours / GPUs of the job                   (linear scaling assumed)
    submissions      = 1 + ceil((wall - limit) / (limit - redo))         when wall > limit
    runtime to ask   = wall x 1.1, rounded up to 15 minutes              (start-up, I/O, noise)

Knows the plan and a priced estimate; knows nothing of Snakemake or SLURM.
"""

from __future__ import annotations

import math
import textwrap
from dataclasses import asdict, dataclass
from typing import Any, Protocol, Sequence

from timestep_lab.config import config_from_dict
from timestep_lab.cost.estimate.study import Plan
from timestep_lab.cost.estimate.throughput import DEVICES

__all__ = ["TrainJobs", "EvalJob", "Advice", "advise", "format_advice", "clock", "MARGIN"]

MARGIN = 1.10  # the time asked for over the slow end of the estimate
ROUND_MIN = 15


class Priced(Protocol):
    """What :func:`advise` reads of an estimate (``table.Estimate``, which imports this module):
    its rows and its total hours with their range."""

    rows: Sequence[Any]
    gpu_hours: float
    low_hours: float
    high_hours: float


@dataclass(frozen=True)
class TrainJobs:
    """Training jobs of the same size: their device-hours and wall hours each (central, low, high)."""

    runs: int
    model: str
    images: int
    hours: tuple[float, float, float]
    wall: tuple[float, float, float]
    redo_h: float  # wall hours of one checkpoint interval at the slow end: redone per resubmission
    submissions: int | None  # to finish at the slow end within runtime_min; None: never (redo >= limit)
    submissions_saved: int  # the same when the job saves at the time limit (nothing redone)
    ask_min: int  # runtime_min that fits one job at the slow end with MARGIN


@dataclass(frozen=True)
class EvalJob:
    """The longest job of a GPU rule other than training, against its time limit."""

    rule: str
    job: str
    wall: tuple[float, float, float]
    limit_min: int

    @property
    def fits(self) -> bool:
        return self.wall[2] * 60 <= self.limit_min


@dataclass(frozen=True)
class Advice:
    unit: str  # "GPU-h" or "CPU-core-h"
    runtime_min: int
    devices_per_job: int  # GPUs per training job (1 on the CPU: one-thread jobs)
    retries: int | None  # the cluster profile's resubmissions, when known
    train: list[TrainJobs]
    evaluation: list[EvalJob]
    total: tuple[float, float, float]

    def as_dict(self) -> dict:
        return asdict(self)


def clock(minutes: float) -> str:
    """``2430`` -> ``"40:30:00"`` (SLURM's ``--time`` format, hours may exceed 24)."""
    m = int(math.ceil(minutes))
    return f"{m // 60}:{m % 60:02d}:00"


def _ask(wall_h: float) -> int:
    return int(math.ceil(wall_h * 60 * MARGIN / ROUND_MIN) * ROUND_MIN)


def _submissions(wall_h: float, limit_h: float, redo_h: float) -> int | None:
    if wall_h <= limit_h:
        return 1
    if redo_h >= limit_h:
        return None
    return 1 + math.ceil((wall_h - limit_h) / (limit_h - redo_h))


def advise(plan: Plan, est: Priced, device: str, retries: int | None = None) -> Advice | None:
    """The budget of ``est`` (priced from ``plan`` on ``device``, a key of ``DEVICES``): training
    jobs grouped by size, the longest job of every other GPU rule, the study's total. None when
    training is not priced."""
    gpu = DEVICES[device].gpu
    res = plan.study["resources"]
    runtime = int(res.get("runtime_min") or 60)
    per_job = max(1, int(res.get("gpus") or 0)) if gpu else 1
    rows = {r.cost.rule: r for r in est.rows}
    train = rows.get("train")
    if train is None or train.gpu_hours is None:
        return None
    groups: dict[tuple, list[str]] = {}
    info: dict[tuple, tuple] = {}
    for job, (c, lo, hi) in train.job_seconds.items():
        work = train.cost.job_work[job]
        images = sum(w.images for w in work)
        cfg = config_from_dict(plan.runs[job], f"{plan.source} (run {job})")
        redo_images = min(images, int(round(cfg.train.checkpoint_every_kimg * 1000))) if cfg.train.checkpoint_every_kimg else images
        key = (work[0].model if work else "", images, f"{hi:.3g}")
        groups.setdefault(key, []).append(job)
        info[key] = (c, lo, hi, redo_images * (hi / images if images else 0.0))
    out = []
    for key, jobs in groups.items():
        c, lo, hi, redo_s = info[key]
        hours = (c / 3600, lo / 3600, hi / 3600)
        wall = tuple(h / per_job for h in hours)
        redo_h = redo_s / 3600 / per_job
        out.append(TrainJobs(len(jobs), key[0], key[1], hours, wall, redo_h,
                             _submissions(wall[2], runtime / 60, redo_h), _submissions(wall[2], runtime / 60, 0.0),
                             _ask(wall[2])))
    out.sort(key=lambda g: -g.hours[2] * g.runs)
    limit = max(10, runtime // 4)
    evaluation = []
    for r in est.rows:
        if r.cost.rule == "train" or not r.cost.gpu or not r.job_seconds:
            continue
        job, (c, lo, hi) = max(r.job_seconds.items(), key=lambda kv: kv[1][2])
        evaluation.append(EvalJob(r.cost.rule, job, (c / 3600, lo / 3600, hi / 3600), limit))
    return Advice("GPU-h" if gpu else "CPU-core-h", runtime, per_job, retries, out, evaluation,
                  (est.gpu_hours, est.low_hours, est.high_hours))


def _count(n: int) -> str:
    return f"{n / 1e6:.3g}M" if n >= 1e6 else f"{n / 1e3:.3g}k" if n >= 1e3 else str(n)


def _h(x: float) -> str:
    return f"{x:,.1f} h" if x >= 1 else f"{x * 60:.1f} min" if x * 60 >= 1 else f"{x * 3600:.1f} s"


def format_advice(a: Advice, show: int = 6) -> list[str]:
    """The budget as text lines (module docstring)."""
    unit = a.unit
    retries = f"the cluster profile resubmits a failed job {a.retries} times" if a.retries is not None else ""
    head = (f"budget (resources.runtime_min {a.runtime_min} = --time={clock(a.runtime_min)} per training job, "
            f"{a.devices_per_job} {'GPU' if unit == 'GPU-h' else 'core'}{'s' if a.devices_per_job > 1 else ''} each"
            + (f"; {retries}" if retries else "") + "):")
    out = [head]
    for g in a.train[:show]:
        c, lo, hi = g.hours
        cost = (f"{c:.3g} {unit} per job (range {lo:.3g}-{hi:.3g})" if unit == "GPU-h" else
                f"{_h(c)} of CPU per job (range {_h(lo)}-{_h(hi)})")
        line = (f"  {g.runs} training job{'s' if g.runs > 1 else ''} of {g.model}, {_count(g.images)} images: "
                f"{cost}, wall at the slow end {_h(g.wall[2])}: ")
        if g.submissions == 1:
            line += f"fits runtime_min {a.runtime_min} in one submission"
        elif g.submissions is None:
            line += (f"does not fit: one checkpoint interval ({_h(g.redo_h)}) is longer than runtime_min "
                     f"{a.runtime_min}; lower train.checkpoint_every_kimg or raise runtime_min")
        else:
            line += (f"does NOT fit runtime_min {a.runtime_min}: {g.submissions} submissions "
                     f"({g.submissions - 1} resubmissions, each redoing up to {_h(g.redo_h)} of training, one "
                     f"checkpoint interval; {g.submissions_saved} if the job saves at the time limit)")
            if a.retries is not None and g.submissions - 1 > a.retries:
                line += f", more than the profile's {a.retries}: pass --retries {g.submissions - 1}"
        line += f"; to ask for: runtime_min {g.ask_min} (--time={clock(g.ask_min)}, the slow end + 10%)"
        out.append(line)
    if len(a.train) > show:
        rest = a.train[show:]
        out.append(f"  ... {sum(g.runs for g in rest)} more training jobs in {len(rest)} smaller groups, "
                   f"{sum(g.hours[0] * g.runs for g in rest):.3g} {unit} together")
    for e in a.evaluation:
        verdict = "fits" if e.fits else f"does NOT fit (no resume): raise runtime_min to {4 * _ask(e.wall[2])}"
        out.append(f"  {e.rule}: longest job {e.job} {_h(e.wall[1])}-{_h(e.wall[2])} against its "
                   f"{e.limit_min}-min limit (runtime_min // 4): {verdict}")
    return [textwrap.fill(line, 110, subsequent_indent="    ", break_on_hyphens=False) for line in out]
