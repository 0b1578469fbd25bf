"""Price the rules of a study on one device and print them: a table, then the total GPU-hours.

:func:`estimate` turns :func:`rule_costs` into :class:`Estimate` rows (GPU-hours from
:func:`throughput.rate` per unit of work, with the basis of each figure: measured, or the
assumed MFU); :func:`format_table` and :func:`to_json` render it. A rule that asks for no GPU
(bookkeeping, reports) shows no GPU-hours; on ``--gpu cpu`` the hours are CPU-core hours.

Knows rules, rates and layout; knows nothing of Snakemake or the CLI.
"""

from __future__ import annotations

from dataclasses import dataclass

from timestep_lab.estimate.rules import RuleCost, rule_costs
from timestep_lab.estimate.study import Plan
from timestep_lab.estimate.throughput import DEVICES, rate

__all__ = ["Row", "Estimate", "estimate", "format_table", "to_json", "human"]


@dataclass(frozen=True)
class Row:
    cost: RuleCost
    gpu_hours: float | None  # None: the rule runs without a GPU
    basis: str  # "measured ...", "assumed MFU 30%", or "" for CPU jobs


@dataclass(frozen=True)
class Estimate:
    study: str
    source: str
    device: str
    rows: list[Row]

    def total(self, attr: str) -> float:
        return sum(getattr(r.cost, attr) for r in self.rows)

    @property
    def gpu_hours(self) -> float:
        return sum(r.gpu_hours or 0.0 for r in self.rows)

    def hours(self, rule: str) -> float:
        return sum(r.gpu_hours or 0.0 for r in self.rows if r.cost.rule == rule)


def estimate(plan: Plan, device: str) -> Estimate:
    """Every rule of ``plan`` priced on ``device`` (a key of :data:`DEVICES`)."""
    dev = DEVICES[device]
    rows = []
    for cost in rule_costs(plan):
        if not cost.work:
            rows.append(Row(cost, None, ""))
            continue
        seconds, bases = 0.0, []
        for w in cost.work:
            precision = w.precision or ("bf16" if dev.gpu else "fp32")
            precision = "fp32" if not dev.gpu else precision  # CPU jobs run in fp32
            r = rate(w.model, w.flops_per_image, device, precision, w.kind)
            seconds += r.seconds_per_image * w.images
            bases.append(r.basis)
        rows.append(Row(cost, seconds / 3600.0, ", ".join(dict.fromkeys(bases))))
    return Estimate(plan.study["study"], plan.source, device, rows)


def human(x: float, unit: str = "") -> str:
    """``12345678`` -> ``12.3M`` (k, M, G, T, P, E, Z, Y; bytes with ``unit="B"``)."""
    if x == 0:
        return "0" + (" " + unit if unit else "")
    for prefix, scale in (("Y", 1e24), ("Z", 1e21), ("E", 1e18), ("P", 1e15), ("T", 1e12), ("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(x) >= scale:
            return f"{x / scale:.3g}{prefix}{unit}"
    return f"{x:.3g}{unit}" if isinstance(x, float) else f"{x}{unit}"


def _hours(h: float) -> str:
    return f"{h:,.1f}" if h >= 10 else f"{h:.3g}"


def format_table(est: Estimate) -> str:
    dev = DEVICES[est.device]
    head = ("rule", "jobs", "img trained", "img sampled", "net evals", "FLOPs", "GPU-h" if dev.gpu else "CPU-h",
            "disk", "basis")
    lines = []
    for r in est.rows:
        c = r.cost
        hours = "-" if r.gpu_hours is None else _hours(r.gpu_hours)
        lines.append((c.rule, str(c.jobs), human(c.images_trained), human(c.images_sampled), human(c.evaluations),
                      human(c.flops), hours, human(c.disk_bytes, "B"), r.basis or ("CPU job" if dev.gpu else "")))
    total = ("total", str(int(est.total("jobs"))), human(est.total("images_trained")), human(est.total("images_sampled")),
             human(est.total("evaluations")), human(est.total("flops")), _hours(est.gpu_hours),
             human(est.total("disk_bytes"), "B"), "")
    widths = [max(len(row[i]) for row in (head, *lines, total)) for i in range(len(head))]

    def fmt(row):
        return "  ".join(v.ljust(w) if i in (0, 8) else v.rjust(w) for i, (v, w) in enumerate(zip(row, widths))).rstrip()

    rule = "-" * len(fmt(head))
    out = [f"# {est.study} ({est.source}) on {dev.name}", fmt(head), rule, *map(fmt, lines), rule, fmt(total)]
    notes = [f"  {r.cost.rule}: {n}" for r in est.rows for n in r.cost.notes]
    if notes:
        out += ["notes:", *notes]
    train, progress = est.hours("train"), est.hours("evaluate_progress")
    if train:
        out.append(f"progress evaluation / training: {progress / train:.1%}")
    kind = "GPU-hours" if dev.gpu else "CPU-core-hours (no GPU-hours)"
    out.append(f"total: {_hours(est.gpu_hours)} {kind} on {dev.name}")
    return "\n".join(out)


def to_json(est: Estimate) -> dict:
    rows = [{"rule": r.cost.rule, "jobs": r.cost.jobs, "gpu": r.cost.gpu, "images_trained": r.cost.images_trained,
             "images_sampled": r.cost.images_sampled, "evaluations": r.cost.evaluations, "flops": r.cost.flops,
             "gpu_hours": r.gpu_hours, "basis": r.basis, "disk_bytes": r.cost.disk_bytes, "notes": r.cost.notes}
            for r in est.rows]
    return {"study": est.study, "source": est.source, "device": est.device, "device_name": DEVICES[est.device].name,
            "rules": rows, "total": {"jobs": int(est.total("jobs")), "flops": est.total("flops"),
                                     "gpu_hours": est.gpu_hours, "disk_bytes": int(est.total("disk_bytes")),
                                     "progress_over_train": (est.hours("evaluate_progress") / est.hours("train")
                                                             if est.hours("train") else None)}}
