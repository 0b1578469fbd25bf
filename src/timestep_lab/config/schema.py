"""The run configuration schema: a tree of frozen dataclasses with their defaults and range checks.

A *run config* describes one training run end to end: the data, the network, the diffusion
process, the timestep sampler, the loss weighting, the optimizer, the training length and the
reverse sampler used to draw samples from it. Each section checks its own values in
``__post_init__`` (raising ``ValueError`` whose message starts with the field name; the loader in
:mod:`timestep_lab.config.convert` prefixes the section and the source).

Knows nothing of YAML, files or registries: registry names (sampler, weighting, ...) are checked
by :func:`timestep_lab.components.check_config`. No torch (imported at Snakemake DAG build).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

__all__ = [
    "ConfigError",
    "ComponentConfig",
    "DataConfig",
    "ModelConfig",
    "DiffusionConfig",
    "OptimConfig",
    "TrainConfig",
    "SampleConfig",
    "EvalConfig",
    "RunConfig",
    "BudgetConfig",
    "BUDGET_UNITS",
    "SEQUENTIAL_CALIBRATIONS",
    "TRAINED_FEATURE_EXTRACTORS",
    "FEATURE_EXTRACTORS",
    "SEED_MAX",
    "NUMPY_SEED_MAX",
    "MIN_FID_SAMPLES",
]

#: Names of the feature extractors the pipeline trains itself (``train-features``; their networks
#: are the entries of :data:`timestep_lab.metrics.features.FEATURE_NETS`, which must list the same names),
#: and of every extractor ``evaluation.extractor`` may name. Kept here, torch-free, because the
#: Snakefile and the config checks need the names at DAG build.
TRAINED_FEATURE_EXTRACTORS = ("digits-cnn", "mnist-cnn")
FEATURE_EXTRACTORS = (*TRAINED_FEATURE_EXTRACTORS, "inception-v3", "rehearsal-cnn")  # rehearsal-cnn: `rehearse`'s random stand-in


#: the largest seed: every seed is a torch.Generator seed of 64 bits, and sums like ``seed + i``
#: and torch's int64 tensors of seeds must not overflow (2**63 - 1)
SEED_MAX = 2**63 - 1
#: the largest seed of numpy's legacy generator (KID's subsets in clean-fid): 2**32 - 1
NUMPY_SEED_MAX = 2**32 - 1
#: the fewest samples (and reference images) the protocol scores: every metric it records is
#: then defined, precision/recall's k = 3 nearest-neighbour balls included (k + 1 points;
#: ``timestep_lab.metrics.fid.PRC_NEIGHBORHOOD``). An FID of 2 samples, recorded with status ok,
#: measured nothing; a rehearsal's 4 samples are the smallest a study uses
MIN_FID_SAMPLES = 4


class ConfigError(ValueError):
    """A configuration value is missing, unknown, of the wrong type or impossible.

    The message always starts with the source (file name or ``--set``) and the dotted key.
    """


def _require(ok: bool, message: str) -> None:
    """Raise ``ValueError(message)``; the loader prefixes the section, so messages start
    with the field name (``"batch_size must be > 0, got 0"``)."""
    if not ok:
        raise ValueError(message)


@dataclass(frozen=True)
class ComponentConfig:
    """A named research choice (timestep sampler, weighting, optimizer schedule) and its
    parameters. ``name`` selects a registry entry; ``params`` are checked against that
    entry's parameter dataclass by :func:`timestep_lab.components.check_config`."""

    name: str
    params: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class DataConfig:
    """Where the prepared data set lives (a folder written by ``timestep_lab prepare``)."""

    name: str = "digits"
    path: str = "data/prepared/digits"
    hflip: bool = False  # random horizontal flip (per sample, p = 0.5)

    def __post_init__(self) -> None:
        _require(bool(self.path), "path must be a non-empty path")


