"""The run table of a study's groups: one complete run config per run, with a readable id.

A study config (``config/*.yaml``) names catalogues of timestep samplers and weightings, a
``base`` run config (nested deltas over :class:`timestep_lab.config.RunConfig`), and *groups* of
runs, each a grid (``sampler x weighting x prediction x batch_size x schedule x seed``) and/or an
explicit list; ``progress: true`` follows a group's FID during training, with snapshots every
``progress_every_kimg`` (the group's, else ``evaluation.progress_every_kimg``). Everything a group or entry changes
beyond the axes is an ``overrides:`` mapping
of dotted run-config keys, the one shape used everywhere in a study config, run length included
(``overrides: {train.total_kimg: 8}``). Every run gets an id built from its axes, so the same run
requested by two groups is trained once::

    uniform_none_eps_b128_linear_s0
    speed_speed_eps_b128_linear_s1
    uniform_none_eps_b128_linear_s0_ch24     (overrides are appended as a slug)

Pure functions of dicts: no Snakemake, no torch, no pandas, no files (the Snakefile imports this
at DAG build). The runs the analyses derive (reference, fine-tunes) are
:mod:`timestep_lab.workflow.study`'s.
"""

from __future__ import annotations

import copy
import itertools
import json
import re
from dataclasses import dataclass, field
from typing import Any, Mapping

from timestep_lab.config import ConfigError, apply_overrides

__all__ = ["Run", "AXES", "build_runs", "run_config", "deep_merge", "prepared_base", "prepared_dir",
           "latent_dir", "is_latent", "apply_dotted", "check_overrides",
           "default_axes", "run_id", "check_entry_spelling", "eval_sample", "process_kind", "ARM_COLUMNS", "arm_columns",
           "arm_id", "base_columns", "run_table"]

AXES = ("sampler", "weighting", "prediction", "batch_size", "schedule", "seed")
ENTRY_KEYS = set(AXES) | {"id", "overrides", "init_from", "tag"}
LENGTH_KEY = "train.total_kimg"  # the one spelling of a run's length outside ``base``
#: Columns of ``runs.csv``/``metrics.csv`` beyond :data:`AXES` that tell arms apart where a group
#: varies more than the axes (the consistency group's optimizer schedules and widths, the batch-size
#: group's continuations, a shortened run, a flow arm scored on a shifted grid): claims and baselines
#: select arms by these values (:func:`timestep_lab.evidence.verdicts.select_arm`), never by pieces of
#: a run id.
ARM_COLUMNS = ("optim_schedule", "lr_compensated", "channels", "total_kimg", "init_from", "sample_shift")


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


def check_overrides(overrides: Any, where: str) -> dict[str, Any]:
    """``overrides`` as a dict of dotted run-config keys; a nested section (``train: {...}``), which
    would replace the whole section, fails naming the key and the dotted spelling."""
    if overrides is None:
        return {}
    if not isinstance(overrides, Mapping):
        raise ConfigError(f"{where}.overrides: expected a mapping of dotted run-config keys, got {overrides!r}")
    for key, value in overrides.items():
        if "." not in str(key):
            example = next(iter(value), "key") if isinstance(value, Mapping) else "key"
            raise ConfigError(f"{where}.overrides.{key}: use dotted run-config keys, e.g. '{key}.{example}: ...'")
    return dict(overrides)


def check_entry_spelling(entry: Mapping[str, Any], where: str) -> None:
    """Fail on a list entry's retired ``total_kimg``, naming the ``overrides`` spelling."""
    if isinstance(entry, Mapping) and "total_kimg" in entry:
        raise ConfigError(f"{where}.total_kimg: write 'overrides: {{{LENGTH_KEY}: {entry['total_kimg']}}}' instead")


def apply_dotted(cfg: Mapping[str, Any], overrides: Mapping[str, Any]) -> dict[str, Any]:
    """``cfg`` with each dotted ``key: value`` of ``overrides`` set (values may be lists or mappings)."""
    if not overrides:
        return copy.deepcopy(dict(cfg))
    return apply_overrides(cfg, [f"{k}={v if isinstance(v, str) else json.dumps(v)}" for k, v in overrides.items()])


def _slug(value: Any) -> str:
    text = re.sub(r"[^A-Za-z0-9.]+", "-", str(value)).strip("-")
    return text[:40]


def _override_slug(overrides: Mapping[str, Any]) -> str:
    # the process and its reverse sampler read as words: ..._s0_flow_euler
    short = {"model.channels": "ch", "optim.lr": "lr", "optim.schedule.name": "opt", LENGTH_KEY: "kimg",
             "diffusion.kind": "", "sample.method": ""}
    parts = []
    for k in sorted(overrides):
        name = short.get(k, k.split(".")[-1])
        parts.append(f"{name}{_slug(overrides[k])}")
    return "_".join(parts)


def process_kind(config: Mapping[str, Any]) -> str:
    """The process of a run config dict: ``diffusion.kind`` (default ``gaussian``)."""
    return str((config.get("diffusion") or {}).get("kind", "gaussian"))


