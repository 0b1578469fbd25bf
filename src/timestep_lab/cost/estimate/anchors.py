"""Published GPU throughput, kept as data with its citation, and how it is carried to our networks.

Where no GPU row of ours has been measured (:data:`throughput.MEASURED`), a step's images per
second come from what others published for similar networks. Each :class:`Anchor` is one such
figure: a network (its FLOPs per image counted the way :mod:`flops` counts ours), a card, the
precision it ran in, and the images (or network evaluations) per second it reached, with the
sentence it comes from. An anchor is carried to one of our networks on one of our devices by
keeping its *utilisation* (model FLOP/s over the card's dense peak at the anchor's precision):

    images/s (ours, device) = images/s (anchor) x FLOPs/image (anchor) / FLOPs/image (ours)
                              x peak(device, p) / peak(anchor card, p)      p = the anchor's precision

FLOPs per image carry both parameter count and resolution (a convolution costs
``2 C_in C_out k^2 H W``), so a network twice as wide or at twice the resolution is priced at
~4x the time. An anchor applies to a step of its own kind (``train``: forward + backward +
optimizer; ``sample``: one network evaluation; ``features``: one image through the FID
extractor) run at the same or a faster precision: an fp32 anchor bounds a bf16 step from below
(bf16 is not slower), a bf16 anchor says nothing about an fp32 step. docs/methods.md §11.1
states the rule and its known biases: utilisation carried from an older,
slower card to a faster one tends to overstate the faster card (small networks are bound by
memory bandwidth and kernel launches, not by peak FLOP/s), and FLOP scaling from a smaller
network understates a larger one (bigger matrices use the card better).

Knows cards, anchors and the scaling rule; knows nothing of studies, rules or calibration.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Card", "CARDS", "Anchor", "ANCHORS", "PRECISION_ORDER", "Scaled", "scaled_anchors"]

#: slower to faster: an anchor at precision p applies to a step run at p or any later entry
PRECISION_ORDER = ("fp32", "tf32", "bf16")


@dataclass(frozen=True)
class Card:
    """Dense peak FLOP/s of a GPU by precision: ``fp32`` on the CUDA cores, ``tf32`` and ``bf16``
    (fp16 alike) on the tensor cores, no sparsity. A card without TF32 has no ``tf32`` entry."""

    name: str
    peak: dict[str, float]
    source: str


CARDS: dict[str, Card] = {
    "v100": Card("NVIDIA V100 SXM2", {"fp32": 15.7e12, "bf16": 125e12},
                 "NVIDIA V100 data sheet: 15.7 TFLOPS single precision, 125 TFLOPS tensor (fp16)"),
    "a100": Card("NVIDIA A100 SXM", {"fp32": 19.5e12, "tf32": 156e12, "bf16": 312e12},
                 "NVIDIA A100 data sheet: 19.5 TFLOPS FP32, 156 TF32, 312 BF16/FP16 tensor (dense)"),
    "h100": Card("NVIDIA H100 SXM", {"fp32": 66.9e12, "tf32": 494.7e12, "bf16": 989.4e12},
                 "NVIDIA H100 data sheet (SXM): 67 TFLOPS FP32, 989 TF32 and 1,979 BF16 tensor with sparsity, half dense"),
    "h200": Card("NVIDIA H200", {"fp32": 66.9e12, "tf32": 494.7e12, "bf16": 989.4e12},
                 "NVIDIA H200 data sheet: the H100 SXM's compute (same figures), more and faster memory"),
    "h800": Card("NVIDIA H800 SXM", {"fp32": 66.9e12, "tf32": 494.7e12, "bf16": 989.4e12},
                 "NVIDIA H800 SXM: the H100 SXM's compute (same figures; the export variant differs in NVLink "
                 "bandwidth and FP64)"),
    "rtx2080ti": Card("NVIDIA RTX 2080 Ti", {"fp32": 13.4e12, "bf16": 53.8e12},
                      "NVIDIA Turing architecture whitepaper: 13.4 TFLOPS FP32, 53.8 TFLOPS fp16 tensor with fp32 "
                      "accumulate (reference card)"),
}


@dataclass(frozen=True)
class Anchor:
    """One published throughput: ``images_per_s`` of ``step`` on one ``card`` at ``precision``
    for a network of ``flops_per_image`` (our counting: FlopCounterMode convention, 2 FLOPs per
    multiply-add, train = forward + backward)."""

    name: str
    step: str  # "train" | "sample" | "features"
    card: str  # key of CARDS
    precision: str  # key of Card.peak
    network: str
    flops_per_image: float
    images_per_s: float
    derivation: str  # how images_per_s and flops_per_image follow from the source
    citation: str  # where the figure is printed, quoted
    # the network family it is carried to (train and sample steps): a transformer's utilisation
    # says little of a UNet's (other kernels, other memory traffic), and the other way round
    family: str = "unet"

    def describe(self) -> str:
        card = CARDS[self.card]
        return (f"{self.name}: {self.images_per_s:,.1f} images/s of {self.network} "
                f"({self.flops_per_image / 1e9:.3g} GFLOP each) on {card.name} in {self.precision}, "
                f"{self.utilisation:.1%} of its peak. {self.derivation}. Source: {self.citation}")

    @property
    def utilisation(self) -> float:
        """Model FLOP/s over the card's dense peak at the anchor's precision (can exceed 1:
        cuDNN's Winograd convolutions do fewer multiplies than the model's FLOP count)."""
        return self.images_per_s * self.flops_per_image / CARDS[self.card].peak[self.precision]


# FLOPs of the anchors' networks are counted with timestep_lab.cost.estimate.flops on our UNet at
# the same widths where the architecture is DDPM's (ours reproduces its parameter count:
# 35,746,307 for CIFAR-10, 113.67M for LSUN-256); EDM's DDPM++ is counted on our UNet at its
# widths (53.6M parameters; DDPM++ has about 56M: a slight undercount); kimbochen/ddpm's FLOPs are
# its own torchinfo count converted to our convention.
ANCHORS: tuple[Anchor, ...] = (
    Anchor(
        name="EDM DDPM++ CIFAR-10, 8x V100",
        step="train", card="v100", precision="fp32",
        network="DDPM++ (SongUNet, 128 channels x [2,2,2], 4 blocks per resolution, attention at 16x16), 32x32x3",
        flops_per_image=123.26e9,
        images_per_s=200e6 / (2 * 86400) / 8,
        derivation="200 Mimg (train.py --duration default) in ~2 days on 8 GPUs: 144.7 images/s per V100; fp32 "
                   "(--fp16 defaults to False and the CIFAR-10 commands do not set it); FLOPs: our UNet at "
                   "DDPM++'s widths, forward 41.1 GFLOP x 3",
        citation="NVlabs/edm README, 'Training new models': cifar10-32x32-uncond-vp | 8xV100 | ~2 days | "
                 "--cond=0 --arch=ddpmpp; docs/train-help.txt: --duration MIMG [default: 200], "
                 "--fp16 BOOL [default: False]",
    ),
    Anchor(
        name="kimbochen/ddpm CIFAR-10 UNet, A100, mixed precision",
        step="train", card="a100", precision="bf16",
        network="DDPM UNet, 9.19M parameters, attention at every resolution, 32x32x3",
        flops_per_image=2 * 3 * 61.22e9 / 128,
        images_per_s=16.47e12 / (3 * 61.22e9 / 128),
        derivation="its FLOPs are torchinfo multiply-adds x 3 (forward + backward) = 183.66 G per 128 images, so "
                   "16.47 'TFLOP/s' is 11,478 images/s; our convention counts 2 FLOPs per multiply-add: "
                   "2.87 GFLOP per trained image (attention matrix products are not in torchinfo's count)",
        citation="kimbochen/ddpm README, 'Optimization Techniques': Mixed-Precision Training | 16.47 TFLOPs per "
                 "Second | 7.86x | MFU 5.28%; 'We estimate the number of FLOPs for the forward pass using "
                 "torchinfo.summary and multiply by 3'; notebooks/perf-opt.ipynb: Total mult-adds (G): 61.22 at "
                 "batch 128",
    ),
    Anchor(
        name="kimbochen/ddpm CIFAR-10 UNet, A100, fp32 baseline",
        step="train", card="a100", precision="fp32",
        network="DDPM UNet, 9.19M parameters, attention at every resolution, 32x32x3",
        flops_per_image=2 * 3 * 61.22e9 / 128,
        images_per_s=2.096e12 / (3 * 61.22e9 / 128),
        derivation="2.096 'TFLOP/s' in its convention (torchinfo multiply-adds x 3 = 1.435 G per image): 1,461 "
                   "images/s; 2.87 GFLOP per image in ours",
        citation="kimbochen/ddpm README, 'Optimization Techniques': Baseline | 2.096 | 1.00x | 10.75 (MFU % of "
                 "19.5 TFLOP/s FP32)",
    ),
    Anchor(
        name="fast-DiT: DiT-XL/2 training, A100, fp16",
        step="train", card="a100", precision="bf16",
        network="DiT-XL/2 (675M), 32x32x4 latents of 256x256 images, pre-extracted VAE features",
        flops_per_image=711.72e9,
        images_per_s=0.84 * 128,
        derivation="0.84 steps/s at global batch 128 on one A100 with gradient checkpointing, fp16 mixed "
                   "precision and pre-extracted latents (as our latent runs): 107.5 images/s; FLOPs: our DiT-XL/2 "
                   "(the official layers, 8 outputs, 1000 classes), forward 237.2 GFLOP, forward + backward 711.7. "
                   "Checkpointing recomputes the forward, so the card did ~4/3 of this work: the anchor "
                   "understates a run without it",
        citation="chuanyangjin/fast-DiT README, 'Improved Training Performance': 'Some data points using a global "
                 "batch size of 128 with a A100' | gradient checkpointing, mixed precision training, feature "
                 "pre-extraction | 0.84 steps/sec | 27485 MB",
        family="dit",
    ),
    Anchor(
        name="Open-Sora: DiT-XL/2 image training, 8x H800",
        step="train", card="h800", precision="bf16",
        network="DiT-XL/2 (675M), 256x256 images (256 tokens), VAE encoding in the step",
        flops_per_image=711.72e9,
        images_per_s=1.3 * 128,
        derivation="1.3 it/s at local batch 128 per GPU on a node of 8 H800: 166.4 images/s per GPU, in bf16 (the "
                   "table does not say; Open-Sora trains in bf16); the step also ran the VAE encoder (272.7 GFLOP "
                   "per image), which this figure does not count: it understates a step on stored latents",
        citation="hpcaitech/Open-Sora, speed.md in its docs folder: 'The speeds are measured when training on a single node with 8 "
                 "GPUs (H800-80GB) ... The batch size (BS) is the local batch size.' | DiT-XL/2 | 128 | 1.3 it/s",
        family="dit",
    ),
    Anchor(
        name="DDIM: DDPM CIFAR-10 sampling, RTX 2080 Ti",
        step="sample", card="rtx2080ti", precision="fp32",
        network="DDPM CIFAR-10 UNet (35.7M; ours at the same widths: unet-35.75M@32x32x3), 32x32x3",
        flops_per_image=12.444e9,
        images_per_s=50_000 * 1000 / (20 * 3600),
        derivation="50k images x 1000 DDPM steps in ~20 hours: 694 network evaluations/s",
        citation="Song et al., Denoising Diffusion Implicit Models (ICLR 2021), Sec. 1: 'it takes around 20 hours "
                 "to sample 50k images of size 32 x 32 from a DDPM, but less than a minute to do so from a GAN on "
                 "a Nvidia 2080 Ti GPU'",
    ),
    Anchor(
        name="DDIM: DDPM 256x256 sampling, RTX 2080 Ti",
        step="sample", card="rtx2080ti", precision="fp32",
        network="DDPM LSUN 256x256 UNet (114M; ours at the same widths: unet-113.67M@256x256x3)",
        flops_per_image=497.03e9,
        images_per_s=50_000 * 1000 / (1000 * 3600),
        derivation="50k images x 1000 steps in nearly 1000 hours: 13.9 network evaluations/s",
        citation="Song et al., Denoising Diffusion Implicit Models (ICLR 2021), Sec. 1: 'sampling 50k images of "
                 "size 256 x 256 could take nearly 1000 hours on the same GPU'",
    ),
    Anchor(
        name="EDM fid.py: 50k Inception features, slow reading",
        step="features", card="a100", precision="fp32",
        network="Inception-v3 (FID), 299x299x3",
        flops_per_image=11.426e9,
        images_per_s=50_000 / 180,
        derivation="50,000 images in 3 minutes (image decoding included), read as on the faster of the two "
                   "cards the README names",
        citation="NVlabs/edm README, 'Calculating FID': 'The second command typically takes 1-3 minutes in "
                 "practice'; 'We have done all testing and development using V100 and A100 GPUs'",
    ),
    Anchor(
        name="EDM fid.py: 50k Inception features, fast reading",
        step="features", card="v100", precision="fp32",
        network="Inception-v3 (FID), 299x299x3",
        flops_per_image=11.426e9,
        images_per_s=50_000 / 60,
        derivation="50,000 images in 1 minute, read as on the slower card (V100)",
        citation="NVlabs/edm README, 'Calculating FID': 'The second command typically takes 1-3 minutes in "
                 "practice'",
    ),
)


@dataclass(frozen=True)
class Scaled:
    """One anchor carried to our network on our device."""

    anchor: Anchor
    images_per_s: float


def scaled_anchors(step: str, flops_per_image: float, device: str, precision: str,
                   family: str | None = None) -> list[Scaled]:
    """The anchors of ``step`` that apply to a step at ``precision`` on card ``device`` (a key of
    :data:`CARDS`), each carried to a network of ``flops_per_image`` (module docstring); slowest
    first. Empty when none applies (no anchor of that kind, or all at a faster precision).
    ``family`` (``unet``, ``dit``): only the anchors of that network family (None: any)."""
    if device not in CARDS or flops_per_image <= 0:
        return []
    rank = PRECISION_ORDER.index(precision)
    out = []
    for a in ANCHORS:
        if a.step != step or PRECISION_ORDER.index(a.precision) > rank:
            continue
        if family is not None and a.family != family:
            continue
        peak = CARDS[device].peak.get(a.precision)
        if peak is None:
            continue
        ips = a.images_per_s * a.flops_per_image / flops_per_image * peak / CARDS[a.card].peak[a.precision]
        out.append(Scaled(a, ips))
    return sorted(out, key=lambda s: s.images_per_s)
