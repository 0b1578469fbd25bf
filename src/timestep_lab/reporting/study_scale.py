"""What one study's results folder says about its scale and its cost: one column of the
scorecard across scales (:mod:`timestep_lab.reporting.across`, docs/methods.md §9.9).

Read from ``results/<study>/`` (the project root is the folder holding ``results/``, as for
:func:`timestep_lab.cost.measured.logs_dir_of`):

* ``verdicts.json`` (required; format :data:`VERDICTS_FORMAT`): the claims and both verdicts;
* ``summary.json``: the FID protocol: its label ("FID (digits-CNN features)", "FID (mnist-cnn
  features)"), tool, generated sample count, reverse sampler and steps;
* ``runs.csv`` and ``runs/<run>/run.yaml``: the model and batch size of the first FID claim's
  baseline arm (the sampler comparison's uniform arm), else of the ``reference`` run;
* that run's prepared data ``<root>/<data.path>/manifest.json``: data set, training images,
  shape (and the padding, e.g. MNIST's 28x28 -> 32x32); without it the resolution of
  ``estimate.json``'s model key (``unet-0.16M@8x8x1``);
* the benchmark files, job logs and ``estimate.json``: the measured cost beside the estimate
  (:func:`timestep_lab.cost.measured.study_total`).

The model's parameters are counted from its run config on torch's meta device (no memory, no
weights), so reading a study needs no checkpoint. Missing pieces leave their fields None with
a note; only a missing or unreadable ``verdicts.json`` is an error (:class:`ArtifactError`).
"""

from __future__ import annotations

import csv
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping

from timestep_lab.artifacts.io import ArtifactError, read_json
from timestep_lab.config import ConfigError, RunConfig, config_from_dict, load_yaml
from timestep_lab.cost.measured import logs_dir_of, study_total

__all__ = ["VERDICTS_FORMAT", "StudyScale", "read_study", "order_by_scale", "count_parameters"]

#: The ``verdicts.json`` format this reads (= ``timestep_lab.workflow.collect.VERDICTS_FORMAT``;
#: not imported from there, which needs pandas).
VERDICTS_FORMAT = "timestep_lab.verdicts/2"

_MODEL_KEY = re.compile(r"@(\d+)x(\d+)x(\d+)$")


@dataclass
class StudyScale:
    """One study as a scale: what it trained on, with what, how long, under which FID, at what cost."""

    name: str
    path: str
    verdicts: dict[str, Any]
    dataset: str | None = None
    images: int | None = None  # training images
    shape: tuple[int, int, int] | None = None  # H, W, C of the training images
    padding: str = ""
    model: str = ""
    params: int | None = None
    batch_size: int | None = None
    kimg: list[float] = field(default_factory=list)  # images seen by the FID claims' baselines, distinct
    fid_label: str = "FID"
    fid_tool: str = ""
    protocol: str = ""
    cost: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    @property
    def pixels(self) -> int | None:
        return self.shape[0] * self.shape[1] * self.shape[2] if self.shape else None

    def scale_key(self) -> tuple[float, float, float]:
        """Smaller first: pixels per image, then model parameters, then images seen (unknown: last)."""
        inf = float("inf")
        return (float(self.pixels or inf), float(self.params or inf), max(self.kimg, default=inf))

    def resolution(self) -> str:
        """``"32x32x1 (28x28 zero-padded by 2 pixels on every side to 32x32)"``, or "unknown"."""
        if not self.shape:
            return "unknown"
        return "x".join(map(str, self.shape)) + (f" ({self.padding})" if self.padding else "")


def count_parameters(run_config: RunConfig | Mapping[str, Any], resolution: int, channels: int,
                     source: str = "run config") -> int:
    """Parameters of the run's network for ``channels``-channel ``resolution``-pixel images,
    built on torch's meta device (no memory, no weights; a run config dict is checked first)."""
    import torch  # only here: reading a study's files needs no torch otherwise

    from timestep_lab.components import build_model

    cfg = run_config if isinstance(run_config, RunConfig) else config_from_dict(run_config, source, RunConfig)
    with torch.device("meta"):
        net = build_model(cfg, resolution, channels)
    return int(sum(p.numel() for p in net.parameters()))


