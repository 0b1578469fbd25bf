"""The study run table: turns a study config (``config/*.yaml``) into one run config per run.

A study config names catalogues of timestep samplers and weightings, a ``base`` run config
(deltas over :class:`timestep_lab.config.RunConfig`), and *groups* of runs, each a grid
(``sampler x weighting x prediction x batch_size x schedule x seed``) and/or an explicit list.
Every run gets a readable id built from its axes, so the same run requested by two groups is
trained once::

    uniform_none_eps_b128_linear_s0
    speed_speed_eps_b128_linear_s1
    uniform_none_eps_b128_linear_s0_ch24     (extra overrides are appended as a slug)

Pure functions of dicts (no Snakemake, no torch), so the Snakefile stays thin and this is tested
on its own.
"""

from __future__ import annotations

import copy
import itertools
import re
from dataclasses import dataclass, field
from typing import Any, Mapping

from timestep_lab.config import ConfigError, apply_overrides

__all__ = ["Run", "AXES", "build_runs", "run_config", "deep_merge", "scale_range", "prepared_dir"]

AXES = ("sampler", "weighting", "prediction", "batch_size", "schedule", "seed")
ENTRY_KEYS = set(AXES) | {"id", "overrides", "init_from", "total_kimg", "tag"}


@dataclass(frozen=True)
class Run:
    """One row of the run table."""

    id: str
    axes: dict[str, Any]
    config: dict[str, Any]  # complete RunConfig dict (deltas merged over ``base``)
    groups: tuple[str, ...] = ()
    init_from: str | None = None  # another run id or "reference"
    progress: bool = False  # evaluate snapshots during training (FID vs images seen)
    extra: dict[str, Any] = field(default_factory=dict)


def deep_merge(base: Mapping[str, Any], delta: Mapping[str, Any]) -> dict[str, Any]:
    """``base`` updated recursively with ``delta`` (new dicts; neither input is modified)."""
    out = copy.deepcopy(dict(base))
    for k, v in delta.items():
        if isinstance(v, Mapping) and isinstance(out.get(k), Mapping):
            out[k] = deep_merge(out[k], v)
        else:
            out[k] = copy.deepcopy(v)
    return out


def _slug(value: Any) -> str:
    text = re.sub(r"[^A-Za-z0-9.]+", "-", str(value)).strip("-")
    return text[:40]


def _override_slug(overrides: Mapping[str, Any]) -> str:
    short = {"model.channels": "ch", "optim.lr": "lr", "optim.schedule.name": "opt", "train.total_kimg": "kimg"}
    parts = []
    for k in sorted(overrides):
        v = overrides[k]
        name = short.get(k, k.split(".")[-1])
        parts.append(f"{name}{_slug(v)}")
    return "_".join(parts)


def prepared_dir(data: Mapping[str, Any], split: str) -> str:
    """Where ``prepare`` writes a data set split: ``data/prepared/<dataset>[-<res>]-<split>``."""
    res = data.get("resolution")
    return f"data/prepared/{data['dataset']}{'-' + str(res) if res else ''}-{split}"


def scale_range(lo: int, hi: int, T: int, T_paper: int = 1000) -> tuple[int, int]:
    """Map a 1-based inclusive range of the paper's T (e.g. ``[1, 500]``) to 0-based ``[0, T-1]``."""
    f = T / T_paper
    a = max(0, min(T - 1, int(round((lo - 1) * f))))
    b = max(a, min(T - 1, int(round(hi * f)) - 1))
    return a, b