@dataclass(frozen=True)
class ModelConfig:
    """The network: ``name`` picks the architecture (:data:`timestep_lab.models.MODELS`); the
    fields below ``name`` are the ADM-style UNet's hyper-parameters (see
    :mod:`timestep_lab.models.unet`), ``params`` the parameters of other entries (``dit``: size,
    classes, label dropout; :class:`timestep_lab.models.DiTParams`).

    ``attention_resolutions`` are feature-map resolutions in pixels (e.g. ``[16]`` for
    CIFAR-10 attention at 16x16). ``pretrained`` optionally names a checkpoint on disk
    (``format`` one of ``timestep_lab``, ``diffusers``, ``guided_diffusion``).
    """

    name: str = "unet"
    channels: int = 16
    channel_mult: tuple[int, ...] = (1, 2)
    num_res_blocks: int = 1
    attention_resolutions: tuple[int, ...] = ()
    dropout: float = 0.0
    num_heads: int = 1
    num_head_channels: int = -1
    resblock_updown: bool = False
    use_scale_shift_norm: bool = False
    norm_groups: int = 8  # 8 suits the tiny digits model; ADM/DDPM use 32
    learn_sigma: bool = False  # only for loading guided-diffusion checkpoints (6 output channels)
    pretrained: str | None = None
    pretrained_format: str = "timestep_lab"
    params: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        _require(self.channels > 0, f"channels must be > 0, got {self.channels}")
        _require(len(self.channel_mult) > 0 and all(m > 0 for m in self.channel_mult),
                 f"channel_mult must be a non-empty list of positive ints, got {list(self.channel_mult)}")
        _require(self.num_res_blocks > 0, f"num_res_blocks must be > 0, got {self.num_res_blocks}")
        _require(0.0 <= self.dropout < 1.0, f"dropout must be in [0, 1), got {self.dropout}")
        _require(self.norm_groups > 0, f"norm_groups must be > 0, got {self.norm_groups}")
        _require(self.pretrained_format in ("timestep_lab", "diffusers", "guided_diffusion"),
                 f"pretrained_format must be timestep_lab, diffusers or guided_diffusion, got {self.pretrained_format!r}")


@dataclass(frozen=True)
class DiffusionConfig:
    """The forward process and what the network predicts.

    ``kind``: gaussian | flow (the process registry, :mod:`timestep_lab.processes.registry`; the flow is
    SD3's rectified flow on the same grid of ``num_timesteps`` and ignores ``schedule``,
    ``schedule_params`` and ``variance``). ``schedule``: linear | cosine | quad | scaled_linear.
    ``prediction``: eps | x0 | v | mixed (``v`` under the flow is its velocity ``eps - x0``).
    ``variance``: the fixed reverse variance, ``fixed_large`` (beta_t) or ``fixed_small``
    (posterior variance).
    """

    kind: str = "gaussian"
    schedule: str = "linear"
    schedule_params: Mapping[str, Any] = field(default_factory=dict)
    num_timesteps: int = 1000
    prediction: str = "eps"
    variance: str = "fixed_large"
    # mixed prediction at inference: "profile" (per-t winning head measured after training,
    # stored in the checkpoint) or a fixed head: "eps" | "x0" | "v"
    mixed_inference: str = "profile"

    def __post_init__(self) -> None:
        _require(self.num_timesteps >= 2, f"num_timesteps must be >= 2, got {self.num_timesteps}")
        _require(self.variance in ("fixed_large", "fixed_small"),
                 f"variance must be fixed_large or fixed_small, got {self.variance!r}")
        _require(self.mixed_inference in ("profile", "eps", "x0", "v"),
                 f"mixed_inference must be profile, eps, x0 or v, got {self.mixed_inference!r}")


@dataclass(frozen=True)
class OptimConfig:
    """Optimizer and its schedule. Warm-up is counted in images seen (kimg)."""

    name: str = "adam"  # adam | adamw
    lr: float = 2e-4
    betas: tuple[float, float] = (0.9, 0.999)
    eps: float = 1e-8
    weight_decay: float = 0.0
    warmup_kimg: float = 0.0
    grad_clip: float | None = 1.0
    fused: bool | None = None  # None: fused kernels on CUDA and CPU (exact sqrt: optim.make_optimizer), False: foreach
    schedule: ComponentConfig = field(default_factory=lambda: ComponentConfig("constant"))

    def __post_init__(self) -> None:
        _require(self.name in ("adam", "adamw"), f"name must be adam or adamw, got {self.name!r}")
        _require(self.lr > 0, f"lr must be > 0, got {self.lr}")
        _require(all(0.0 <= b < 1.0 for b in self.betas), f"betas must be in [0, 1), got {list(self.betas)}")
        _require(self.eps > 0, f"eps must be > 0, got {self.eps}")
        _require(self.weight_decay >= 0, f"weight_decay must be >= 0, got {self.weight_decay}")
        _require(self.warmup_kimg >= 0, f"warmup_kimg must be >= 0, got {self.warmup_kimg}")
        _require(self.grad_clip is None or self.grad_clip > 0, f"grad_clip must be > 0 or null, got {self.grad_clip}")