def _read_verdicts(results: Path) -> dict[str, Any]:
    if not results.is_dir():
        raise ArtifactError(f"{results}: no such results folder")
    path = results / "verdicts.json"
    if not path.is_file():
        raise ArtifactError(f"{results}: no verdicts.json (not a study's results folder, or its study has not reached "
                            f"the verdicts rule: snakemake {path} --configfile <its config>)")
    data = read_json(path)
    fmt = data.get("format") if isinstance(data, dict) else None
    if fmt != VERDICTS_FORMAT:
        raise ArtifactError(f"{path}: format {fmt!r}, expected {VERDICTS_FORMAT!r} (written by older code: rerun its "
                            "study's verdicts rule)")
    if not isinstance(data.get("claims"), list):
        raise ArtifactError(f"{path}: no 'claims' list")
    for i, claim in enumerate(data["claims"]):
        _check_claim(path, i, claim)
    return data


_NUMBER, _TEXT, _OBJECT = (int, float), (str,), (dict,)
#: the items of a claim the scorecard reads, and their JSON types (each may also be null)
_CLAIM_ITEMS = {"verdict": _TEXT, "kind": _TEXT, "baseline": _TEXT, "n": _NUMBER, "diff": _NUMBER, "p_adj": _NUMBER,
                "expected_sign": _NUMBER, "family_size": _NUMBER, "regime": _OBJECT, "log": _OBJECT}


def _check_claim(path: Path, i: int, claim: Any) -> None:
    """A claim of ``verdicts.json`` is an object with a text ``id``, and the items the scorecard
    reads have their types (:data:`_CLAIM_ITEMS`; ``regime.train_kimg`` a number): else an
    :class:`ArtifactError` naming the file, the claim and the item (never a traceback)."""
    if not isinstance(claim, dict) or not isinstance(claim.get("id"), str):
        raise ArtifactError(f"{path}: claims[{i}] is not a claim (an object with a text 'id')")
    items = dict(_CLAIM_ITEMS)
    regime = claim.get("regime")
    for key, kinds in items.items():
        value = claim.get(key)
        if value is not None and (isinstance(value, bool) and kinds is _NUMBER or not isinstance(value, kinds)):
            raise ArtifactError(f"{path}: claim {claim['id']!r}: '{key}' must be "
                                f"{'a number' if kinds is _NUMBER else 'text' if kinds is _TEXT else 'an object'} "
                                f"or null, got {value!r}"[:300])
    kimg = regime.get("train_kimg") if isinstance(regime, dict) else None
    if kimg is not None and (isinstance(kimg, bool) or not isinstance(kimg, _NUMBER)):
        raise ArtifactError(f"{path}: claim {claim['id']!r}: 'regime.train_kimg' must be a number or null, got "
                            f"{kimg!r}"[:300])


def _base_run(results: Path, verdicts: Mapping[str, Any]) -> Path | None:
    """``run.yaml`` of the first FID claim's baseline arm with one, else of the reference run."""
    arms = [c["baseline"] for c in verdicts["claims"] if c.get("kind") == "fid" and c.get("baseline")]
    runs_csv = results / "runs.csv"
    if arms and runs_csv.is_file():
        with open(runs_csv, newline="") as fh:
            rows = list(csv.DictReader(fh))
        for arm in dict.fromkeys(arms):
            for r in rows:
                if r.get("arm") == arm and (results / "runs" / r.get("run", "") / "run.yaml").is_file():
                    return results / "runs" / r["run"] / "run.yaml"
    ref = results / "runs" / "reference" / "run.yaml"
    return ref if ref.is_file() else None