def _axes_config(axes: Mapping[str, Any], study: Mapping[str, Any], where: str) -> dict[str, Any]:
    """The run-config delta implied by the axis values."""
    delta: dict[str, Any] = {}
    samplers, weightings = study.get("samplers", {}), study.get("weightings", {})
    if "sampler" in axes:
        if axes["sampler"] not in samplers:
            raise ConfigError(f"{where}: sampler '{axes['sampler']}' is not in the samplers catalogue "
                              f"({', '.join(samplers)})")
        delta["timesteps"] = copy.deepcopy(samplers[axes["sampler"]])
    if "weighting" in axes:
        if axes["weighting"] not in weightings:
            raise ConfigError(f"{where}: weighting '{axes['weighting']}' is not in the weightings catalogue "
                              f"({', '.join(weightings)})")
        delta["weighting"] = copy.deepcopy(weightings[axes["weighting"]])
    if "prediction" in axes:
        delta.setdefault("diffusion", {})["prediction"] = axes["prediction"]
    if "schedule" in axes:
        delta.setdefault("diffusion", {})["schedule"] = axes["schedule"]
    if "batch_size" in axes:
        delta.setdefault("train", {})["batch_size"] = axes["batch_size"]
        micro = (study.get("base") or {}).get("train", {}).get("batch_gpu")
        if micro and (micro > axes["batch_size"] or axes["batch_size"] % micro):
            delta["train"]["batch_gpu"] = None  # a small batch fits on the device without accumulation
    if "seed" in axes:
        delta.setdefault("train", {})["seed"] = axes["seed"]
    return delta


def run_config(study: Mapping[str, Any], axes: Mapping[str, Any], overrides: Mapping[str, Any] | None = None,
               where: str = "study") -> dict[str, Any]:
    """Complete run config dict for one set of axis values plus dotted ``overrides``."""
    cfg = deep_merge(study.get("base", {}), _axes_config(axes, study, where))
    cfg.setdefault("data", {})["path"] = prepared_dir(study["data"], study["data"].get("train_split", "train"))
    cfg["data"].setdefault("name", study["data"]["dataset"])
    if overrides:
        cfg = apply_overrides(cfg, [f"{k}={_yaml_scalar(v)}" for k, v in overrides.items()])
    return cfg


def _yaml_scalar(v: Any) -> str:
    import json

    return json.dumps(v) if not isinstance(v, str) else v


def _default_axes(study: Mapping[str, Any]) -> dict[str, Any]:
    base = study.get("base", {})
    return {
        "sampler": study.get("default_sampler", "uniform"),
        "weighting": study.get("default_weighting", "none"),
        "prediction": base.get("diffusion", {}).get("prediction", "eps"),
        "batch_size": base.get("train", {}).get("batch_size", 128),
        "schedule": base.get("diffusion", {}).get("schedule", "linear"),
        "seed": base.get("train", {}).get("seed", 0),
    }


def _run_id(axes: Mapping[str, Any], overrides: Mapping[str, Any], init_from: str | None, tag: str | None) -> str:
    rid = (f"{_slug(axes['sampler'])}_{_slug(axes['weighting'])}_{_slug(axes['prediction'])}_b{axes['batch_size']}"
           f"_{_slug(axes['schedule'])}_s{axes['seed']}")
    if overrides:
        rid += "_" + _override_slug(overrides)
    if init_from:
        rid += f"_from-{_slug(init_from)}"
    if tag:
        rid += f"_{_slug(tag)}"
    return rid


def _entries(group: Mapping[str, Any], where: str) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    grid = group.get("grid") or {}
    for axis in grid:
        if axis not in AXES:
            raise ConfigError(f"{where}.grid: unknown axis '{axis}'; axes are {', '.join(AXES)}")
        if not isinstance(grid[axis], list) or not grid[axis]:
            raise ConfigError(f"{where}.grid.{axis}: expected a non-empty list")
    if grid:
        keys = list(grid)
        for values in itertools.product(*(grid[k] for k in keys)):
            out.append(dict(zip(keys, values)))
    for i, entry in enumerate(group.get("list") or []):
        unknown = set(entry) - ENTRY_KEYS
        if unknown:
            raise ConfigError(f"{where}.list[{i}]: unknown key(s) {sorted(unknown)}; allowed: {sorted(ENTRY_KEYS)}")
        out.append(dict(entry))
    for i, entry in enumerate(out):
        for axis in grid:  # list entries inherit unspecified grid axes only if the grid has one value
            if axis not in entry and len(grid[axis]) == 1:
                entry[axis] = grid[axis][0]
    return out


