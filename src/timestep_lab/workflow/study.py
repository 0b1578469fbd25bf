"""Every run of a study: the groups' runs plus the runs the analyses derive from them.

* ``reference``: the "pretrained" model of the seed paper's analyses (``reference.overrides``
  over ``base``), unless ``reference.pretrained`` points at a checkpoint;
* ``finetune_slot<k>[_s<seed>]``: the reference fine-tuned on slot k only, and its control
  ``finetune_uniform[_s<seed>]``: the same fine-tuning (budget, learning rate, seed) on uniform t
  (``analyses.slots``; one of each per seed of ``analyses.slots.seeds``, the reference's seed
  without the suffix). A fine-tune and the control of one seed are paired: same data order and
  noise (docs/methods.md §3.2, §9.1);
* ``toward_zero_from-<run>``: the small-batch run retrained with the ``toward_zero`` sampler
  (``analyses.batch_size``), and with ``analyses.batch_size.control: true`` its control
  ``uniform_from-<run>``: the same continuation (images, learning rate, seed) on uniform t;
* ``superres``: the super-resolution model of the timestep-contribution analysis, the base run
  conditioned on a low-resolution copy of its target (``conditioning: lowres``;
  ``analyses.timestep_contribution.superres``: ``factor``, ``upsample``, ``overrides``), trained
  from scratch, as the paper's analysis ran on guided-diffusion's SR model (docs/methods.md §3.4).

In a latent study the pixel reference, the runs starting from it and (with a ``pixel`` section)
``superres`` are pixel runs (:mod:`timestep_lab.workflow.spaces`, docs/methods.md 7.9).

A run's length is spelled one way in a study config: ``train.total_kimg``, nested in ``base``
and a dotted key of an ``overrides:`` mapping everywhere else (groups, list entries,
``reference``, ``analyses.slots``, ``analyses.batch_size``). :func:`check_spelling` rejects the
retired spellings with the new one.

Pure functions of dicts: no Snakemake, no torch, no pandas, no files.
"""

from __future__ import annotations

import re
from typing import Any, Mapping

from timestep_lab.config import ConfigError
from timestep_lab.groups import config_groups
from timestep_lab.processes.timeranges import chain_timesteps, scale_range
from timestep_lab.workflow.runs import (
    LENGTH_KEY,
    Run,
    apply_dotted,
    build_runs,
    check_entry_spelling,
    check_overrides,
    deep_merge,
    default_axes,
    run_config,
    run_id,
)
from timestep_lab.workflow.spaces import check_spaces, pixel_study, reference_in_pixels, superres_in_pixels

__all__ = ["study_runs", "reference_run", "superres_run", "SUPERRES_RUN", "finetune_runs",
           "contribution_ranges", "contribution_sample_count",
           "check_spelling", "check_analysis_needs", "RESERVED_RUN_IDS"]

# retired study-config keys -> the analysis section that now takes ``overrides: {train.total_kimg: N}``
_RETIRED = {("slots", "finetune_kimg"): "analyses.slots", ("batch_size", "toward_zero_kimg"): "analyses.batch_size"}
DEFAULT_DERIVED_KIMG = 8  # length of a derived run whose section sets no train.total_kimg
SUPERRES_RUN = "superres"  # the run id of the contribution analysis' super-resolution model
SUPERRES_DEFAULTS = {"factor": 4, "upsample": "nearest"}  # guided-diffusion's SR: 64 -> 256, a factor of 4
#: the ids of the runs this module derives (module docstring): a group's run may not take one, or
#: the derived run would silently replace it (or it the derived run)
RESERVED_RUN_IDS = re.compile(r"reference|superres|finetune_slot\d+(_s\d+)?|finetune_uniform(_s\d+)?|(toward_zero|uniform)_from-.*")