def eval_sample(evaluation: Mapping[str, Any], config: Mapping[str, Any]) -> dict[str, Any]:
    """The reverse-sampler settings a run is scored with: ``evaluation.sample``, then the keys of
    ``evaluation.sample_by_kind[<its diffusion.kind>]`` (the flow's ODE solver in place of DDIM)."""
    by_kind = evaluation.get("sample_by_kind") or {}
    return {**(evaluation.get("sample") or {}), **(by_kind.get(process_kind(config)) or {})}


def fid_sample_count(evaluation: Mapping[str, Any], *, progress: bool = False) -> int:
    """The study's FID sample count: ``evaluation.num_samples`` (the final FID, and the floor's
    held-out count), or ``evaluation.progress_num_samples`` at the progress points. The one
    place it is read: the workflow's rules and the estimate ask here."""
    return int(evaluation["progress_num_samples" if progress else "num_samples"])


def scoring_sample(evaluation: Mapping[str, Any], config: Mapping[str, Any], *, progress: bool = False) -> dict[str, Any]:
    """Every ``sample.*`` setting a run is scored with: the FID sample count
    (:func:`fid_sample_count`) and the reverse sampler (:func:`eval_sample`); over the model
    file's own ``sample:`` settings."""
    return {"num_samples": fid_sample_count(evaluation, progress=progress), **eval_sample(evaluation, config)}


def prepared_base(data: Mapping[str, Any]) -> str:
    """``data.prepared``, the folder of the prepared splits (default ``data/prepared``); one that
    names the file-system root (``''``, ``/``) is a :class:`ConfigError`: every split would go there."""
    base = data.get("prepared")
    base = "data/prepared" if base is None else str(base)
    if not base.strip("/"):
        raise ConfigError(f"data.prepared: {base!r} would put the prepared data at the file-system root; name a "
                          f"folder (default data/prepared)")
    return base


def prepared_dir(data: Mapping[str, Any], split: str) -> str:
    """Where ``prepare`` writes a data set split: ``<prepared>/<dataset>[-<res>]-<split>``
    (``data.prepared``: :func:`prepared_base`)."""
    res = data.get("resolution")
    return f"{prepared_base(data)}/{data['dataset']}{'-' + str(res) if res else ''}-{split}"


def latent_dir(data: Mapping[str, Any], split: str) -> str:
    """Where ``encode-latents`` writes a split's latents: its prepared folder's name + ``-latents``."""
    return prepared_dir(data, split) + "-latents"


def is_latent(study: Mapping[str, Any]) -> bool:
    """Whether the study trains on VAE latents (``latent.vae`` names a VAE folder)."""
    return bool((study.get("latent") or {}).get("vae"))


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
    train_split = study["data"].get("train_split", "train")
    folder = latent_dir if is_latent(study) else prepared_dir  # a latent study trains on the encoded split
    cfg.setdefault("data", {})["path"] = folder(study["data"], train_split)
    cfg["data"].setdefault("name", study["data"]["dataset"])
    return apply_dotted(cfg, overrides or {})


def default_axes(study: Mapping[str, Any]) -> dict[str, Any]:
    """The axis values of a run that sets none: the study's defaults and ``base``."""
    base = study.get("base", {})
    return {
        "sampler": study.get("default_sampler", "uniform"),
        "weighting": study.get("default_weighting", "none"),
        "prediction": base.get("diffusion", {}).get("prediction", "eps"),
        "batch_size": base.get("train", {}).get("batch_size", 128),
        "schedule": base.get("diffusion", {}).get("schedule", "linear"),
        "seed": base.get("train", {}).get("seed", 0),
    }


def arm_columns(config: Mapping[str, Any], init_from: str | None) -> dict[str, Any]:
    """The :data:`ARM_COLUMNS` of a run: its optimizer schedule (``constant`` when none), whether
    that schedule compensates the learning rate, its width (``model.channels``, a DiT's
    ``model.params.hidden``), its length
    (``train.total_kimg``), the run it starts from (``none``) and the inference-time shift it is
    scored with (``sample.shift``, 1.0 when unset: a run's own setting, which the evaluation's
    sampler settings may not override, :func:`timestep_lab.workflow.study.check_spelling`)."""
    schedule = (config.get("optim") or {}).get("schedule") or {}
    model = config.get("model") or {}
    return {"optim_schedule": schedule.get("name", "constant"),
            "lr_compensated": bool((schedule.get("params") or {}).get("compensate", False)),
            # a UNet's width, else a DiT's (model.params.hidden: the consistency group's width arm)
            "channels": model.get("channels") or (model.get("params") or {}).get("hidden") or None,
            "total_kimg": (config.get("train") or {}).get("total_kimg"),
            "init_from": init_from or "none",
            "sample_shift": float((config.get("sample") or {}).get("shift", 1.0))}