def _estimate_shape(estimate: Mapping[str, Any] | None) -> tuple[int, int, int] | None:
    for job in ((estimate or {}).get("budget") or {}).get("train") or []:
        m = _MODEL_KEY.search(str(job.get("model", "")))
        if m:
            return int(m[1]), int(m[2]), int(m[3])
    return None


def _protocol(summary: Mapping[str, Any]) -> str:
    p = summary.get("protocol") or {}
    if not p:
        return ""
    return (f"{p.get('tool', '?')} {p.get('tool_version', '')}".strip() + f", {p.get('num_generated', '?')} generated vs "
            f"{p.get('num_reference', '?')} reference images, {p.get('method', '?')} {p.get('steps', '?')} steps"
            + (", EMA" if p.get("ema") else ""))


def read_study(results_dir: str | Path) -> StudyScale:
    """The study of ``results_dir`` as a scale (module docstring).

    :raises ArtifactError: naming the folder or file when ``verdicts.json`` is missing, not JSON
        or not format 2."""
    results = Path(results_dir)
    verdicts = _read_verdicts(results)
    study = StudyScale(name=str(verdicts.get("study") or results.name), path=str(results), verdicts=verdicts)
    summary = read_json(results / "summary.json") if (results / "summary.json").is_file() else {}
    study.fid_label = str(summary.get("fid_label") or "FID")
    study.fid_tool = str(summary.get("fid_tool") or "")
    study.protocol = _protocol(summary)
    study.kimg = sorted({float(c["regime"]["train_kimg"]) for c in verdicts["claims"]
                         if (c.get("regime") or {}).get("train_kimg") is not None})
    estimate = read_json(results / "estimate.json") if (results / "estimate.json").is_file() else None
    _read_model(study, results, estimate)
    study.cost = study_total(results, logs_dir_of(results), estimate=estimate)
    return study


def _read_model(study: StudyScale, results: Path, estimate: Mapping[str, Any] | None) -> None:
    """Data set, shape, model and parameters from the base run's ``run.yaml`` and its data's manifest."""
    run_yaml = _base_run(results, study.verdicts)
    cfg: RunConfig | None = None
    if run_yaml is None:
        study.notes.append("no run.yaml found: model and data set unknown")
    else:
        try:
            cfg = config_from_dict(load_yaml(run_yaml) or {}, str(run_yaml), RunConfig)
        except ConfigError as exc:
            study.notes.append(str(exc))
    manifest = None
    if cfg is not None:
        m = cfg.model
        study.dataset, study.batch_size = cfg.data.name, cfg.train.batch_size
        study.model = f"{m.name}: channels {m.channels}, mult {list(m.channel_mult)}, {m.num_res_blocks} res " \
                      f"block(s) per level" + (f", attention at {list(m.attention_resolutions)}"
                                               if m.attention_resolutions else "")
        # data.path is relative to the project root, the folder holding results/
        manifest = results.resolve().parent.parent / str(cfg.data.path) / "manifest.json" if cfg.data.path else None
    if manifest is not None and manifest.is_file():
        info = read_json(manifest)
        study.images = info.get("count")
        study.shape = tuple(int(x) for x in info["shape"]) if info.get("shape") else None  # type: ignore[assignment]
        study.padding = str(info.get("padding") or "")
        study.dataset = info.get("dataset") or study.dataset
    else:
        study.shape = _estimate_shape(estimate)
        study.notes.append(f"{manifest or 'the prepared data'}: not found; resolution "
                           + ("from estimate.json" if study.shape else "unknown"))
    if cfg is not None and study.shape:
        try:
            study.params = count_parameters(cfg, study.shape[0], study.shape[2])
        except (ConfigError, ValueError, KeyError, OSError) as exc:
            study.notes.append(f"parameters not counted: {exc}")


def order_by_scale(studies: Iterable[StudyScale]) -> list[StudyScale]:
    """Smallest scale first (:meth:`StudyScale.scale_key`); ties keep the given order."""
    return sorted(studies, key=StudyScale.scale_key)