def check_spelling(study: Mapping[str, Any], source: str = "study") -> None:
    """Fail on a retired key, naming it and its replacement (called before the schema check, whose
    message could not name the new spelling): the run-length keys of the analyses, and
    ``analyses.consistency.num_samples`` (never read: the FID sample count is
    ``evaluation.num_samples``); and ``shift`` in the evaluation's sampler settings (the
    inference-time shift is an arm's own ``sample.shift``, the run table's ``sample_shift``)."""
    analyses = study.get("analyses")
    consistency = analyses.get("consistency") if isinstance(analyses, Mapping) else None
    if isinstance(consistency, Mapping) and "num_samples" in consistency:
        raise ConfigError(f"{source}: analyses.consistency.num_samples is not a setting: the consistency analysis "
                          f"compares the runs' scored samples, evaluation.num_samples of them; delete the key")
    for (section, key), where in _RETIRED.items():
        spec = analyses.get(section) if isinstance(analyses, Mapping) else None
        if isinstance(spec, Mapping) and key in spec:
            raise ConfigError(f"{source}: {where}.{key}: write '{where}.overrides: {{{LENGTH_KEY}: {spec[key]}}}' "
                              f"instead")
    evaluation = study.get("evaluation") if isinstance(study.get("evaluation"), Mapping) else {}
    by_kind = evaluation.get("sample_by_kind") if isinstance(evaluation.get("sample_by_kind"), Mapping) else {}
    for where, spec in (("evaluation.sample", evaluation.get("sample")),
                        *((f"evaluation.sample_by_kind.{k}", v) for k, v in by_kind.items())):
        if isinstance(spec, Mapping) and "shift" in spec:
            # the shift is an arm's own setting (runs.csv's sample_shift column): a study-wide one here
            # would score every run on a grid its column does not name
            raise ConfigError(f"{source}: {where}.shift: the inference-time shift is a run's own setting; set "
                              f"sample.shift in base (every run) or in an arm's overrides, and delete this key")
    groups = study.get("groups")
    for gname, group in (groups.items() if isinstance(groups, Mapping) else ()):
        entries = group.get("list") if isinstance(group, Mapping) else None
        for i, entry in enumerate(entries if isinstance(entries, list) else ()):
            check_entry_spelling(entry, f"{source}: groups.{gname}.list[{i}]")


def check_group_names(study: Mapping[str, Any], source: str = "study") -> None:
    """Fail on a ``groups.<name>`` that no study group's record (:mod:`timestep_lab.groups`) has,
    listing the recorded ones (called where the DAG is built; the schema leaves the names open)."""
    groups = study.get("groups")
    for gname in (groups if isinstance(groups, Mapping) else ()):
        if gname not in config_groups():
            raise ConfigError(f"{source}: groups.{gname}: not a study group; the recorded ones are "
                              f"{', '.join(config_groups())} (a new one is a record in timestep_lab/groups/entries.py: "
                              f"docs/design.md#adding-a-study-group)")


def reference_run(study: Mapping[str, Any], source: str = "study") -> Run:
    """The reference ("pretrained") model of the seed paper's analyses, trained here unless
    ``reference.pretrained`` points at a checkpoint. With ``reference.progress_every_kimg`` its FID
    is followed during training (snapshots at that spacing): the long run every report places
    its own runs' length on (docs/methods.md §8.8)."""
    ref = study.get("reference") or {}
    where = f"{source}: reference"
    cfg = run_config(study, default_axes(study), check_overrides(ref.get("overrides"), where), where)
    every = ref.get("progress_every_kimg")
    progress = bool(every) and not ref.get("pretrained")
    if progress:
        cfg.setdefault("train", {})["snapshot_every_kimg"] = every
    return Run("reference", default_axes(study), cfg, ("reference",), progress=progress)


def superres_run(study: Mapping[str, Any], source: str = "study") -> Run:
    """The super-resolution model the timestep-contribution analysis runs on (module docstring):
    the base run's config (default axes) with ``conditioning: {name: lowres, params: {factor,
    upsample}}`` from ``analyses.timestep_contribution.superres`` (defaults
    :data:`SUPERRES_DEFAULTS`), then that section's ``overrides``. Every study has it, as every
    study runs the contribution analysis (its group ``needs: always``); it is trained only when
    the analysis is asked for. Not scored (no group): the analysis samples it conditioned."""
    spec = (study.get("analyses") or {}).get("timestep_contribution") or {}
    sr = spec.get("superres") or {}
    where = f"{source}: analyses.timestep_contribution.superres"
    cfg = run_config(study, default_axes(study), {}, where)
    cfg["conditioning"] = {"name": "lowres", "params": {k: sr.get(k, v) for k, v in SUPERRES_DEFAULTS.items()}}
    cfg = apply_dotted(cfg, check_overrides(sr.get("overrides"), where))
    return Run(SUPERRES_RUN, default_axes(study), cfg, (), extra={"superres": True})


def _derived_config(parent: Mapping[str, Any], delta: Mapping[str, Any], spec: Mapping[str, Any],
                    where: str) -> dict[str, Any]:
    """``parent`` with the analysis' fixed ``delta``, then the section's ``overrides``."""
    cfg = deep_merge(parent, {"train": {"total_kimg": DEFAULT_DERIVED_KIMG}, "optim": {"warmup_kimg": 0}})
    return apply_dotted(deep_merge(cfg, delta), check_overrides(spec.get("overrides"), where))


