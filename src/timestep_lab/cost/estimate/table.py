"""Price the rules of a study on one device and print them: a table, its sources, the budget.

:func:`estimate` turns :func:`rule_costs` into :class:`Estimate` rows, job by job: on the CPU
with the machine's calibration when one is given (:mod:`calibration`: a per-rule fit to
finished studies), else, and on GPUs, from :func:`throughput.rate` per unit of work (measured,
published anchors or an assumed MFU, each with its range and sources). Every row has a central
figure and a low-high range; a rule that asks for no GPU (bookkeeping, reports) shows no
GPU-hours, and on ``--gpu cpu`` the hours are CPU-core hours (bookkeeping rules are priced only
by a calibration). :func:`format_table` and :func:`to_json` render it, with the measured cost
beside it when the caller gives one (``measured``: seconds per rule).

Knows rules, rates, fits and layout; knows nothing of Snakemake or the CLI.
"""

from __future__ import annotations

import textwrap
from dataclasses import dataclass, field, replace
from typing import Mapping

from timestep_lab.cost.estimate.budget import Advice, advise, format_advice
from timestep_lab.cost.estimate.calibration import Calibration, predict
from timestep_lab.cost.estimate.rules import RuleCost, rule_costs
from timestep_lab.cost.estimate.study import Plan
from timestep_lab.cost.estimate.throughput import DEVICES, rate

__all__ = ["Row", "Estimate", "estimate", "format_table", "to_json", "human"]


@dataclass(frozen=True)
class Row:
    cost: RuleCost
    gpu_hours: float | None  # central figure; None: the rule runs without a GPU (or, on the CPU, is not priced)
    basis: str  # per step kind "published", "measured", "assumed MFU 30%"; "fit ..." on a calibration; "" for CPU jobs
    low: float | None = None  # hours at the fast end of the evidence
    high: float | None = None  # hours at the slow end
    sources: tuple[tuple[str, str, str, str, float], ...] = ()  # (step, model, key, description, images/s here)
    job_seconds: dict[str, tuple[float, float, float]] = field(default_factory=dict)  # job -> (central, low, high)


@dataclass(frozen=True)
class Estimate:
    study: str
    source: str
    device: str
    rows: list[Row]
    calibration: str | None = None  # what the CPU figures were fitted to, when they were
    advice: Advice | None = None
    measured: dict[str, float] | None = None  # rule -> measured seconds (CPU-s, or GPU-s on a GPU), when run

    def total(self, attr: str) -> float:
        return sum(getattr(r.cost, attr) for r in self.rows)

    @property
    def gpu_hours(self) -> float:
        return sum(r.gpu_hours or 0.0 for r in self.rows)

    @property
    def low_hours(self) -> float:
        return sum(r.low or 0.0 for r in self.rows)

    @property
    def high_hours(self) -> float:
        return sum(r.high or 0.0 for r in self.rows)

    def hours(self, rule: str) -> float:
        return sum(r.gpu_hours or 0.0 for r in self.rows if r.cost.rule == rule)

    def ratio(self, rule: str) -> float | None:
        """Estimate over measured for ``rule`` (``total``: the whole study), None without both."""
        if self.measured is None:
            return None
        if rule == "total":
            est, meas = self.gpu_hours, sum(self.measured.values())
        else:
            est = self.hours(rule)
            meas = self.measured.get(rule)
        return est * 3600 / meas if meas and est else None


def _priced_by_rates(cost: RuleCost, device: str) -> Row:
    dev = DEVICES[device]
    jobs: dict[str, tuple[float, float, float]] = {}
    bases: list[str] = []
    sources: list[tuple[str, str, str, str, float]] = []
    for job, work in cost.job_work.items():
        c = lo = hi = 0.0
        for w in work:
            precision = w.precision or ("bf16" if dev.gpu else "fp32")
            precision = "fp32" if not dev.gpu else precision  # CPU jobs run in fp32
            r = rate(w.model, w.flops_per_image, device, precision, w.kind, w.step)
            c, lo, hi = c + r.seconds_per_image * w.images, lo + r.low * w.images, hi + r.high * w.images
            bases.append(f"{w.step}: {r.basis}")
            sources += [(w.step, w.model, *src) for src in r.sources]
        jobs[job] = (c, lo, hi)
    if not any(cost.job_work.values()):
        return Row(cost, None, "")
    c, lo, hi = (sum(v[i] for v in jobs.values()) / 3600 for i in range(3))
    return Row(cost, c, "; ".join(dict.fromkeys(bases)), lo, hi, tuple(dict.fromkeys(sources)), jobs)