def build_runs(study: Mapping[str, Any], source: str = "study") -> dict[str, Run]:
    """All runs of a study keyed by id, with the groups that use each one.

    Raises :class:`ConfigError` when two entries map to the same id with different configs.
    """
    runs: dict[str, Run] = {}
    defaults = _default_axes(study)
    for gname, group in (study.get("groups") or {}).items():
        where = f"{source}: groups.{gname}"
        common = group.get("overrides") or {}
        seeds = group.get("seeds")
        entries = _entries(group, where)
        if seeds is not None:
            entries = [{**e, "seed": s} for e in entries for s in seeds] if entries else [{"seed": s} for s in seeds]
        for entry in entries:
            axes = {**defaults, **{k: entry[k] for k in AXES if k in entry}}
            overrides = {**common, **(entry.get("overrides") or {})}
            if "total_kimg" in entry:
                overrides["train.total_kimg"] = entry["total_kimg"]
            rid = entry.get("id") or _run_id(axes, overrides, entry.get("init_from"), entry.get("tag"))
            cfg = run_config(study, axes, overrides, where)
            progress = bool(group.get("progress", False))
            if rid in runs:
                prev = runs[rid]
                if prev.config != cfg or prev.init_from != entry.get("init_from"):
                    raise ConfigError(f"{where}: run '{rid}' is defined twice with different settings")
                runs[rid] = Run(rid, prev.axes, prev.config, prev.groups + (gname,), prev.init_from,
                                prev.progress or progress, prev.extra)
            else:
                runs[rid] = Run(rid, axes, cfg, (gname,), entry.get("init_from"), progress)
    # Snapshots only for runs whose FID is followed during training (they do not change training).
    every = (study.get("evaluation") or {}).get("progress_every_kimg")
    for rid, run in runs.items():
        if run.progress and every:
            run.config.setdefault("train", {})["snapshot_every_kimg"] = every
    return runs


def reference_run(study: Mapping[str, Any], source: str = "study") -> Run:
    """The reference ("pretrained") model of the seed paper's analyses, trained with a large batch
    unless ``reference.pretrained`` points at a checkpoint."""
    ref = study.get("reference") or {}
    cfg = run_config(study, _default_axes(study), ref.get("overrides") or {}, f"{source}: reference")
    return Run("reference", _default_axes(study), cfg, ("reference",))


def study_runs(study: Mapping[str, Any], source: str = "study") -> dict[str, Run]:
    """Every run of the study: the groups' runs plus the runs derived for the analyses.

    * ``reference``: see :func:`reference_run`.
    * ``finetune_slot<k>``: the reference fine-tuned on slot k only (sampler ``slots``, the slot
      ranges are filled in from the loss profile at run time: ``extra["slots_file"]``).
    * ``toward_zero_from-<run>``: the small-batch run retrained with the ``toward_zero`` sampler.

    When the reference is a pretrained diffusers folder (``reference: {pretrained: <folder>,
    format: diffusers}``), every run starting from it trains that ``UNet2DModel`` itself: its model
    section becomes ``{name: diffusers_unet2d, pretrained: <folder>, pretrained_format: diffusers}``
    (replaced, not merged: the base's UNet fields do not apply). Its diffusion section (T,
    schedule, prediction, variance) is the folder's, which :func:`write_run_config` reads when the
    job runs; this function reads no files, so the folder may be absent at DAG time.
    """
    runs = build_runs(study, source)
    analyses = study.get("analyses") or {}
    ref = reference_run(study, source)
    runs["reference"] = ref
    slots = analyses.get("slots") or {}
    for k in slots.get("finetune", []):
        n = slots.get("n_slots", 10)
        if not 1 <= k <= n:
            raise ConfigError(f"{source}: analyses.slots.finetune: slot {k} is outside 1..n_slots={n} (1-based)")
        cfg = deep_merge(ref.config, {
            "timesteps": {"name": "slots", "params": {"active": [k]}},
            "train": {"total_kimg": slots.get("finetune_kimg", 8)},
            "optim": {"warmup_kimg": 0},
        })
        runs[f"finetune_slot{k}"] = Run(f"finetune_slot{k}", ref.axes, cfg, (), "reference",
                                        extra={"slots_file": "analyses/slots.json", "slot": k})
    bs = analyses.get("batch_size") or {}
    if bs:
        small_axes = {**_default_axes(study), "batch_size": bs.get("small", 16)}
        small_id = _run_id(small_axes, {}, None, None)
        if small_id not in runs:
            raise ConfigError(f"{source}: analyses.batch_size.small={bs.get('small')}: no run '{small_id}' in the "
                              f"groups (add the batch size to groups.batch_size.grid.batch_size)")
        sampler = {"name": "toward_zero", "params": {"scale": bs.get("toward_zero_scale", 150)}}
        cfg = deep_merge(runs[small_id].config, {
            "timesteps": sampler,
            "train": {"total_kimg": bs.get("toward_zero_kimg", 8), "snapshot_every_kimg": None},
            "optim": {"warmup_kimg": 0},
        })
        rid = f"toward_zero_from-{small_id}"
        runs[rid] = Run(rid, {**small_axes, "sampler": "toward_zero"}, cfg, ("batch_size",), small_id)
    ref_spec = study.get("reference") or {}
    if ref_spec.get("pretrained") and ref_spec.get("format") == "diffusers":
        model = {"name": "diffusers_unet2d", "pretrained": str(ref_spec["pretrained"]),
                 "pretrained_format": "diffusers"}
        for rid, run in runs.items():
            if run.init_from == "reference":
                runs[rid] = Run(rid, run.axes, {**run.config, "model": dict(model)}, run.groups, run.init_from,
                                run.progress, run.extra)
    return runs