@dataclass(frozen=True)
class TrainConfig:
    """Training length, checkpointing and precision, all counted in images seen.

    ``batch_size`` is the global batch; ``batch_gpu`` the per-device micro-batch (gradient
    accumulation makes up the rest: batch_size = batch_gpu * rounds * world_size).
    """

    batch_size: int = 128
    batch_gpu: int | None = None
    total_kimg: float = 100.0
    ema_halflife_kimg: float = 0.5
    ema_rampup_ratio: float | None = None
    log_every_kimg: float = 5.0
    checkpoint_every_kimg: float = 25.0
    snapshot_every_kimg: float | None = None
    seed: int = 0
    precision: str = "auto"  # auto (bf16 on CUDA, fp32 on CPU) | fp32 | bf16
    compile: bool = False
    channels_last: bool | None = None  # None: on CUDA only
    device: str = "auto"  # auto | cpu | cuda | cuda:N
    on_nonfinite: str = "fail"  # fail: raise; record: write the run as diverged and exit 0
    init_from: str | None = None  # start from this model.pt's weights (fine-tuning); fresh optimizer
    init_from_ema: bool = True  # take the EMA weights of init_from (else the raw ones)

    def __post_init__(self) -> None:
        _require(self.batch_size > 0, f"batch_size must be > 0, got {self.batch_size}")
        _require(self.batch_gpu is None or 0 < self.batch_gpu <= self.batch_size,
                 f"batch_gpu must be in [1, batch_size={self.batch_size}] or null, got {self.batch_gpu}")
        _require(self.total_kimg >= 0.001, f"total_kimg must be >= 0.001 (one image), got {self.total_kimg}")
        _require(self.ema_halflife_kimg >= 0, f"ema_halflife_kimg must be >= 0, got {self.ema_halflife_kimg}")
        _require(self.ema_rampup_ratio is None or self.ema_rampup_ratio > 0,
                 f"ema_rampup_ratio must be > 0 or null, got {self.ema_rampup_ratio}")
        _require(self.log_every_kimg > 0, f"log_every_kimg must be > 0, got {self.log_every_kimg}")
        _require(self.checkpoint_every_kimg > 0, f"checkpoint_every_kimg must be > 0, got {self.checkpoint_every_kimg}")
        _require(self.snapshot_every_kimg is None or self.snapshot_every_kimg > 0,
                 f"snapshot_every_kimg must be > 0 or null, got {self.snapshot_every_kimg}")
        _require(self.precision in ("auto", "fp32", "bf16"), f"precision must be auto, fp32 or bf16, got {self.precision!r}")
        _require(self.device == "auto" or self.device == "cpu" or self.device.startswith("cuda"),
                 f"device must be auto, cpu, cuda or cuda:N, got {self.device!r}")
        _require(self.on_nonfinite in ("fail", "record"), f"on_nonfinite must be fail or record, got {self.on_nonfinite!r}")
        _require(0 <= self.seed <= SEED_MAX, f"seed must be in [0, 2**63 - 1], got {self.seed}")


@dataclass(frozen=True)
class SampleConfig:
    """Reverse sampling: one seed per sample (``seed_base + i``), batched."""

    method: str = "ddpm"  # ddpm | ddim (diffusion.kind gaussian); euler | heun (flow)
    steps: int | None = None  # None: all T steps; fewer respaces the schedule (ODE: sigma grid of that many points)
    eta: float = 1.0  # DDIM only; 0 is deterministic DDIM, 1 matches DDPM's variance
    num_samples: int = 1000
    seed_base: int = 0
    batch_size: int = 500
    use_ema: bool = True
    clip_x0: bool | None = None  # None: the process' default (gaussian clips x0_hat to [-1, 1], flow does not)
    shift: float = 1.0  # flow only: sample on the grid shift_sigma(sigma, shift) (SD3/Flux pipelines)
    # classifier-free guidance of a class-conditional model: 1.0 none (the conditional prediction),
    # 0.0 the unconditional one; DiT's FID-50K setting 1.5 (docs/methods.md)
    guidance_scale: float = 1.0
    grid_size: int = 100  # images in the PNG grid

    def __post_init__(self) -> None:
        _require(self.method in ("ddpm", "ddim", "euler", "heun"),
                 f"method must be ddpm, ddim, euler or heun, got {self.method!r}")
        _require(self.steps is None or self.steps > 0, f"steps must be > 0 or null, got {self.steps}")
        _require(self.eta >= 0, f"eta must be >= 0, got {self.eta}")
        _require(self.shift > 0, f"shift must be > 0, got {self.shift}")
        _require(self.guidance_scale >= 0, f"guidance_scale must be >= 0, got {self.guidance_scale}")
        _require(self.num_samples > 0, f"num_samples must be > 0, got {self.num_samples}")
        _require(0 <= self.seed_base <= SEED_MAX - self.num_samples + 1,
                 f"seed_base must be in [0, 2**63 - num_samples] (the samples' seeds are seed_base + i), "
                 f"got {self.seed_base}")
        _require(self.batch_size > 0, f"batch_size must be > 0, got {self.batch_size}")
        _require(self.grid_size >= 0, f"grid_size must be >= 0, got {self.grid_size}")