def _cited(row: Row, index: dict[str, int]) -> str:
    """The basis column: per step kind, the numbers of the sources it rests on."""
    steps: dict[str, list[int]] = {}
    for step, _, key, _, _ in row.sources:
        steps.setdefault(step, [])
        if index[key] not in steps[step]:
            steps[step].append(index[key])
    return "; ".join(f"{step} [{','.join(map(str, sorted(n)))}]" for step, n in steps.items()) or row.basis


def _priced_by_fit(cost: RuleCost, calibration: Calibration) -> Row | None:
    f = calibration.rules.get(cost.rule)
    if f is None:
        return None
    jobs = {job: predict(f, work) for job, work in cost.job_work.items()}
    seconds = sum(jobs.values())
    basis = f"fit {f.describe()} ({f.jobs} job{'s' if f.jobs != 1 else ''} of {', '.join(f.studies)})"
    basis += f"; {f.note}" if f.note else ""
    return Row(cost, seconds / 3600, basis, seconds * f.low / 3600, seconds * f.high / 3600, (),
               {j: (s, s * f.low, s * f.high) for j, s in jobs.items()})


def estimate(plan: Plan, device: str, calibration: Calibration | None = None,
             measured: Mapping[str, float] | None = None, retries: int | None = None) -> Estimate:
    """Every rule of ``plan`` priced on ``device`` (a key of :data:`DEVICES`).

    ``calibration``: the machine's per-rule CPU fit (used on ``cpu`` only; rules it has not seen
    fall back to the rates). ``measured``: seconds per rule of the study as it ran (shown beside
    the estimate, with their ratio). ``retries``: how often the cluster profile resubmits a job
    (the budget advice compares the resubmissions a training job needs with it)."""
    dev = DEVICES[device]
    use_fit = calibration if (calibration is not None and not dev.gpu) else None
    rows = []
    for cost in rule_costs(plan):
        if dev.gpu and not cost.gpu:  # a CPU job of a GPU study: no GPU-hours
            rows.append(Row(cost, None, ""))
            continue
        row = _priced_by_fit(cost, use_fit) if use_fit is not None else None
        rows.append(row or _priced_by_rates(cost, device))
    for row, cpu_s in (use_fit.helper_cpu_s if use_fit is not None else {}).items():
        s = cpu_s / 3600  # one per snakemake run: one run of the study
        rows.append(Row(RuleCost(row, 1, False), s, "mean of the servers measured", s, s))
    priced = Estimate(plan.study["study"], plan.source, device, rows, use_fit.describe() if use_fit else None,
                      None, dict(measured) if measured is not None else None)
    return replace(priced, advice=advise(plan, priced, device, retries))