def launcher(gpus: int) -> str:
    """The command prefix of a training job: one process, or torchrun with one process per GPU."""
    if gpus > 1:
        return f"torchrun --standalone --nproc_per_node {gpus} -m timestep_lab"
    return "python -m timestep_lab"


def write_run_config(cfg: Mapping[str, Any], path: str, *, init_from: str | None = None,
                     slots_file: str | None = None, slot: int | None = None) -> None:
    """Write a run's config file, filling in what is only known at run time: the model to start
    from and, for slot fine-tuning, the slot ranges measured on the reference model.

    An ``init_from`` that is a folder is a diffusers ``UNet2DModel`` (the only checkpoint format
    that is a folder): the run then trains that network, so its ``model`` section is replaced by
    ``{name: diffusers_unet2d, pretrained: <folder>, pretrained_format: diffusers}`` and its
    ``diffusion`` section takes the folder's ``num_timesteps``, ``schedule``,
    ``schedule_params``, ``prediction`` and ``variance`` (from ``scheduler_config.json``; see
    :func:`timestep_lab.models.pretrained.diffusers_run_config`), so the fine-tuned model is
    trained on the very process the reference was profiled and sampled with.
    """
    import json
    from pathlib import Path

    from timestep_lab.config import config_from_dict, dump_config

    cfg = copy.deepcopy(dict(cfg))
    if init_from:
        cfg.setdefault("train", {})["init_from"] = str(init_from)
    if init_from and Path(init_from).is_dir():
        from timestep_lab.models.pretrained import diffusers_run_config

        pre = diffusers_run_config(init_from)
        cfg["model"] = pre["model"]
        # schedule_params belong to the folder's schedule: replace them rather than merge
        cfg["diffusion"] = {**(cfg.get("diffusion") or {}), **pre["diffusion"]}
    if slots_file:
        ranges = json.loads(open(slots_file).read())["slots"]
        cfg.setdefault("timesteps", {}).setdefault("params", {})["slots"] = [list(r) for r in ranges]
    dump_config(config_from_dict(cfg, f"{path} (run config)"), path)


def opt(flag: str, value: Any) -> str:
    """``"--flag value"``, or an empty string when ``value`` is None."""
    return "" if value is None else f"{flag} {value}"


def _median_step_time(log_records: list[dict]) -> float | None:
    """Median seconds per optimizer step over the log, skipping the first interval (warm-up)."""
    import statistics

    times = [r["sec_per_step"] for r in log_records[1:] if r.get("sec_per_step")] or \
        [r["sec_per_step"] for r in log_records if r.get("sec_per_step")]
    return statistics.median(times) if times else None


