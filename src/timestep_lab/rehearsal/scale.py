"""A study config scaled down to a rehearsal: the same groups, samplers, weightings and analyses,
tiny sizes, CPU, and every input path pointing at the rehearsal's stand-ins.

What changes (:func:`rehearsal_study`), with the sizes in :data:`SIZES`:

* ``study`` -> ``<study>-rehearsal`` (its own results/, reports/, logs/), and a ``rehearsal``
  section (what it rehearses, what stood in for what): the index shows a banner;
* resources -> CPU, one thread, no GPU; training in fp32, not compiled;
* data -> the fake raw data (:mod:`.fake_data`), at :attr:`Sizes.resolution` where the data set's
  resolution is configurable, prepared into the rehearsal's own folder (``data.prepared``);
* evaluation -> the stand-in feature weights, :attr:`Sizes.num_samples` samples, :attr:`Sizes.steps`
  reverse steps, :attr:`Sizes.progress_points` points of FID against images seen;
* the network -> two levels, one residual block, :attr:`Sizes.channels` wide (ADM's 64-channel
  heads become :attr:`Sizes.head_channels`, and its network that wide), attention kept (at the lower
  level) where the study has any;
* run lengths -> the base run is :attr:`Sizes.kimg`; every other ``*_kimg`` value (warm-up, EMA,
  fine-tune and retraining lengths, momentum decay, curricula) keeps its ratio to the base run's
  length, a run at least :attr:`Sizes.min_kimg`; logging and snapshots per run fraction, the
  resumable checkpoint once, at the end; step-counted sampler parameters (``update_every``) at most :attr:`Sizes.update_every`;
* batch sizes -> divided by one factor so the largest is :attr:`Sizes.max_batch` (the small/large
  ratio of the batch-size analysis kept), micro-batches with them;
* the timestep contribution's chain -> at most :attr:`Sizes.contribution_steps` steps, respaced
  quadratically (every range still holds several steps; the method and eta kept);
* seeds -> the first :attr:`Sizes.seeds` of every seed list (two: the paired intervals still exist);
  list entries keep theirs (they are the design of the consistency study);
* widths in overrides (``model.channels``) -> the same ratio to the base width, still different;
* a latent study (:mod:`.latent`): the VAE -> a random tiny ``AutoencoderKL`` folder, the DiT -> one
  block 16 wide (its width arm ``model.params.hidden`` scaled alike); ``pixel.base`` as ``base``.

Pure functions of dicts: no files, no torch.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Any, Mapping

from timestep_lab.rehearsal.latent import tiny_dit, tiny_hidden
from timestep_lab.rehearsal.paths import RehearsalPaths
from timestep_lab.workflow.study import DEFAULT_DERIVED_KIMG

__all__ = ["Sizes", "SIZES", "REHEARSAL_SUFFIX", "rehearsal_study", "batch_factor", "stand_ins"]

REHEARSAL_SUFFIX = "-rehearsal"
RUN_LENGTH = "train.total_kimg"


@dataclass(frozen=True)
class Sizes:
    """How small a rehearsal is."""

    kimg: float = 0.064  # the base run: 4 steps at batch 16
    min_kimg: float = 0.032  # the shortest run (a slot fine-tune): 2 steps at batch 16
    max_batch: int = 16
    seeds: int = 2  # per seed list: two, so every paired comparison still has an interval
    num_samples: int = 4  # final FID, contribution and consistency samples (precision/recall need > 3)
    progress_num_samples: int = 4
    progress_points: int = 2  # FID against images seen: two points per followed run
    steps: int = 4  # reverse-process steps when sampling
    resolution: int = 8  # where the data set's resolution is configurable (CelebA-HQ, ImageNet): 8x8, attention at 4x4
    channels: int = 16  # base network width (a network with attention heads: at least one head)
    # ADM's attention heads of 64 channels shrink to this and its network is this wide, with 16 norm
    # groups (a flag its guided-diffusion loader takes), so a narrower consistency arm still fits
    head_channels: int = 32
    train_images: int = 20  # fake raw data: training images (CIFAR-10: 4 per data batch)
    test_images: int = 8  # and held-out images, where the data set has a test split
    profile_images: int = 4  # loss profile: images, timesteps (about), gradient timesteps and samples
    profile_timesteps: int = 20
    profile_grad: int = 4
    update_every: int = 3  # steps between the adaptive sampler's policy updates: one in a 4-step run
    # timestep contribution: its reverse chain at most this many steps, quadratic spacing (dense near
    # t = 0, as the default study's), so every paper range still holds several steps; the T-step
    # chain of the paper configs was 7 x 1,000 network calls, most of a rehearsal's CPU
    contribution_steps: int = 100


SIZES = Sizes()


def batch_factor(study: Mapping[str, Any], sizes: Sizes = SIZES) -> float:
    """What every batch size is divided by: the largest batch anywhere in ``study`` becomes
    ``sizes.max_batch`` (1 when it is already that small)."""
    batches = [int(_get(study, "base", "train", "batch_size", default=128))]
    for group in (study.get("groups") or {}).values():
        batches += [int(b) for b in (group.get("grid") or {}).get("batch_size", [])]
        batches += [int(e["batch_size"]) for e in group.get("list") or [] if "batch_size" in e]
    bs = (study.get("analyses") or {}).get("batch_size") or {}
    batches += [int(bs[k]) for k in ("small", "large") if k in bs]
    overrides = [(study.get("reference") or {}).get("overrides") or {}]
    for group in (study.get("groups") or {}).values():
        overrides += [group.get("overrides") or {}] + [e.get("overrides") or {} for e in group.get("list") or []]
    batches += [int(o["train.batch_size"]) for o in overrides if "train.batch_size" in o]
    return max(1.0, max(batches) / sizes.max_batch)


def rehearsal_study(study: Mapping[str, Any], *, source: str, paths: RehearsalPaths, fast_features: bool = False,
                    sizes: Sizes = SIZES) -> dict[str, Any]:
    """The rehearsal's study config (module docstring) of the validated ``study`` (schema
    defaults filled in) read from ``source``. ``fast_features``: score with the random 32-d
    ``rehearsal-cnn`` instead of random Inception weights (a 2048-d Inception FID on a CPU costs
    far more, and a rehearsal computes dozens: benchmarks/RESULTS.md, "Figures the code relies on")."""
    s = copy.deepcopy(dict(study))
    kimg_ratio = sizes.kimg / float(_get(study, "base", "train", "total_kimg", default=100.0))
    factor = batch_factor(study, sizes)
    scale = _Scaler(kimg_ratio, factor, sizes, _width(study), _heads(study), _get(study, "base", "model", default={}))

    s["study"] = f"{study['study']}{REHEARSAL_SUFFIX}"
    s["resources"] = {**(study.get("resources") or {}), "device": "cpu", "threads": 1, "gpus": 0,
                      "mem_mb": 2000, "runtime_min": 30, "gpu_model": None}
    s["data"] = _data(study["data"], paths, sizes)
    s["evaluation"] = _evaluation(study["evaluation"], paths, fast_features, sizes)
    s["base"] = _base(study.get("base") or {}, s["data"], scale, sizes)
    if _get(study, "latent", "vae"):  # the pixel runs' section: scaled as base, its own UNet
        s["latent"] = {**study["latent"], "vae": str(paths.vae)}
        pixel = _get(study, "pixel", "base", default={})
        s["pixel"] = {"base": {k: v for k, v in _base(pixel, s["data"], scale, sizes).items() if k in pixel}} if pixel else {}
    s["samplers"] = {k: scale.component(v) for k, v in (study.get("samplers") or {}).items()}
    s["weightings"] = {k: scale.component(v) for k, v in (study.get("weightings") or {}).items()}
    s["groups"] = {k: _group(g, scale, sizes) for k, g in (study.get("groups") or {}).items()}
    s["reference"] = _reference(study.get("reference") or {}, paths, scale)
    s["analyses"] = _analyses(study.get("analyses") or {}, scale, sizes, s["base"])
    s["rehearsal"] = {"of": source, "stand_ins": stand_ins(study, fast_features)}
    return s


def stand_ins(study: Mapping[str, Any], fast_features: bool) -> list[str]:
    """What the rehearsal of ``study`` stands in for, one line each (the index banner, ``rehearse``)."""
    data, ev, ref = study["data"], study["evaluation"], study.get("reference") or {}
    out = [f"{data['dataset']} data: a few random images in its on-disk format" if data.get("source")
           else f"{data['dataset']} data: the bundled data set"]
    if ev["extractor"] == "inception-v3":
        out.append("Inception-v3: a random 32-d CNN (rehearsal-cnn)" if fast_features
                   else "Inception-v3: random weights in both libraries' file formats")
    if ref.get("pretrained"):
        out.append(f"reference: a random {ref.get('format', 'timestep_lab')} checkpoint of the rehearsal's size")
    if _get(study, "latent", "vae"):
        out.append(f"VAE {PurePosixPath(str(study['latent']['vae'])).name}: a random AutoencoderKL of its family "
                   f"(2 levels, 8 and 16 wide) in diffusers' format; DiT: one block, 16 wide")
    out.append("GPUs: the CPU, one thread per job; every network and run scaled down")
    return out


# ------------------------------------------------------------------------------ sections


def _get(d: Mapping[str, Any], *keys: str, default: Any = None) -> Any:
    for k in keys:
        if not isinstance(d, Mapping) or k not in d:
            return default
        d = d[k]
    return d


def _unet(study: Mapping[str, Any]) -> Mapping[str, Any]:
    """The study's UNet: a latent study's pixel runs' (``pixel.base.model``), else base's."""
    return _get(study, "pixel", "base", "model", default=None) or _get(study, "base", "model", default={})


def _width(study: Mapping[str, Any]) -> int:
    return int(_unet(study).get("channels", 16))


def _heads(study: Mapping[str, Any]) -> int:
    return int(_unet(study).get("num_head_channels", -1) or -1)


class _Scaler:
    """The value rules shared by every section: run lengths, batch sizes, widths, components."""

    def __init__(self, kimg_ratio: float, batch: float, sizes: Sizes, width: int, heads: int, model: Mapping[str, Any]):
        self.kimg_ratio, self.batch_f, self.sizes, self.model = kimg_ratio, batch, sizes, model
        self.width0, self.heads = width, (min(heads, sizes.head_channels) if heads > 0 else heads)
        self.width = max(sizes.channels, self.heads) if heads > 0 else sizes.channels
        self.groups = min(16 if heads > 0 else 8, self.width)  # divides every width of the rehearsal network

    def kimg(self, value: float) -> float:
        return round(float(value) * self.kimg_ratio, 6)

    def length(self, value: float) -> float:
        """A run length: its ratio to the base run kept, at least ``min_kimg``."""
        return max(self.sizes.min_kimg, self.kimg(value))

    def batch(self, value: int) -> int:
        return max(1, round(int(value) / self.batch_f))

    def channels(self, value: int) -> int:
        """A width override: the same ratio to the base width, rounded to a multiple of the norm
        groups (and head size), and still different from the base width."""
        # attention sits at the second level (width 2c): c a multiple of half a head is enough
        q = math.lcm(self.groups, max(1, self.heads // 2)) if self.heads > 0 else self.groups
        scaled = max(q, round(int(value) / self.width0 * self.width / q) * q)
        if scaled == self.width and int(value) != self.width0:
            scaled = self.width + (q if int(value) > self.width0 or self.width - q < q else -q)
        return scaled

    def nested(self, value: Any) -> Any:
        """Every ``*_kimg`` key of a (nested) mapping scaled; step counts capped."""
        if isinstance(value, Mapping):
            return {k: self.value(k, v) for k, v in value.items()}
        return copy.deepcopy(value)

    def value(self, key: str, value: Any) -> Any:
        leaf = key.rsplit(".", 1)[-1]
        if isinstance(value, Mapping):
            return self.nested(value)
        if key == RUN_LENGTH:
            return self.length(value)
        if leaf.endswith("_kimg") and isinstance(value, (int, float)) and not isinstance(value, bool):
            return self.kimg(value)
        if leaf == "update_every" and isinstance(value, int):
            return min(value, self.sizes.update_every)
        if leaf == "batch_size" and key.startswith("train."):
            return self.batch(value)
        if key == "model.channels":
            return self.channels(value)
        if key == "model.params.hidden":  # a DiT's width arm
            return tiny_hidden(value, self.model)
        return copy.deepcopy(value)

    def overrides(self, overrides: Mapping[str, Any] | None) -> dict[str, Any]:
        return {k: self.value(k, v) for k, v in (overrides or {}).items()}

    def component(self, comp: Mapping[str, Any]) -> dict[str, Any]:
        out = dict(comp)
        if "params" in out:
            out["params"] = self.nested(out["params"] or {})
        return out


def _data(data: Mapping[str, Any], paths: RehearsalPaths, sizes: Sizes) -> dict[str, Any]:
    out = dict(data)
    if data.get("source"):
        out["source"] = str(paths.raw / PurePosixPath(str(data["source"])).name)
    if data.get("resolution") and data["dataset"] in ("celebahq", "imagenet"):  # the others have one size
        out["resolution"] = min(int(data["resolution"]), sizes.resolution)
    out["prepared"] = str(paths.prepared)
    return out


def _evaluation(ev: Mapping[str, Any], paths: RehearsalPaths, fast: bool, sizes: Sizes) -> dict[str, Any]:
    out = dict(ev)
    if ev["extractor"] == "inception-v3":
        out["extractor"], out["weights"] = ("rehearsal-cnn", str(paths.features)) if fast else \
            ("inception-v3", str(paths.inception))
    out["num_samples"] = min(int(ev.get("num_samples") or sizes.num_samples), sizes.num_samples)
    out["progress_num_samples"] = min(int(ev.get("progress_num_samples") or sizes.num_samples),
                                      sizes.progress_num_samples)
    if ev.get("progress_every_kimg"):
        out["progress_every_kimg"] = round(sizes.kimg / sizes.progress_points, 6)
    if ev.get("reference_max_images"):
        out["reference_max_images"] = max(2, min(int(ev["reference_max_images"]), sizes.train_images // 2))
    out["sample"] = _sample(ev.get("sample") or {}, sizes)
    return out


def _sample(sample: Mapping[str, Any], sizes: Sizes, num_samples: int | None = None) -> dict[str, Any]:
    out = dict(sample)
    if out.get("steps") is None or int(out["steps"]) > sizes.steps:
        out["steps"] = sizes.steps
    if "batch_size" in out:
        out["batch_size"] = min(int(out["batch_size"]), 64)
    if num_samples is not None:
        out["num_samples"] = num_samples
    return out


_NATIVE_RESOLUTION = {"digits": 8, "cifar10": 32}  # data sets whose images have one size


def _model(model: Mapping[str, Any], res: int, scale: _Scaler) -> dict[str, Any]:
    out = dict(model)
    if out.get("name") == "dit":
        return tiny_dit(out)
    if out.get("name", "unet") != "unet":  # another network (e.g. a diffusers folder): as configured
        return out
    out.update(channels=scale.width, channel_mult=[1, 2], num_res_blocks=1, norm_groups=scale.groups)
    if int(out.get("num_head_channels") or -1) > 0:
        out["num_head_channels"] = scale.heads
    if out.get("attention_resolutions"):  # keep attention, at the lower of the two levels
        out["attention_resolutions"] = [max(1, int(res) // 2)]
    return out


def _base(base: Mapping[str, Any], data: Mapping[str, Any], scale: _Scaler,
          sizes: Sizes) -> dict[str, Any]:
    out = copy.deepcopy(dict(base))
    res = data.get("resolution") or _NATIVE_RESOLUTION.get(data["dataset"], 32)
    out["model"] = _model(base.get("model") or {}, res, scale)
    optim = dict(base.get("optim") or {})
    out["optim"] = scale.nested(optim)
    train = dict(base.get("train") or {})
    kimg = sizes.kimg
    train.update(
        total_kimg=kimg, device="cpu", precision="fp32", compile=False,
        batch_size=scale.batch(train.get("batch_size", 128)),
        ema_halflife_kimg=scale.kimg(train.get("ema_halflife_kimg", 0.5)),
        # the resumable state once, after the last step (each save of an 8x8 ADM with Adam's
        # moments is ~0.2 CPU-s: a second one per run was ~10% of a rehearsal's training)
        log_every_kimg=round(kimg / 4, 6), checkpoint_every_kimg=kimg,
    )
    if train.get("batch_gpu"):
        micro = scale.batch(train["batch_gpu"])
        train["batch_gpu"] = micro if train["batch_size"] % micro == 0 else None
    if train.get("snapshot_every_kimg"):
        train["snapshot_every_kimg"] = round(kimg / sizes.progress_points, 6)
    out["train"] = train
    if base.get("sample") is not None:
        out["sample"] = _sample(base["sample"], sizes, sizes.num_samples)
    return out


def _group(group: Mapping[str, Any], scale: _Scaler, sizes: Sizes) -> dict[str, Any]:
    out = copy.deepcopy(dict(group))
    if group.get("seeds"):
        out["seeds"] = list(group["seeds"])[: sizes.seeds]
    grid = dict(group.get("grid") or {})
    if "seed" in grid:
        grid["seed"] = list(grid["seed"])[: sizes.seeds]
    if "batch_size" in grid:
        grid["batch_size"] = [scale.batch(b) for b in grid["batch_size"]]
    if grid:
        out["grid"] = grid
    if group.get("list"):
        out["list"] = [_entry(e, scale) for e in group["list"]]
    if group.get("overrides"):
        out["overrides"] = scale.overrides(group["overrides"])
    return out


def _entry(entry: Mapping[str, Any], scale: _Scaler) -> dict[str, Any]:
    out = dict(entry)
    if "batch_size" in out:
        out["batch_size"] = scale.batch(out["batch_size"])
    if out.get("overrides"):
        out["overrides"] = scale.overrides(out["overrides"])
    return out


def _reference(ref: Mapping[str, Any], paths: RehearsalPaths, scale: _Scaler) -> dict[str, Any]:
    out = dict(ref)
    if ref.get("pretrained"):
        out["pretrained"] = str(paths.pretrained / PurePosixPath(str(ref["pretrained"])).name)
    out["overrides"] = scale.overrides(ref.get("overrides"))
    return out


def _derived_overrides(overrides: Mapping[str, Any] | None, scale: _Scaler) -> dict[str, Any]:
    """A derived run's overrides, with its length written out (the workflow's default is
    DEFAULT_DERIVED_KIMG, which would be longer than the whole rehearsal)."""
    return scale.overrides({RUN_LENGTH: DEFAULT_DERIVED_KIMG, **(overrides or {})})


def _analyses(an: Mapping[str, Any], scale: _Scaler, sizes: Sizes, base: Mapping[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(dict(an))
    T = int(_get(base, "diffusion", "num_timesteps", default=1000))
    if "loss_profile" in an:
        p = dict(an["loss_profile"])
        p["num_images"] = min(int(p.get("num_images", 256)), sizes.profile_images)
        p["stride"] = max(int(p.get("stride", 1)), T // sizes.profile_timesteps)
        for key in ("grad_timesteps", "grad_samples"):
            if key in p:
                p[key] = max(2, min(int(p[key]), sizes.profile_grad))
        out["loss_profile"] = p
    if "slots" in an:
        sl = dict(an["slots"])
        if sl.get("seeds"):
            sl["seeds"] = list(sl["seeds"])[: sizes.seeds]
        sl["overrides"] = _derived_overrides(sl.get("overrides"), scale)
        out["slots"] = sl
    if "batch_size" in an:
        bs = dict(an["batch_size"])
        for key in ("small", "large"):
            if key in bs:
                bs[key] = scale.batch(bs[key])
        bs["overrides"] = _derived_overrides(bs.get("overrides"), scale)
        out["batch_size"] = bs
    if "timestep_contribution" in an:  # consistency compares the runs' samples: evaluation.num_samples
        tc = an["timestep_contribution"]
        out["timestep_contribution"] = {**tc, "num_samples": min(int(tc.get("num_samples", 500)), sizes.num_samples),
                                        "sample": _contribution_chain(tc.get("sample") or {}, T, sizes)}
        if (tc.get("superres") or {}).get("overrides"):  # run superres: base's (scaled) length unless it sets its own
            sr = out["timestep_contribution"]["superres"] = dict(tc["superres"])
            sr["overrides"] = scale.overrides(sr["overrides"])
    return out


def _contribution_chain(sample: Mapping[str, Any], T: int, sizes: Sizes) -> dict[str, Any]:
    """The contribution analysis's chain, at most :attr:`Sizes.contribution_steps` steps: the same
    method and eta, respaced quadratically when it had more (``steps: null`` is all T)."""
    out = dict(sample)
    steps = int(out.get("steps") or T)
    if steps > sizes.contribution_steps:
        out.update(steps=sizes.contribution_steps, spacing="quadratic")
    return out