def human(x: float, unit: str = "") -> str:
    """``12345678`` -> ``12.3M`` (k, M, G, T, P, E, Z, Y; bytes with ``unit="B"``)."""
    if x == 0:
        return "0" + (" " + unit if unit else "")
    for prefix, scale in (("Y", 1e24), ("Z", 1e21), ("E", 1e18), ("P", 1e15), ("T", 1e12), ("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(x) >= scale:
            return f"{x / scale:.3g}{prefix}{unit}"
    return f"{x:.3g}{unit}" if isinstance(x, float) else f"{x}{unit}"


def _number(h: float) -> str:
    return f"{h:,.1f}" if h >= 10 else f"{h:.3g}"


@dataclass(frozen=True)
class _Units:
    """How hours are printed: GPU-h on a GPU, CPU-s for a CPU study of under a core-hour (the unit
    study_cost.py measures in), else CPU-h; ``scale`` turns hours into that unit."""

    unit: str
    scale: float
    seconds: bool

    @classmethod
    def of(cls, est: Estimate) -> "_Units":
        dev = DEVICES[est.device]
        seconds = not dev.gpu and est.gpu_hours < 1
        unit, scale = ("GPU-h", 1.0) if dev.gpu else ("CPU-s", 3600.0) if seconds else ("CPU-h", 1.0)
        return cls(unit, scale, seconds)

    def hours(self, h: float) -> str:
        return _number(h * self.scale)

    def range(self, lo: float | None, hi: float | None) -> str:
        return "-" if lo is None or hi is None else f"{self.hours(lo)}-{self.hours(hi)}"


def format_table(est: Estimate) -> str:
    """The estimate as text: a header, the rule table (with measured cost and est/meas beside it
    when given), notes, the numbered sources and the rates carried to the device, the share of
    progress evaluation, the budget advice and the total line."""
    dev, u = DEVICES[est.device], _Units.of(est)
    index: dict[str, int] = {}
    for r in est.rows:
        for _, _, key, _, _ in r.sources:
            index.setdefault(key, len(index) + 1)
    out = [f"# {est.study} ({est.source}) on {dev.name}"]
    if est.calibration:
        out.append(f"# {est.calibration}")
    elif not dev.gpu:
        out.append("# not calibrated on this machine: FLOPs at the rates below, bookkeeping jobs unpriced; run a "
                   "study, then estimate it again to fit this machine (docs/methods.md §11.2)")
    out += _rule_table(est, u, index)
    notes = [f"  {r.cost.rule}: {n}" for r in est.rows for n in r.cost.notes]
    if notes:
        out += ["notes:", *notes]
    if index:
        out += _source_lines(est, index)
    train, progress = est.hours("train"), est.hours("evaluate_progress")
    if train:
        flops = {r.cost.rule: r.cost.flops for r in est.rows}
        share = flops.get("evaluate_progress", 0) / flops["train"] if flops.get("train") else 0.0
        out.append(f"progress evaluation / training: {progress / train:.1%} of the {u.unit.split('-')[0]} time, "
                   f"{share:.1%} of the FLOPs")
    if est.advice is not None:
        out += format_advice(est.advice)
    bases = dict.fromkeys(b for r in est.rows for b in r.basis.split("; ") if b and not b.startswith("fit"))
    if bases and dev.gpu:  # say what the GPU-hours rest on: measured throughput, published figures or assumptions
        why = (" (measured MFU: our code's utilisation measured on a GPU, benchmarks/RESULTS.md; the ranges run "
               "to the published figures)") if any("measured MFU" in b for b in bases) else ""
        out.append(f"central figures per step kind: {', '.join(bases)}{why}")
    kind = "GPU-hours" if dev.gpu else "CPU-s (no GPU-hours)" if u.seconds else "CPU-core-hours (no GPU-hours)"
    out.append(f"total: {u.hours(est.gpu_hours)} {kind} on {dev.name} "
               f"(range {u.range(est.low_hours, est.high_hours)})")
    return "\n".join(out)


def _rule_table(est: Estimate, u: _Units, index: dict[str, int]) -> list[str]:
    """The table's lines: head, rule, one line per rule, rule, total (columns padded to fit)."""
    dev = DEVICES[est.device]
    head = ["rule", "jobs", "img trained", "img sampled", "net evals", "FLOPs", u.unit, "range", "disk"]
    shown = est.measured is not None
    if shown:
        head += ["measured", "est/meas"]
    head.append("basis")
    lines = []
    for r in est.rows:
        c = r.cost
        line = [c.rule, str(c.jobs), human(c.images_trained), human(c.images_sampled), human(c.evaluations),
                human(c.flops), "-" if r.gpu_hours is None else u.hours(r.gpu_hours), u.range(r.low, r.high),
                human(c.disk_bytes, "B")]
        if shown:
            meas = est.measured.get(c.rule)
            ratio = est.ratio(c.rule)
            line += ["-" if meas is None else u.hours(meas / 3600), "-" if ratio is None else f"{ratio:.2f}"]
        line.append(_cited(r, index) or ("CPU job" if dev.gpu else ""))
        lines.append(line)
    total = ["total", str(int(est.total("jobs"))), human(est.total("images_trained")), human(est.total("images_sampled")),
             human(est.total("evaluations")), human(est.total("flops")), u.hours(est.gpu_hours),
             u.range(est.low_hours, est.high_hours), human(est.total("disk_bytes"), "B")]
    if shown:
        ratio = est.ratio("total")
        total += [u.hours(sum(est.measured.values()) / 3600), "-" if ratio is None else f"{ratio:.2f}"]
    total.append("")
    widths = [max(len(row[i]) for row in (head, *lines, total)) for i in range(len(head))]
    left = {0, len(head) - 1}

    def fmt(row):
        return "  ".join(v.ljust(w) if i in left else v.rjust(w) for i, (v, w) in enumerate(zip(row, widths))).rstrip()

    rule = "-" * len(fmt(head))
    return [fmt(head), rule, *map(fmt, lines), rule, fmt(total)]


def _source_lines(est: Estimate, index: dict[str, int]) -> list[str]:
    """The numbered sources, then the rates (images or network evaluations per second) each
    source gives on this device, per step kind and model."""
    dev = DEVICES[est.device]
    text = {key: desc for r in est.rows for _, _, key, desc, _ in r.sources}
    out = ["sources (docs/methods.md §11.1; the range runs from the fastest to the slowest):",
           *[textwrap.fill(text[key], 110, initial_indent=f"  [{i}] ", subsequent_indent="      ")
             for key, i in index.items()]]
    carried: dict[tuple[str, str], dict[int, float]] = {}
    for r in est.rows:
        for step, model, key, _, ips in r.sources:
            carried.setdefault((step, model), {})[index[key]] = ips
    out.append(f"carried to {dev.name} (images or network evaluations per second):")
    out += [f"  {step}, {model}: " + ", ".join(f"{v:,.0f} [{i}]" for i, v in sorted(ips.items(), key=lambda kv: kv[1]))
            for (step, model), ips in carried.items()]
    return out


def to_json(est: Estimate) -> dict:
    rows = [{"rule": r.cost.rule, "jobs": r.cost.jobs, "gpu": r.cost.gpu, "images_trained": r.cost.images_trained,
             "images_sampled": r.cost.images_sampled, "evaluations": r.cost.evaluations, "flops": r.cost.flops,
             "gpu_hours": r.gpu_hours, "gpu_hours_low": r.low, "gpu_hours_high": r.high, "basis": r.basis,
             "sources": [{"step": st, "model": m, "source": d, "images_per_s": ips} for st, m, _, d, ips in r.sources],
             "disk_bytes": r.cost.disk_bytes, "notes": r.cost.notes,
             **({"measured_hours": (est.measured.get(r.cost.rule) or 0) / 3600 if r.cost.rule in est.measured else None,
                 "ratio": est.ratio(r.cost.rule)} if est.measured is not None else {})}
            for r in est.rows]
    total = {"jobs": int(est.total("jobs")), "flops": est.total("flops"), "gpu_hours": est.gpu_hours,
             "gpu_hours_low": est.low_hours, "gpu_hours_high": est.high_hours,
             "disk_bytes": int(est.total("disk_bytes")),
             "progress_over_train": (est.hours("evaluate_progress") / est.hours("train") if est.hours("train") else None)}
    if est.measured is not None:
        total.update(measured_hours=sum(est.measured.values()) / 3600, ratio=est.ratio("total"))
    return {"study": est.study, "source": est.source, "device": est.device, "device_name": DEVICES[est.device].name,
            "calibration": est.calibration, "rules": rows, "total": total,
            "budget": est.advice.as_dict() if est.advice is not None else None}