@dataclass(frozen=True)
class EvalConfig:
    """Evaluation protocol (see :mod:`timestep_lab.metrics`).

    ``feature_extractor`` picks the extractor of ``reference-stats`` (null: digits-cnn);
    ``evaluate`` always uses the reference file's extractor and, when this is set, checks that
    they match. ``feature_weights``: the trained extractor's weights file (digits-cnn,
    mnist-cnn: ``train-features``), or for
    ``inception-v3`` a folder holding ``weights-inception-2015-12-05-6726825d.pth``
    (torch-fidelity) and ``inception-2015-12-05.pt`` (clean-fid); null means the libraries'
    caches (and, for the digits CNN, the file the reference was computed with).
    KID: ``kid_subsets`` subsets of ``min(kid_subset_size, n_generated, n_reference)`` samples
    drawn with seed ``kid_seed`` (both tools).
    """

    feature_extractor: str | None = None  # digits-cnn | mnist-cnn | inception-v3 | rehearsal-cnn | null (see above)
    feature_weights: str | None = None  # weights file (digits-cnn, mnist-cnn, rehearsal-cnn) or folder (inception-v3)
    num_samples: int | None = None  # None: all samples in samples.npz
    tools: tuple[str, ...] = ("torch-fidelity", "clean-fid")
    kid: bool = True
    kid_subset_size: int = 1000
    kid_subsets: int = 100
    kid_seed: int = 0
    precision_recall: bool = True  # torch-fidelity only, in the extractor's feature space
    batch_size: int = 500
    download_weights: bool = True  # Inception weights absent from disk: try the libraries' download URL
    download_timeout_s: float = 10.0  # network timeout of that download (DNS and socket)

    def __post_init__(self) -> None:
        _require(self.feature_extractor in (None, *FEATURE_EXTRACTORS),
                 f"feature_extractor must be one of {', '.join(FEATURE_EXTRACTORS)}, got {self.feature_extractor!r}")
        _require(self.num_samples is None or self.num_samples >= MIN_FID_SAMPLES,
                 f"num_samples must be >= {MIN_FID_SAMPLES} or null, got {self.num_samples}")
        _require(len(self.tools) > 0 and all(t in ("torch-fidelity", "clean-fid") for t in self.tools)
                 and len(set(self.tools)) == len(self.tools),
                 f"tools must be a non-empty list of torch-fidelity and/or clean-fid, got {list(self.tools)}")
        _require(self.kid_subset_size >= 2, f"kid_subset_size must be >= 2, got {self.kid_subset_size}")
        _require(self.kid_subsets > 0, f"kid_subsets must be > 0, got {self.kid_subsets}")
        _require(0 <= self.kid_seed <= NUMPY_SEED_MAX, f"kid_seed must be in [0, 2**32 - 1], got {self.kid_seed}")
        _require(self.batch_size > 0, f"batch_size must be > 0, got {self.batch_size}")
        _require(self.download_timeout_s > 0, f"download_timeout_s must be > 0, got {self.download_timeout_s}")