def base_columns(study: Mapping[str, Any]) -> dict[str, Any]:
    """The study's own value of every axis but the seed and of every :data:`ARM_COLUMNS` entry: what
    a selector's ``"{base}"`` stands for (a run that sets nothing has them)."""
    axes = {k: v for k, v in default_axes(study).items() if k != "seed"}
    return {**axes, **arm_columns(study.get("base") or {}, None)}


def run_table(runs: Mapping[str, Run]) -> dict[str, dict[str, Any]]:
    """What runs.csv holds of each run beyond its results (collect writes it): run id ->
    ``{"axes": the grid axes, "groups": the groups that asked for it, "columns": its
    :func:`arm_columns`}``."""
    return {rid: {"axes": dict(r.axes), "groups": list(r.groups), "columns": arm_columns(r.config, r.init_from)}
            for rid, r in runs.items()}


def arm_id(rid: str, seed: Any) -> str:
    """The arm a run belongs to: its id without the ``_s<seed>`` component (:func:`run_id` builds
    it there; runs of one arm differ only in seed, so paired comparisons join arms on seed)."""
    token = f"_s{seed}"
    i = rid.find(token + "_")
    if i < 0 and rid.endswith(token):
        i = len(rid) - len(token)
    return rid if i < 0 else rid[:i] + rid[i + len(token):]


def run_id(axes: Mapping[str, Any], overrides: Mapping[str, Any], init_from: str | None, tag: str | None) -> str:
    """``<sampler>_<weighting>_<prediction>_b<batch>_<schedule>_s<seed>[_<overrides>][_from-<run>][_<tag>]``."""
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
        if len({json.dumps(v, sort_keys=True) for v in grid[axis]}) != len(grid[axis]):
            raise ConfigError(f"{where}.grid.{axis}: {grid[axis]} repeats a value (it would be one run, silently)")
    if grid:
        keys = list(grid)
        for values in itertools.product(*(grid[k] for k in keys)):
            out.append(dict(zip(keys, values)))
    for i, entry in enumerate(group.get("list") or []):
        check_entry_spelling(entry, f"{where}.list[{i}]")
        unknown = set(entry) - ENTRY_KEYS
        if unknown:
            raise ConfigError(f"{where}.list[{i}]: unknown key(s) {sorted(unknown)}; allowed: {sorted(ENTRY_KEYS)}")
        out.append({**entry, "overrides": check_overrides(entry.get("overrides"), f"{where}.list[{i}]")})
    for entry in out:
        for axis in grid:  # list entries inherit unspecified grid axes only if the grid has one value
            if axis not in entry and len(grid[axis]) == 1:
                entry[axis] = grid[axis][0]
    return out


def build_runs(study: Mapping[str, Any], source: str = "study") -> dict[str, Run]:
    """All runs of a study's groups keyed by id, with the groups that use each one.

    Raises :class:`ConfigError` when two entries map to the same id with different configs.
    """
    runs: dict[str, Run] = {}
    defaults = default_axes(study)
    every = (study.get("evaluation") or {}).get("progress_every_kimg")
    cadence: dict[str, float] = {}  # run -> the densest snapshot spacing any of its groups asks for
    for gname, group in (study.get("groups") or {}).items():
        where = f"{source}: groups.{gname}"
        common = check_overrides(group.get("overrides"), where)
        seeds = group.get("seeds")
        if seeds is not None and len(set(seeds)) != len(seeds):
            raise ConfigError(f"{where}.seeds: {seeds} repeats a seed (it would be one run, silently)")
        entries = _entries(group, where)
        if seeds is not None:
            entries = [{**e, "seed": s} for e in entries for s in seeds] if entries else [{"seed": s} for s in seeds]
        for entry in entries:
            axes = {**defaults, **{k: entry[k] for k in AXES if k in entry}}
            overrides = {**common, **(entry.get("overrides") or {})}
            rid = entry.get("id") or run_id(axes, overrides, entry.get("init_from"), entry.get("tag"))
            cfg = run_config(study, axes, overrides, where)
            progress = bool(group.get("progress", False))
            group_every = group.get("progress_every_kimg") or every
            if progress and group_every:
                cadence[rid] = min(cadence.get(rid, group_every), group_every)
            if rid in runs:
                prev = runs[rid]
                if prev.config != cfg or prev.init_from != entry.get("init_from"):
                    raise ConfigError(f"{where}: run '{rid}' is defined twice with different settings")
                runs[rid] = Run(rid, prev.axes, prev.config, prev.groups + (gname,), prev.init_from,
                                prev.progress or progress, prev.extra)
            else:
                runs[rid] = Run(rid, axes, cfg, (gname,), entry.get("init_from"), progress)
    # Snapshots only for runs whose FID is followed during training (they do not change training);
    # a run in several groups gets the densest spacing (groups.<g>.progress_every_kimg, else
    # evaluation.progress_every_kimg)
    for rid, run in runs.items():
        if run.progress and rid in cadence:
            run.config.setdefault("train", {})["snapshot_every_kimg"] = cadence[rid]
    return runs