def study_runs(study: Mapping[str, Any], source: str = "study") -> dict[str, Run]:
    """Every run of the study: the groups' runs plus the runs derived for the analyses (module
    docstring). Fine-tunes start from the reference with warm-up 0 and 8 kimg unless their
    section's ``overrides`` say otherwise; slot ranges are filled in from the loss profile at run
    time (``extra["slots_file"]``).

    When the reference is a pretrained diffusers folder (``reference: {pretrained: <folder>,
    format: diffusers}``), every run starting from it trains that ``UNet2DModel`` itself: its model
    section becomes ``{name: diffusers_unet2d, pretrained: <folder>, pretrained_format: diffusers}``
    (replaced, not merged: the base's UNet fields do not apply). Its diffusion section (T,
    schedule, prediction, variance) is the folder's, which
    :func:`timestep_lab.workflow.run_yaml.write_run_config` reads when the job runs; this function
    reads no files, so the folder may be absent at DAG time.
    """
    check_spelling(study, source)
    runs = build_runs(study, source)
    for rid, run in runs.items():
        if RESERVED_RUN_IDS.fullmatch(rid):
            raise ConfigError(f"{source}: groups.{run.groups[0]}: run id '{rid}' is reserved for a run the analyses "
                              f"derive (reference, superres, finetune_slot<k>[_s<seed>], finetune_uniform[_s<seed>], "
                              f"toward_zero_from-<run>, uniform_from-<run>); give the entry another id")
    analyses = study.get("analyses") or {}
    # a latent study's pixel runs (workflow/spaces.py): the pixel reference, what starts from it, the SR model
    ref = reference_run(pixel_study(study) if reference_in_pixels(study) else study, source)
    runs["reference"] = ref
    runs.update(finetune_runs(study, ref, source))
    runs[SUPERRES_RUN] = superres_run(pixel_study(study) if superres_in_pixels(study) else study, source)
    bs = analyses.get("batch_size") or {}
    if bs:
        small_axes = {**default_axes(study), "batch_size": bs.get("small", 16)}
        small_id = run_id(small_axes, {}, None, None)
        if small_id not in runs:
            raise ConfigError(f"{source}: analyses.batch_size.small={bs.get('small')}: no run '{small_id}' in the "
                              f"groups (add the batch size to groups.batch_size.grid.batch_size)")
        delta = {"timesteps": {"name": "toward_zero", "params": {"scale": bs.get("toward_zero_scale", 150)}},
                 "train": {"snapshot_every_kimg": None}}
        cfg = _derived_config(runs[small_id].config, delta, bs, f"{source}: analyses.batch_size")
        rid = f"toward_zero_from-{small_id}"
        runs[rid] = Run(rid, {**small_axes, "sampler": "toward_zero"}, cfg, ("batch_size",), small_id)
        if bs.get("control", False):  # the same continuation on uniform t: what the extra images alone do
            ctl = _derived_config(runs[small_id].config, {"timesteps": {"name": "uniform"},
                                                          "train": {"snapshot_every_kimg": None}},
                                  bs, f"{source}: analyses.batch_size")
            cid = f"uniform_from-{small_id}"
            runs[cid] = Run(cid, dict(small_axes), ctl, ("batch_size",), small_id,
                            extra={"continuation_control": True})
    ref_spec = study.get("reference") or {}
    if ref_spec.get("pretrained") and ref_spec.get("format") == "diffusers":
        model = {"name": "diffusers_unet2d", "pretrained": str(ref_spec["pretrained"]),
                 "pretrained_format": "diffusers"}
        for rid, run in runs.items():
            if run.init_from == "reference":
                runs[rid] = Run(rid, run.axes, {**run.config, "model": dict(model)}, run.groups, run.init_from,
                                run.progress, run.extra)
    check_spaces(study, runs, source)
    return runs


def check_analysis_needs(study: Mapping[str, Any], runs: Mapping[str, Run], source: str = "study") -> None:
    """Fail, naming the key to change, when an analysis the study runs lacks the runs it needs
    (without them it would fail only after all the training). A study without a group has none
    of its analyses and reports (workflow/rules/report.smk REPORT_NEEDS; its claims read "not
    run"); a group that is there must hold what its analysis compares: the consistency analysis,
    the samples of at least 2 models of ``groups.consistency`` with a constant optimizer
    schedule. Called where the DAG is built."""
    def in_group(group: str) -> list[Run]:
        return [r for r in runs.values() if group in r.groups]

    constant = [r for r in in_group("consistency")
                if ((r.config.get("optim") or {}).get("schedule") or {}).get("name", "constant") == "constant"]
    if in_group("consistency") and len(constant) < 2:
        raise ConfigError(f"{source}: groups.consistency: the consistency analysis compares the samples of models "
                          f"that differ only in seed or width (runs with a constant optimizer schedule): at least 2 "
                          f"needed, the study has {len(constant)}")