@dataclass(frozen=True)
class RunConfig:
    """Everything one run needs. Defaults are the embedded digits model. ``conditioning``: what
    the network sees besides (x_t, t) (:mod:`timestep_lab.models.conditioning`; ``lowres``: a
    super-resolution model)."""

    data: DataConfig = field(default_factory=DataConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    conditioning: ComponentConfig = field(default_factory=lambda: ComponentConfig("none"))
    diffusion: DiffusionConfig = field(default_factory=DiffusionConfig)
    timesteps: ComponentConfig = field(default_factory=lambda: ComponentConfig("uniform"))
    weighting: ComponentConfig = field(default_factory=lambda: ComponentConfig("none"))
    optim: OptimConfig = field(default_factory=OptimConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    sample: SampleConfig = field(default_factory=SampleConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)

    def __post_init__(self) -> None:
        _require(self.train.batch_gpu is None or self.train.batch_size % self.train.batch_gpu == 0,
                 f"train.batch_size={self.train.batch_size} must be a multiple of train.batch_gpu={self.train.batch_gpu}")


#: What a ``budget:`` is counted in: CPU-core-hours of jobs, or GPU-hours on the card ``budget.gpu``.
BUDGET_UNITS = ("cpu-core-hours", "gpu-hours")
#: What the sequential test's running e-value is referred to (docs/methods.md §14.1): Ville's bound
#: (exact for normal per-seed differences, any number of seeds) or the scorecard's skew envelope
#: up to ``max_seeds`` seeds (the card's promise under skew; fewer findings).
SEQUENTIAL_CALIBRATIONS = ("skew_envelope", "normal")


@dataclass(frozen=True)
class BudgetConfig:
    """A study's ``budget:`` block: the study runs in stages, spending ``amount`` of ``unit`` only
    on claims still open (docs/methods.md §14). Absent: the fixed design.

    ``gpu``: the card GPU-hours are priced on (a name of the estimator's cards, e.g. ``h100``;
    required with ``gpu-hours``, refused with ``cpu-core-hours``). Seeds per arm: ``initial_seeds``
    in the first stage, at most ``step_seeds`` more per stage, never past ``max_seeds``. Length: a
    claim "not judged at this length" trains its runs ``length_step`` times longer per stage, never
    past ``max_length`` times the configured ``train.total_kimg``. ``prior_sd``: the SD of the safe
    t-test's prior on the standardised effect (fixed before any data, §14.1). ``calibration``:
    :data:`SEQUENTIAL_CALIBRATIONS`. ``max_stages``: at most this many stages (stage 0 included):
    what bounds the workflow's DAG (§14.5).
    """

    amount: float
    unit: str = "cpu-core-hours"
    gpu: str | None = None
    initial_seeds: int = 2
    step_seeds: int = 1
    max_seeds: int = 10
    length_step: float = 2.0
    max_length: float = 4.0
    prior_sd: float = 3.0
    calibration: str = "skew_envelope"
    max_stages: int = 4

    def __post_init__(self) -> None:
        _require(self.amount > 0, f"amount must be > 0, got {self.amount}")
        _require(self.unit in BUDGET_UNITS, f"unit must be one of {', '.join(BUDGET_UNITS)}, got {self.unit!r}")
        _require((self.gpu is not None) == (self.unit == "gpu-hours"),
                 f"gpu must name a card exactly when unit is gpu-hours, got unit {self.unit!r} and gpu {self.gpu!r}")
        _require(self.gpu is None or bool(self.gpu.strip()), "gpu must be a card's name, got an empty string")
        _require(self.initial_seeds >= 2, f"initial_seeds must be >= 2 (a paired interval needs two), got {self.initial_seeds}")
        _require(self.step_seeds >= 1, f"step_seeds must be >= 1, got {self.step_seeds}")
        _require(self.max_seeds >= self.initial_seeds,
                 f"max_seeds must be >= initial_seeds={self.initial_seeds}, got {self.max_seeds}")
        _require(self.length_step > 1, f"length_step must be > 1 (a factor on the run's length), got {self.length_step}")
        _require(self.max_length >= 1, f"max_length must be >= 1 (a factor on train.total_kimg), got {self.max_length}")
        _require(self.prior_sd > 0, f"prior_sd must be > 0, got {self.prior_sd}")
        _require(self.calibration in SEQUENTIAL_CALIBRATIONS,
                 f"calibration must be one of {', '.join(SEQUENTIAL_CALIBRATIONS)}, got {self.calibration!r}")
        _require(self.max_stages >= 1, f"max_stages must be >= 1 (stage 0 is the first look), got {self.max_stages}")

    @property
    def device(self) -> str:
        """The estimator's device the budget is counted on: ``cpu`` for CPU-core-hours, else the card
        (lower case, as the estimator's ``--gpu`` names it)."""
        return "cpu" if self.unit == "cpu-core-hours" else str(self.gpu).strip().lower()