def collect(runs: Mapping[str, Mapping[str, Any]], results_dir: str, metrics_csv: str, runs_csv: str,
            summary_json: str) -> None:
    """Gather every run's ``metrics.json``, ``fid_progress.json`` and ``train_log.jsonl`` into one
    tidy metrics table (one row per run x stage x images seen x metric x tool), a run table, and
    a small JSON summary (DVC metrics: final FID per group variant, mean over seeds)."""
    import json
    from pathlib import Path

    import pandas as pd

    from timestep_lab.io import atomic_path, atomic_write_json

    rows, run_rows = [], []
    root = Path(results_dir) / "runs"
    for rid, info in runs.items():
        axes, groups = info["axes"], info["groups"]
        base = {"run": rid, **axes, "groups": ";".join(groups), **info.get("columns", {})}
        rdir = root / rid
        log_file = rdir / "train_log.jsonl"
        log = [json.loads(x) for x in log_file.read_text().splitlines()] if log_file.exists() else []
        # runs outside every group (slot fine-tunes, toward_zero retraining) are analysed, not scored
        model_status = "missing" if groups else "unscored"
        metrics_file = rdir / "metrics.json"
        if metrics_file.exists():
            m = json.loads(metrics_file.read_text())
            model_status = m.get("status", "ok")
            for rec in m.get("records", []):
                rows.append({**base, "stage": "final", "nimg": m.get("nimg", rec.get("nimg")), **_record(rec)})
        prog_file = rdir / "fid_progress.json"
        if prog_file.exists():
            for point in json.loads(prog_file.read_text()).get("points", []):
                for rec in point.get("records", []):
                    rows.append({**base, "stage": "progress", "nimg": point["nimg"], **_record(rec)})
        if not log and not metrics_file.exists():
            continue
        run_rows.append({**base, "status": model_status, "nimg": log[-1]["nimg"] if log else None,
                         "final_loss": log[-1]["loss"] if log else None, "sec_per_step": _median_step_time(log),
                         "wall_time_s": log[-1]["wall_time_s"] if log else None,
                         "train_log": str(log_file) if log else ""})
    metrics = pd.DataFrame(rows)
    if len(metrics):
        metrics["kimg"] = metrics["nimg"] / 1000.0
    table = pd.DataFrame(run_rows)
    for df, path in ((metrics, metrics_csv), (table, runs_csv)):
        with atomic_path(path, suffix=".csv") as tmp:
            df.to_csv(tmp, index=False)
    atomic_write_json(summary_json, summarize(metrics, table))


def _record(rec: Mapping[str, Any]) -> dict[str, Any]:
    """One tidy row per metric value, with its whole protocol (METHODS.md: every FID with how it was
    measured): tool, extractor and weights hash, sample counts, reverse sampler, EMA, seeds, reference."""
    keys = ("metric", "value", "tool", "tool_version", "feature_extractor", "feature_weights_sha256", "label",
            "num_generated", "num_reference", "sampler", "steps", "eta", "ema", "reference_file", "reference_sha256")
    out = {k: rec.get(k) for k in keys}
    out["method"] = out.pop("sampler")  # the reverse sampler; "sampler" is the timestep-sampler axis
    seeds = rec.get("seed_range")
    out["seeds"] = f"{seeds[0]}-{seeds[1]}" if seeds else None
    return out


def summarize(metrics: "Any", runs: "Any") -> dict[str, Any]:
    """Headline numbers: per group and variant, the final FID (torch-fidelity) mean/std over the
    seeds of runs that finished (diverged or missing runs are listed in ``failed_runs`` instead)."""
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
    tool = "torch-fidelity" if (final["tool"] == "torch-fidelity").any() else final["tool"].iloc[0]
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
    import statistics

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
    # speed-up to uniform's final FID, per variant of the sampler comparison (mean curve over seeds)
    prog = metrics[(metrics["stage"] == "progress") & (metrics["metric"] == "fid") & (metrics["tool"] == tool)]
    prog = prog[prog["groups"].fillna("").str.split(";").apply(lambda g: "sampler_comparison" in g)]
    if len(prog):
        from timestep_lab.studies import speedups

        curves = {}
        for variant, df in prog.assign(variant=prog["sampler"] + "+" + prog["weighting"]).groupby("variant"):
            mean = df.groupby("kimg")["value"].mean()
            curves[variant] = (mean.index.tolist(), mean.tolist())
        out["speedup"] = {k: (None if v != v else v) for k, v in speedups(curves, "uniform+none").items()}
    return out


