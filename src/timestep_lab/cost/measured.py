"""What a finished study cost, per rule, from its jobs' benchmark files and logs.

Every rule of the workflow declares ``benchmark: results/<study>/benchmarks/<rule>/<job>.tsv``
and ``log: logs/<study>/<rule>/<job>.log``. Snakemake writes one tab-separated row per execution
of the job with (among others) ``s`` (wall seconds), ``max_rss`` (MiB) and ``cpu_time``; a
``python -m timestep_lab`` command that succeeds ends its log with its exact CPU seconds (self +
waited-for children) and peak RSS (:mod:`timestep_lab.cost.usage`). Per rule (the folder name):

    cpu_s(rule) = sum_jobs cpu      wall_s(rule) = sum_jobs s      max_rss(rule) = max_jobs max_rss

where a job's ``cpu`` is its log's usage line when there is one (exact), else the benchmark's
``cpu_time``. That one is sampled: the workflow has Snakemake read the job's processes at its
start and every 30 s after (``workflow/rules/benchmark.smk``), so it misses up to 30 CPU-s per
job, and a job shorter than 30 s is seen only at its start. Every job of the workflow is a
``python -m timestep_lab`` command, so only a job that failed lacks the line; a caller may name
rules ``local`` (Snakemake runs them on its own host; the estimate knows them from the DAG): a job
of theirs without a usage line counts 0 CPU-s, since the benchmark then sampled Snakemake's own
process (its wall time still counts). A job that ran more than once
(``--benchmark-repeats``) counts with the mean of its rows. A job whose usage line says how it
started (``start=HOW``) started no process of its own: it pays no start-up. A process of the study
that is no job of a rule (one that serves the jobs) ends its log, a file directly in
``<logs_dir>``, with its own CPU under its name (:data:`~timestep_lab.cost.usage.NAMED_USAGE_LINE`):
each name is a row ``(NAME)`` (:func:`helper_row`), one "job" per line, counted with the start-up;
what the process is, this module does not know. Standard library only:
``benchmarks/study_cost.py`` and the study index both use it.
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Mapping, NamedTuple

from timestep_lab.cost.usage import NAMED_USAGE_LINE, USAGE_LINE

__all__ = ["RuleCost", "Usage", "helper_row", "is_helper", "total", "read_benchmark", "read_usage", "read_helper_usage",
           "study_cost",
           "logs_dir_of", "job_usages", "format_cost", "estimate_vs_measured", "study_total"]


def helper_row(name: str) -> str:
    """The row of the processes named ``name`` in their usage lines: not a rule, no benchmark file."""
    return f"({name})"


def is_helper(row: str) -> bool:
    """Whether ``row`` is a :func:`helper_row` (a rule's name never starts with a parenthesis)."""
    return row.startswith("(")


class Usage(NamedTuple):
    """A job log's usage: CPU-s, peak RSS MiB, and how it started when not as a process of its own
    (its usage line's ``start=``; None: it started its own process)."""

    cpu_s: float
    max_rss_mb: float
    start: str | None = None


@dataclass
class RuleCost:
    """Summed cost of one rule's jobs (CPU and wall in seconds, RSS in MiB)."""

    rule: str
    jobs: int = 0
    cpu_s: float = 0.0
    wall_s: float = 0.0
    max_rss_mb: float = 0.0
    exact_jobs: int = 0  # jobs whose CPU came from their log's usage line
    prestarted_jobs: int = 0  # of those, jobs whose usage line names how they started (no start-up of their own)

    def add(self, row: Mapping[str, float], usage: Usage | None = None, local: bool = False) -> None:
        """One job: its benchmark ``row``, its log's ``usage`` if any."""
        self.jobs += 1
        self.wall_s += _finite(row.get("s"))
        if usage is not None:
            self.exact_jobs += 1
            self.prestarted_jobs += bool(usage.start)
            self.cpu_s += usage.cpu_s
            self.max_rss_mb = max(self.max_rss_mb, usage.max_rss_mb)
        elif not local:
            self.cpu_s += _finite(row.get("cpu_time"))
            self.max_rss_mb = max(self.max_rss_mb, _finite(row.get("max_rss")))

    def as_dict(self) -> dict[str, float | int | str]:
        return {"rule": self.rule, "jobs": self.jobs, "cpu_s": round(self.cpu_s, 2), "wall_s": round(self.wall_s, 2),
                "max_rss_mb": round(self.max_rss_mb, 1)}


def total(costs: Mapping[str, RuleCost]) -> RuleCost:
    """The study's cost: CPU, wall and jobs summed over the rules, the largest RSS of any."""
    out = RuleCost("total")
    for c in costs.values():
        out.jobs += c.jobs
        out.exact_jobs += c.exact_jobs
        out.prestarted_jobs += c.prestarted_jobs
        out.cpu_s += c.cpu_s
        out.wall_s += c.wall_s
        out.max_rss_mb = max(out.max_rss_mb, c.max_rss_mb)
    return out


def _finite(x: float | None) -> float:
    return x if x is not None and math.isfinite(x) else 0.0


def _number(text: str) -> float:
    try:
        return float(text)
    except ValueError:  # "NA" (a job too short to sample), "-"
        return math.nan


def read_benchmark(path: str | Path) -> dict[str, float]:
    """One benchmark TSV -> ``{column: value}``, the mean over its rows (NaN where never measured).

    :raises ValueError: naming the file when it has no header or no data row."""
    with open(path, newline="") as fh:
        rows = list(csv.reader(fh, delimiter="\t"))
    if len(rows) < 2:
        raise ValueError(f"{path}: not a Snakemake benchmark file (header and at least one row expected)")
    header, body = rows[0], rows[1:]
    out: dict[str, float] = {}
    for i, name in enumerate(header):
        values = [_number(r[i]) for r in body if i < len(r)]
        finite = [v for v in values if math.isfinite(v)]
        out[name] = sum(finite) / len(finite) if finite else math.nan
    return out


def read_usage(log: str | Path) -> Usage | None:
    """The usage lines of a job's log (summed CPU and largest RSS over the lines: a torchrun job
    has one per worker; ``start`` when every line names one), or None when it has none or is missing."""
    try:
        text = Path(log).read_text(errors="replace")
    except OSError:
        return None
    found = [(float(c), float(r), s) for c, r, s in USAGE_LINE.findall(text)]
    if not found:
        return None
    return Usage(sum(f[0] for f in found), max(f[1] for f in found), found[0][2] if all(f[2] for f in found) else None)


def read_helper_usage(logs_dir: str | Path) -> dict[str, RuleCost]:
    """The named usage lines of the logs directly in ``logs_dir`` (not a rule's folder): per name,
    one :func:`helper_row` counting one "job" per line (one per ``snakemake`` run that started
    that process); empty without any."""
    found: dict[str, list[float]] = {}
    for log in sorted(Path(logs_dir).glob("*.log")):
        try:
            text = log.read_text(errors="replace")
        except OSError:
            continue
        for name, cpu in NAMED_USAGE_LINE.findall(text):
            found.setdefault(name, []).append(float(cpu))
    return {helper_row(name): RuleCost(helper_row(name), jobs=len(cpu), cpu_s=sum(cpu), exact_jobs=len(cpu))
            for name, cpu in found.items()}


def study_cost(results_dir: str | Path, logs_dir: str | Path | None = None,
               local: Iterable[str] = ()) -> dict[str, RuleCost]:
    """Every ``<results_dir>/benchmarks/<rule>/**/*.tsv`` with its log
    ``<logs_dir>/<rule>/<job>.log`` (module docstring), summed per rule, largest CPU first.

    :raises FileNotFoundError: when the study has no benchmark folder (not run, or run before the
        rules declared benchmarks)."""
    root = Path(results_dir) / "benchmarks"
    if not root.is_dir():
        raise FileNotFoundError(f"{root}: no benchmark files; run the study first (every rule writes one)")
    local = set(local)
    costs: dict[str, RuleCost] = {}
    for rule_dir in sorted(p for p in root.iterdir() if p.is_dir()):
        cost = RuleCost(rule_dir.name)
        for tsv in sorted(rule_dir.rglob("*.tsv")):
            job = tsv.relative_to(rule_dir).with_suffix("").as_posix()
            usage = read_usage(Path(logs_dir) / rule_dir.name / f"{job}.log") if logs_dir is not None else None
            cost.add(read_benchmark(tsv), usage, local=rule_dir.name in local)
        if cost.jobs:
            costs[cost.rule] = cost
    if logs_dir is not None:
        costs.update(read_helper_usage(logs_dir))
    return dict(sorted(costs.items(), key=lambda kv: -kv[1].cpu_s))


def job_usages(results_dir: str | Path, logs_dir: str | Path) -> dict[str, dict[str, Usage | None]]:
    """Per rule, per job (its benchmark file's name under ``<results_dir>/benchmarks/<rule>/``), the
    usage line of its log, None where the log has none: what ``estimate`` fits its per-rule CPU
    throughput to (:mod:`timestep_lab.cost.estimate.calibration`).

    :raises FileNotFoundError: when the study has no benchmark folder."""
    root = Path(results_dir) / "benchmarks"
    if not root.is_dir():
        raise FileNotFoundError(f"{root}: no benchmark files; run the study first (every rule writes one)")
    out: dict[str, dict[str, Usage | None]] = {}
    for rule_dir in sorted(p for p in root.iterdir() if p.is_dir()):
        for tsv in sorted(rule_dir.rglob("*.tsv")):
            job = tsv.relative_to(rule_dir).with_suffix("").as_posix()
            out.setdefault(rule_dir.name, {})[job] = read_usage(Path(logs_dir) / rule_dir.name / f"{job}.log")
    return out


def logs_dir_of(results_dir: str | Path) -> Path:
    """The logs folder the workflow pairs with ``results/<study>``: ``logs/<study>`` beside ``results/``."""
    res = Path(results_dir)
    return res.parent.parent / "logs" / res.name


def format_cost(costs: Mapping[str, RuleCost], *, startup_cpu_s: float | None = None,
                local: Iterable[str] = ()) -> str:
    """A fixed-width table: rule, jobs, CPU-s, wall-s, max RSS, share of the study's CPU; then a total
    line. With ``startup_cpu_s`` (the CPU of starting one job's process: interpreter and imports,
    measured by the caller) a last line gives the share of the study's CPU spent starting processes:
    ``(startup_cpu_s x jobs started fresh + the helper rows' CPU) / total CPU``, where jobs started
    fresh are those not in ``local`` and whose usage line names no other start."""
    whole = total(costs)
    lines = [f"{'rule':<24} {'jobs':>5} {'CPU-s':>9} {'wall-s':>9} {'max RSS MiB':>12} {'CPU share':>9}"]
    for c in (*costs.values(), whole):
        share = c.cpu_s / whole.cpu_s if whole.cpu_s else math.nan
        lines.append(f"{c.rule:<24} {c.jobs:>5} {c.cpu_s:>9.1f} {c.wall_s:>9.1f} {c.max_rss_mb:>12.0f} {share:>9.1%}")
    lines.append(f"CPU-s exact (the job's own usage line) for {whole.exact_jobs} of {whole.jobs} jobs; the others as "
                 "Snakemake sampled them (lower bounds), jobs of local rules 0")
    if startup_cpu_s is not None:
        local = set(local)
        jobs = [c for c in costs.values() if c.rule not in local and not is_helper(c.rule)]
        helpers = [c for c in costs.values() if is_helper(c.rule)]
        started = sum(c.jobs - c.prestarted_jobs for c in jobs)
        spent = started * startup_cpu_s + sum(h.cpu_s for h in helpers)
        share = spent / whole.cpu_s if whole.cpu_s else math.nan
        served = "".join(f" + {h.rule} {h.cpu_s:.1f} CPU-s" for h in helpers)
        served += f" ({sum(c.prestarted_jobs for c in jobs)} jobs started by another process)" if helpers else ""
        lines.append(f"start-up: {started} job processes started fresh x {startup_cpu_s:.2f} CPU-s (a process start, "
                     f"measured){served} = {spent:.0f} CPU-s, {share:.0%} of the study's CPU")
    return "\n".join(lines)


def estimate_vs_measured(estimate: Mapping | None, measured: Mapping[str, RuleCost]) -> list[dict]:
    """Rows for the study index: per rule, the estimate made before the study ran (``estimate.json``
    from ``python -m timestep_lab estimate STUDY --out``) beside what its jobs measured.

    Each row: ``rule``, ``est_jobs``, ``est_hours`` (GPU-hours, or CPU-core-hours on ``cpu``),
    ``est_low`` / ``est_high`` (its range), ``est_basis``, ``jobs``, ``cpu_s``, ``wall_s``,
    ``max_rss_mb`` (None where one side has no such rule) and ``ratio``: estimate over measured,
    where the measured side is the rule's CPU-s for a CPU estimate, and the GPU-seconds its jobs
    held (wall-s, times the GPUs of a training job) for a GPU rule of a GPU estimate. Rules in
    estimate order, then rules only measured; a last row ``total``."""
    est = estimate or {}
    on_cpu = est.get("device") == "cpu"
    gpus = int(((est.get("budget") or {}).get("devices_per_job")) or 1)
    gpu_rules = {r["rule"] for r in est.get("rules", []) if r.get("gpu")}
    rows: dict[str, dict] = {}
    for r in est.get("rules", []):
        rows[r["rule"]] = {"rule": r["rule"], "est_jobs": r.get("jobs"), "est_hours": r.get("gpu_hours"),
                           "est_low": r.get("gpu_hours_low"), "est_high": r.get("gpu_hours_high"),
                           "est_basis": r.get("basis") or ""}
    for name, c in measured.items():
        rows.setdefault(name, {"rule": name, "est_jobs": None, "est_hours": None, "est_low": None, "est_high": None,
                               "est_basis": ""})
        rows[name].update(jobs=c.jobs, cpu_s=c.cpu_s, wall_s=c.wall_s, max_rss_mb=c.max_rss_mb)

    def seconds(name: str, c: RuleCost) -> float | None:
        if on_cpu:
            return c.cpu_s
        return c.wall_s * (gpus if name == "train" else 1) if name in gpu_rules else None

    def ratio(hours: float | None, meas: float | None) -> float | None:
        return hours * 3600 / meas if hours and meas else None

    out = []
    for r in rows.values():
        row = {"jobs": None, "cpu_s": None, "wall_s": None, "max_rss_mb": None, **r}
        c = measured.get(r["rule"])
        row["ratio"] = ratio(r["est_hours"], seconds(r["rule"], c) if c is not None else None)
        out.append(row)
    total_est = est.get("total") or {}
    whole = total(measured)
    compared = [seconds(n, c) for n, c in measured.items()]
    out.append({"rule": "total", "est_jobs": total_est.get("jobs"), "est_hours": total_est.get("gpu_hours"),
                "est_low": total_est.get("gpu_hours_low"), "est_high": total_est.get("gpu_hours_high"),
                "est_basis": "", "jobs": whole.jobs, "cpu_s": whole.cpu_s, "wall_s": whole.wall_s,
                "max_rss_mb": whole.max_rss_mb if measured else None,
                "ratio": ratio(total_est.get("gpu_hours"), sum(x for x in compared if x) if measured else None)})
    return out


def study_total(results_dir: str | Path, logs_dir: str | Path | None = None, local: Iterable[str] = (),
                estimate: Mapping | None = None) -> dict:
    """One study's cost in one row, for the scorecard across scales: :func:`study_cost` summed by
    :func:`total` (``jobs``, ``exact_jobs``, ``cpu_s``, ``wall_s``: the jobs' wall seconds summed,
    not the elapsed time of a run whose jobs overlap; ``max_rss_mb``), beside ``estimate``'s total
    (``est_hours`` in ``est_unit``, ``ratio`` as in :func:`estimate_vs_measured`). ``note`` says
    why a figure is missing ("" when none is): no benchmark folder, or a malformed file (named)."""
    try:
        measured = study_cost(results_dir, logs_dir, local)
    except (FileNotFoundError, ValueError) as exc:
        measured, note = {}, str(exc)
    else:
        note = "" if measured else f"{Path(results_dir) / 'benchmarks'}: no benchmark files yet"
    whole = total(measured)
    row = estimate_vs_measured(estimate, measured)[-1] if (estimate or measured) else {}
    est = estimate or {}
    return {"jobs": whole.jobs, "exact_jobs": whole.exact_jobs, "cpu_s": whole.cpu_s if measured else None,
            "wall_s": whole.wall_s if measured else None, "max_rss_mb": whole.max_rss_mb if measured else None,
            "est_hours": row.get("est_hours"), "est_unit": (est.get("budget") or {}).get("unit")
            or ("CPU-core-h" if est.get("device") == "cpu" else "GPU-h"), "ratio": row.get("ratio"), "note": note}
