"""Results collection: every run's files -> one tidy metrics table, a run table and a summary.

Reads ``results/<study>/runs/<run>/{train_log.jsonl, metrics.json, fid_progress.json}`` and writes
``metrics.csv`` (one row per run x stage x images seen x metric x tool, with the measuring
protocol, the code identity that computed it and the run's ``arm`` = its id without the seed),
``runs.csv`` (with the code identities that trained and scored each run) and ``summary.json``
(DVC metrics: final FID per group variant over seeds, and per group the paired comparisons of
every arm with the group's baseline: difference, 95% interval, Holm-adjusted p, verdict,
detectable effect, censored speed-up; docs/methods.md §9; and the study's FID floor), and
``comparisons.json`` (every comparison the claims read, computed here once: :mod:`timestep_lab.evidence.comparisons`).
:func:`write_verdicts` turns the table, the stored comparisons, the analyses' outputs and the floor into ``verdicts.json``:
per claim its record and both verdicts, Holm across the scorecard (docs/design.md#verdicts-json).

Needs pandas: imported by the ``collect`` and ``verdicts`` commands only, never at DAG build.
Knows nothing of how runs are trained or scored: only the files they leave.
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path
from typing import Any, Mapping, Sequence

import pandas as pd

from timestep_lab.artifacts.floor import headline_tool
from timestep_lab.artifacts.identity import describe, distinct, identity_key
from timestep_lab.artifacts.io import atomic_path, atomic_write_json, read_json
from timestep_lab.evidence.comparisons import claim_comparisons
from timestep_lab.evidence.family import RULES
from timestep_lab.evidence.sequential_family import judge_sequentially
from timestep_lab.evidence.stats import json_safe
from timestep_lab.evidence.verdicts import (
    compare_group,
    consistency_effect,
    interference_effect,
    judge_claims,
    study_comparisons,
    study_final_fids,
)
from timestep_lab.workflow.comparisons_file import read_comparisons, stored_compare, write_comparisons
from timestep_lab.workflow.runs import arm_id

__all__ = ["collect", "summarize", "write_verdicts", "write_claim_comparisons", "load_tables", "code_summary", "VERDICTS_FORMAT"]


def _median_step_time(log_records: list[dict]) -> float | None:
    """Median seconds per optimizer step over the log, skipping the first interval (warm-up)."""
    times = [r["sec_per_step"] for r in log_records[1:] if r.get("sec_per_step")] or \
        [r["sec_per_step"] for r in log_records if r.get("sec_per_step")]
    return statistics.median(times) if times else None


def collect(runs: Mapping[str, Mapping[str, Any]], results_dir: str, metrics_csv: str, runs_csv: str,
            summary_json: str, floor_json: str | Sequence[str] | None = None,
            base: Mapping[str, Any] | None = None, comparisons_json: str | None = None, study: str = "") -> None:
    """Gather every run's ``metrics.json``, ``fid_progress.json`` and ``train_log.jsonl`` into one
    tidy metrics table (one row per run x stage x images seen x metric x tool), a run table, and
    a small JSON summary (DVC metrics: final FID per group variant, mean over seeds; ``floor``: the
    study's ``eval/floor.json`` as it is, when the study has a held-out split; ``floor_json`` may be
    a path or a list of at most one, as a rule's optional input is); ``code``: the code identities that trained and
    scored the runs (:func:`code_summary`). ``base``: the study's own column values (:func:`timestep_lab.workflow.runs.
    base_columns`), what baselines name. ``comparisons_json``: the claims' comparisons (:func:`write_claim_comparisons`)."""
    rows, run_rows, codes = [], [], {}
    root = Path(results_dir) / "runs"
    for rid, info in runs.items():
        axes, groups = info["axes"], info["groups"]
        row = {"run": rid, "arm": arm_id(rid, axes.get("seed")), **axes, "groups": ";".join(groups),
               **info.get("columns", {})}
        rdir = root / rid
        log_file = rdir / "train_log.jsonl"
        log = [json.loads(x) for x in log_file.read_text().splitlines()] if log_file.exists() else []
        # runs outside every group (slot fine-tunes, toward_zero retraining) are analysed, not scored
        model_status = "missing" if groups else "unscored"
        metrics_file = rdir / "metrics.json"
        trained = distinct(r.get("code") for r in log)  # several: resumed under other code
        scored = []
        if metrics_file.exists():
            m = json.loads(metrics_file.read_text())
            model_status = m.get("status", "ok")
            scored.append(m.get("code"))
            for rec in m.get("records", []):
                rows.append({**row, "stage": "final", "nimg": m.get("nimg", rec.get("nimg")), **_record(rec)})
        prog_file = rdir / "fid_progress.json"
        if prog_file.exists():
            for point in json.loads(prog_file.read_text()).get("points", []):
                scored.append(point.get("code"))
                for rec in point.get("records", []):
                    rows.append({**row, "stage": "progress", "nimg": point["nimg"], **_record(rec)})
        if not log and not metrics_file.exists():
            continue
        codes[rid] = trained + distinct(scored)
        run_rows.append({**row, "status": model_status, "nimg": log[-1]["nimg"] if log else None,
                         "final_loss": log[-1]["loss"] if log else None, "sec_per_step": _median_step_time(log),
                         "wall_time_s": log[-1]["wall_time_s"] if log else None,
                         "train_log": str(log_file) if log else "",
                         "train_code": "; ".join(describe(c) for c in trained) if log else None,
                         "score_code": "; ".join(describe(c) for c in distinct(scored)) if scored else None})
    metrics = pd.DataFrame(rows)
    if len(metrics):
        metrics["kimg"] = metrics["nimg"] / 1000.0
    table = pd.DataFrame(run_rows)
    for df, path in ((metrics, metrics_csv), (table, runs_csv)):
        with atomic_path(path, suffix=".csv") as tmp:
            df.to_csv(tmp, index=False)
    _write_summary(summary_json, metrics, table, base, floor_json, codes)
    if comparisons_json:
        write_claim_comparisons(comparisons_json, metrics_csv, runs_csv, base=base, study=study)


def _write_summary(summary_json: str, metrics: pd.DataFrame, table: pd.DataFrame, base: Mapping[str, Any] | None,
                   floor_json: str | Sequence[str] | None, codes: Mapping[str, list]) -> None:
    summary = summarize(metrics, table, base=base)
    if floor_json is not None and not isinstance(floor_json, (str, Path)):
        floor_json = next(iter(floor_json), None)
    if floor_json and Path(floor_json).is_file():
        summary["floor"] = read_json(floor_json)
    summary["code"] = code_summary(codes)
    atomic_write_json(summary_json, summary)


def write_claim_comparisons(out_json: str, metrics_csv: str, runs_csv: str, *, base: Mapping[str, Any] | None = None,
                            study: str = "") -> None:
    """``comparisons.json``: every comparison the claims read
    (:func:`timestep_lab.evidence.comparisons.claim_comparisons`), computed once from ``metrics_csv`` read
    back as the ``verdicts`` job reads it (:func:`load_tables`), so that job computes none and its
    verdicts equal those it would compute to the last bit."""
    write_comparisons(out_json, claim_comparisons(load_tables(metrics_csv, runs_csv), base=base), study=study)


def code_summary(codes: Mapping[str, list]) -> dict[str, Any]:
    """The code identities that trained and scored the runs (``{run: [identity, ...]}``):
    ``{"identities": [{"identity", "label", "runs"}], "mixed": more than one}``. A run that
    recorded none counts as an identity of its own ("unknown"): a study cannot be shown to come
    from one code version unless every run says so."""
    found: list[dict[str, Any]] = []
    for rid, idents in codes.items():
        for ident in idents:
            entry = next((e for e in found if identity_key(e["identity"]) == identity_key(ident)), None)
            if entry is None:
                entry = {"identity": ident, "label": describe(ident), "runs": []}
                found.append(entry)
            if rid not in entry["runs"]:
                entry["runs"].append(rid)
    return {"identities": found, "mixed": len(found) > 1}


def _record(rec: Mapping[str, Any]) -> dict[str, Any]:
    """One tidy row per metric value, with its whole protocol (docs/methods.md: every FID with how
    it was measured): tool, extractor and weights hash, sample counts, reverse sampler (its steps, eta,
    x0 clipping, grid shift and guidance scale), EMA, seeds, reference, the VAE of a latent model."""
    keys = ("metric", "value", "tool", "tool_version", "feature_extractor", "feature_weights_sha256", "label",
            "num_generated", "num_reference", "sampler", "steps", "eta", "clip_x0", "ema", "reference_file",
            "reference_sha256")
    out = {k: rec.get(k) for k in keys}
    if rec.get("shift") is not None:  # the shift the samples were drawn on (a record from before it was kept has none:
        out["sample_shift"] = float(rec["shift"])  # the run table's sample_shift column, the run's setting, stands)
    out["method"] = out.pop("sampler")  # the reverse sampler; "sampler" is the timestep-sampler axis
    seeds = rec.get("seed_range")
    out["seeds"] = f"{seeds[0]}-{seeds[1]}" if seeds else None
    code = rec.get("code") or {}
    out.update(code_commit=code.get("commit"), code_dirty=code.get("dirty"), code_source_sha256=code.get("source_sha256"),
               code_lock_sha256=code.get("lock_sha256"))
    out["guidance_scale"] = rec.get("guidance_scale")  # classifier-free guidance (1.0: none; empty: not recorded)
    vae = rec.get("vae") or {}  # a latent model's decoder: which VAE turned its latents into the scored images
    out.update(vae_sha256=vae.get("sha256"), vae_scaling_factor=vae.get("scaling_factor"))
    arith = code.get("arithmetic") or {}  # the CPU code paths (timestep_lab.arithmetic.in_effect)
    out.update(arithmetic=arith.get("level"), arithmetic_torch=arith.get("torch_cpu_capability"),
               arithmetic_openblas="/".join(arith.get("openblas") or []) or None)
    return out


def summarize(metrics: pd.DataFrame, runs: pd.DataFrame, *, base: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Per group and variant, the final FID (torch-fidelity) mean/std over the seeds of runs that
    finished (diverged or missing runs are listed in ``failed_runs`` instead), and ``comparisons``:
    :func:`timestep_lab.evidence.verdicts.study_comparisons` (paired by seed; strict JSON, NaN -> null).
    ``base``: the study's own column values (the batch_size and consistency groups' baselines)."""
    out: dict[str, Any] = {"runs": int(len(runs)), "failed_runs": []}
    if len(runs):
        out["failed_runs"] = sorted(runs.loc[~runs["status"].isin(["ok", "unscored"]), "run"].tolist())
    if not len(metrics):
        return out
    # failed runs are reported by name and kept out of every mean (and out of the speed-ups)
    metrics = metrics[~metrics["run"].isin(out["failed_runs"])]
    final = metrics[(metrics["stage"] == "final") & (metrics["metric"] == "fid")]
    if not len(final):
        return out
    tool = headline_tool(final["tool"].unique())
    final = final[final["tool"] == tool]
    out["fid_tool"] = tool
    out["fid_label"] = str(final["label"].dropna().iloc[0]) if final["label"].notna().any() else "FID"
    groups: dict[str, Any] = {}
    for _, row in final.iterrows():
        for g in str(row["groups"]).split(";"):
            if not g:
                continue
            key = "+".join(str(row[a]) for a in ("sampler", "weighting", "prediction", "batch_size", "schedule"))
            groups.setdefault(g, {}).setdefault(key, []).append(float(row["value"]))
    out["fid"] = {
        g: {k: {"mean": statistics.fmean(v), "std": statistics.stdev(v) if len(v) > 1 else 0.0, "n": len(v)}
            for k, v in sorted(variants.items())}
        for g, variants in groups.items()
    }
    proto = final.iloc[0]
    out["protocol"] = {k: (None if proto.get(k) != proto.get(k) else proto.get(k)) for k in
                       ("label", "tool", "tool_version", "feature_extractor", "num_generated", "num_reference",
                        "method", "steps", "ema")}
    out["protocol"] = {k: (v.item() if hasattr(v, "item") else v) for k, v in out["protocol"].items()}
    # paired comparisons per group; the speed-ups in them are per seed and censored (no mean-curve
    # speed-up here: it hid the spread over seeds and the progress-point spacing)
    if "arm" in metrics:
        out["comparisons"] = json_safe(study_comparisons(metrics[metrics["tool"] == tool], base=base))
    return out


def load_tables(metrics_csv: str, runs_csv: str | None = None) -> pd.DataFrame:
    """``metrics.csv`` without the rows of failed runs (named in ``runs.csv``'s ``status``)."""
    metrics = pd.read_csv(metrics_csv) if Path(metrics_csv).stat().st_size > 1 else pd.DataFrame()
    if runs_csv and len(metrics) and Path(runs_csv).stat().st_size > 1:
        runs = pd.read_csv(runs_csv)
        if "status" in runs:
            failed = runs.loc[~runs["status"].isin(["ok", "unscored"]), "run"]
            metrics = metrics[~metrics["run"].isin(failed)]
    return metrics


#: The format string of ``verdicts.json`` (docs/design.md#verdicts-json).
VERDICTS_FORMAT = "timestep_lab.verdicts/2"


def write_verdicts(metrics_csv: str, out_json: str, *, runs_csv: str | None = None, interference: str | None = None,
                   consistency: str | None = None, base: Mapping[str, Any] | None = None, study: str = "",
                   floor: str | None = None, comparisons: str | None = None,
                   sequential: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """``verdicts.json`` (format :data:`VERDICTS_FORMAT`, docs/design.md#verdicts-json):
    :func:`timestep_lab.evidence.verdicts.judge_claims` over the collected metrics, the analyses' outputs
    (``interference_control.json``, ``consistency.json``; absent -> "not run") and the study's
    ``floor.json`` (absent: no floor in the regime). ``comparisons``: collect's ``comparisons.json``,
    whose comparisons the claims read instead of computing them (the workflow's way); None computes
    them from the table. ``sequential`` (a budgeted study: ``{"prior_sd", "horizon"}``): the claims on
    final FID judged by the anytime-valid test instead
    (:func:`timestep_lab.evidence.sequential_family.judge_sequentially`, docs/methods.md §14.1)."""
    metrics = load_tables(metrics_csv, runs_csv)
    analyses = {}
    if interference and Path(interference).exists():
        analyses["interference"] = interference_effect(read_json(interference))
    if consistency and Path(consistency).exists():
        analyses["consistency"] = consistency_effect(read_json(consistency))
    floor_data = read_json(floor) if floor and Path(floor).exists() else None
    compare = stored_compare(read_comparisons(comparisons), comparisons) if comparisons else compare_group
    judged = judge_claims(metrics, analyses, base=base, floor=floor_data, compare=compare)
    if sequential is not None:
        judged = judge_sequentially(judged, study_final_fids(metrics), prior_sd=float(sequential["prior_sd"]),
                                    horizon=sequential.get("horizon"))
    result = json_safe({
        "format": VERDICTS_FORMAT,
        "study": study,
        **RULES,
        "family": judged["family"],
        "floor": floor_data,
        "claims": judged["claims"],
    })
    atomic_write_json(out_json, result)
    return result