def contribution_ranges(study: Mapping[str, Any]) -> dict[str, tuple[int, int] | None]:
    """Ground-truth replacement ranges of the timestep-contribution analysis, as 0-based inclusive
    ranges of this study's T keyed by a path-safe label; ``"none"`` is the baseline without
    replacement. The paper's ranges are 1-based on T = 1000 (seed paper Fig. 3)."""
    T = int(((study.get("base") or {}).get("diffusion") or {}).get("num_timesteps", 1000))
    ranges = ((study.get("analyses") or {}).get("timestep_contribution") or {}).get("ranges", [])
    out: dict[str, tuple[int, int] | None] = {"none": None}
    for lo, hi in ranges:
        if not 1 <= lo <= hi <= 1000:
            raise ConfigError(f"analyses.timestep_contribution.ranges: [{lo}, {hi}] must satisfy 1 <= lo <= hi <= 1000 "
                              f"(the paper's 1-based timesteps; scaled to T={T})")
        out[f"t{lo}-{hi}"] = scale_range(lo, hi, T)
    return out


def dvc_export(summary_json: str, metrics_csv: str, profile_json: str, metrics_out: str, fid_progress_out: str,
               loss_profile_out: str) -> None:
    """Flat files for ``dvc metrics`` / ``dvc plots``: final FID per group variant, FID against
    images seen per sampler-comparison variant (mean over seeds), and the reference loss profile."""
    import json
    from pathlib import Path

    import pandas as pd

    from timestep_lab.io import atomic_path, atomic_write_json

    summary = json.loads(Path(summary_json).read_text())
    flat = {"runs": summary.get("runs", 0), "failed_runs": len(summary.get("failed_runs", []))}
    for group, variants in (summary.get("fid") or {}).items():
        for variant, stats in variants.items():
            flat[f"fid.{group}.{variant.split('+')[0]}+{variant.split('+')[1]}"] = round(stats["mean"], 4)
    for variant, value in (summary.get("speedup") or {}).items():
        flat[f"speedup.{variant}"] = None if value is None else round(value, 4)
    atomic_write_json(metrics_out, flat)
    metrics = pd.read_csv(metrics_csv)
    prog = metrics[(metrics["stage"] == "progress") & (metrics["metric"] == "fid") & (metrics["tool"] == "torch-fidelity")]
    prog = prog.assign(variant=prog["sampler"] + "+" + prog["weighting"])
    curve = prog.groupby(["variant", "kimg"], as_index=False)["value"].mean().rename(columns={"value": "fid"})
    with atomic_path(fid_progress_out, suffix=".csv") as tmp:
        curve.to_csv(tmp, index=False)
    prof = json.loads(Path(profile_json).read_text())
    table = pd.DataFrame({"t": prof["timesteps"], "eps_mse": prof["eps_mse"], "vlb_bpd": prof["vlb_bpd"]})
    with atomic_path(loss_profile_out, suffix=".csv") as tmp:
        table.to_csv(tmp, index=False)


def schema_error_summary(message: str) -> str:
    """One line from Snakemake's schema-validation error: the offending key as a dotted path and
    jsonschema's reason, e.g. ``evaluation.num_samples: 'x' is not of type 'integer'``."""
    reason = next((ln.split("ValidationError:", 1)[1].strip() for ln in message.splitlines()
                   if "ValidationError:" in ln), message.strip().splitlines()[-1] if message.strip() else "invalid")
    where = next((ln for ln in message.splitlines() if ln.startswith("On instance")), "")
    keys = re.findall(r"\[(?:'([^']*)'|(\d+))\]", where)
    path = ".".join(k or i for k, i in keys)
    return f"{path}: {reason}" if path else f"{reason} (workflow/schemas/config.schema.yaml)"