def finetune_runs(study: Mapping[str, Any], ref: Run, source: str = "study") -> dict[str, Run]:
    """The slot fine-tunes and their uniform-t controls (module docstring), keyed by id.

    ``extra``: ``slot`` (1-based; absent for a control), ``seed``, ``control`` (True for the
    uniform-t control) and ``slots_file`` (the slot ranges, read when the job runs)."""
    slots = (study.get("analyses") or {}).get("slots") or {}
    where = f"{source}: analyses.slots"
    ks = list(slots.get("finetune", []))
    if not ks:
        return {}
    if len(set(ks)) != len(ks):
        raise ConfigError(f"{where}.finetune: {ks} repeats a slot")
    n = slots.get("n_slots", 10)
    for k in ks:
        if not 1 <= k <= n:
            raise ConfigError(f"{where}.finetune: slot {k} is outside 1..n_slots={n} (1-based)")
    ref_seed = ref.axes.get("seed", 0)
    seeds = list(slots.get("seeds") or [ref_seed])
    if len(set(seeds)) != len(seeds):
        raise ConfigError(f"{where}.seeds: {seeds} repeats a seed")
    out: dict[str, Run] = {}
    for seed in seeds:
        suffix = "" if seed == ref_seed else f"_s{seed}"
        axes = {**ref.axes, "seed": seed}
        arms = [(f"finetune_slot{k}{suffix}", {"name": "slots", "params": {"active": [k]}}, {"slot": k,
                 "slots_file": "analyses/slots.json"}) for k in ks]
        arms.append((f"finetune_uniform{suffix}", {"name": "uniform"}, {"control": True}))
        for rid, sampler, extra in arms:
            cfg = _derived_config(ref.config, {"timesteps": sampler, "train": {"seed": seed}}, slots, where)
            out[rid] = Run(rid, axes, cfg, (), "reference", extra={**extra, "seed": seed})
    return out


def contribution_sample_count(study: Mapping[str, Any]) -> int:
    """Samples per arm of the timestep-contribution analysis (one held-out image each):
    ``analyses.timestep_contribution.num_samples``, 500 when unset. The one place it is read
    (the rule's ``--num-samples`` and the estimate ask here)."""
    spec = (study.get("analyses") or {}).get("timestep_contribution") or {}
    return int(spec.get("num_samples", 500))


def contribution_ranges(study: Mapping[str, Any]) -> dict[str, tuple[int, int] | None]:
    """The arms of the timestep-contribution analysis keyed by a path-safe label, each with the
    0-based inclusive original timesteps it replaces: ``"none"`` (no replacement, None),
    ``"final"`` (the final step only, the control) and ``t<lo>-<hi>`` per paper range (1-based on
    T = 1000, scaled to this study's T, the final step left out). Every range must hold at least
    ``min_steps`` steps of the analysis' chain (``analyses.timestep_contribution.sample``), else
    :class:`ConfigError` names it (docs/methods.md §3.4)."""
    T = int(((study.get("base") or {}).get("diffusion") or {}).get("num_timesteps", 1000))
    spec = (study.get("analyses") or {}).get("timestep_contribution") or {}
    sample = spec.get("sample") or {}
    used = chain_timesteps(T, sample.get("steps"), sample.get("spacing", "uniform"))
    min_steps = int(spec.get("min_steps", 2))
    where = "analyses.timestep_contribution"
    out: dict[str, tuple[int, int] | None] = {"none": None, "final": (used[0], used[0])}
    for lo, hi in spec.get("ranges", []):
        if not 1 <= lo <= hi <= 1000:
            raise ConfigError(f"{where}.ranges: [{lo}, {hi}] must satisfy 1 <= lo <= hi <= 1000 "
                              f"(the paper's 1-based timesteps; scaled to T={T})")
        a, b = scale_range(lo, hi, T)
        a = max(a, used[0] + 1)
        k = sum(a <= u <= b for u in used)
        if k < min_steps:
            span = f"t {a}..{b} of T = {T} without the final step" if a <= b else \
                f"t {a - 1}..{b} of T = {T}: nothing once the final step is left out"
            raise ConfigError(f"{where}.ranges: [{lo}, {hi}] ({span}) holds {k} "
                              f"step(s) of the {len(used)}-step chain, fewer than min_steps = {min_steps}: set "
                              f"{where}.sample.steps higher (null: all T) or spacing: quadratic, or drop the range")
        out[f"t{lo}-{hi}"] = (a, b)
    return out
