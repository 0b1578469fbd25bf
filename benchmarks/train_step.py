"""Images per second of our training step vs a minimal reference loop, measured in one run (+ MFU on a GPU).

    python benchmarks/train_step.py                                   # digits model, CPU, batch 128
    python benchmarks/train_step.py --model cifar10 --batch 8         # the 35.7M CIFAR-10 UNet on a CPU
    python benchmarks/train_step.py --device cuda --model cifar10 --json out.json   # H100: bf16, compile
    python benchmarks/train_step.py --device cuda --model dit-b2 --batch 256 --json out.json   # DiT-B/2, latent shape
    python benchmarks/train_step.py --quick --json out.json           # CI: a few seconds, ratios rough

``ours``       :meth:`timestep_lab.train.TrainStep.step` from :func:`timestep_lab.train.build_train_step`
               -- the very object :func:`timestep_lab.train.train` runs each optimizer step: index
               stream, uint8 batch gather (+ flips), sampler draw (uniform), ``q_sample``, forward,
               per-sample eps MSE times importance weight and loss weighting, backward, gradient
               clipping, AdamW, EMA (``_foreach_lerp_``), sampler update, per-timestep-bin sums and
               the non-finite guard on the device. On CUDA: bf16 autocast, channels_last, fused
               AdamW, ``torch.compile`` (``--no-compile`` to switch it off), pinned staging buffers.
``reference``  :class:`ReferenceLoop`, written plainly below: the same UNet class built from the same
               config, the same batch and data array, ``t ~ U{0..T-1}``, eps MSE, plain
               ``torch.optim.AdamW`` (its default implementation for the device), the same gradient
               clipping (``clip_grad_norm_``, as DDPM's recipe and our default config do), and an EMA
               updated by a Python loop over the parameters. fp32, eager, pageable host memory,
               torch's default cuDNN settings (no autotuning; TF32 convolutions as torch defaults).

Both train their own copy of the network on the same data; they are timed in alternating rounds
(``--rounds`` x ``--steps`` steps each, the order flipped every round, after ``--warmup``
unmeasured steps that also absorb compilation), and the reported ratios are medians over rounds of
the per-round ratio, so load from other processes hits both sides equally.

MFU (CUDA only): FLOPs of one forward + backward of the network at this batch, counted by
``torch.utils.flop_counter.FlopCounterMode`` (matmuls, convolutions, attention: the dense work),
divided by the step time and by the device's peak dense bf16 rate (:data:`PEAK_BF16`, looked up
by ``torch.cuda.get_device_name()``; unknown devices print MFU as unknown). The reference runs in
fp32, so its MFU against the bf16 peak shows how much a plain loop leaves on the table.

Targets: on a CPU our step takes at most 1.10x the reference's time (digits model); on an H100
(CIFAR-10 UNet, batch 128) ours reaches >= 1.5x the reference's images/s and >= 35% MFU.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import Timer, base_parser, machine, median, sync, synthetic_prepared, write_json  # noqa: E402

from timestep_lab.components import build_model  # noqa: E402
from timestep_lab.config import RunConfig, load_config  # noqa: E402
from timestep_lab.data import PreparedData  # noqa: E402
from timestep_lab.train import build_train_step  # noqa: E402

# name -> (model overrides, image size, channels, hflip, synthetic images in the data array)
MODELS = {
    # the default digits model (config/config.yaml): ~0.16M parameters, 8x8 grey
    "digits": (["model.channels=16", "model.channel_mult=[1,2]", "model.num_res_blocks=1", "model.norm_groups=8"],
               8, 1, False, 2048),
    # the MNIST model (config/mnist.yaml): ~0.27M parameters, three resolutions, 32x32 grey
    "mnist": (["model.channels=16", "model.channel_mult=[1,2,2]", "model.num_res_blocks=1", "model.norm_groups=8"],
              32, 1, False, 4000),
    # DDPM's CIFAR-10 UNet (config/cifar10.yaml): 35.7M parameters, 32x32 RGB, random flips
    "cifar10": (["model.channels=128", "model.channel_mult=[1,2,2,2]", "model.num_res_blocks=2",
                 "model.attention_resolutions=[16]", "model.dropout=0.1", "model.norm_groups=32"],
                32, 3, True, 4096),
    # DiT-B/2 (config/imagenet-dit-b.yaml; 129.5M parameters with fixed variance) on 32x32x4 inputs, the
    # shape of 256x256 images' sd-vae-ft-ema latents (a uint8 array stands in for them: same network
    # work, the latent loader's float16 gather aside)
    "dit-b2": (["model.name=dit", "model.params={size: B/2}"], 32, 4, True, 4096),
}
NUM_TIMESTEPS = 1000
LR = 2e-4
GRAD_CLIP = 1.0
EMA_HALFLIFE_KIMG = 0.5

# peak dense bf16 tensor-core FLOP/s (no sparsity), by a substring of torch.cuda.get_device_name()
PEAK_BF16 = [("H100 PCIe", 756e12), ("H100", 989.4e12), ("H200", 989.4e12), ("A100", 312e12)]


def peak_bf16_flops(name: str) -> float | None:
    """Peak dense bf16 FLOP/s of the GPU called ``name``, or None when it is not in the table."""
    if "H100" in name and "NVL" in name:
        return None  # H100 NVL has its own peak, not in the table
    for key, peak in PEAK_BF16:
        if all(part in name for part in key.split()):
            return peak
    return None


def our_config(data: Path, model: str, batch: int, device: str, compile_: bool, sampler: str) -> RunConfig:
    """Our run config for the benchmark: the model, AdamW at DDPM's rate, uniform t, eps, no weighting."""
    overrides, _, _, hflip, _ = MODELS[model]
    gpu = device.startswith("cuda")
    return load_config(None, [
        f"data.path={data}", f"data.hflip={str(hflip).lower()}", *overrides,
        f"diffusion.num_timesteps={NUM_TIMESTEPS}", "diffusion.prediction=eps", f"timesteps.name={sampler}",
        "optim.name=adamw", f"optim.lr={LR}", f"optim.grad_clip={GRAD_CLIP}",
        f"train.batch_size={batch}", f"train.ema_halflife_kimg={EMA_HALFLIFE_KIMG}", f"train.device={device}",
        f"train.precision={'bf16' if gpu else 'fp32'}", f"train.channels_last={str(gpu).lower()}",
        f"train.compile={str(compile_).lower()}", "train.seed=0",
    ])


class ReferenceLoop:
    """A minimal DDPM training loop written plainly in PyTorch (fp32, eager): the yardstick.

    Per step: ``idx ~ U{0..N-1}``, ``x0 = images[idx] / 127.5 - 1`` (+ flips), ``t ~ U{0..T-1}``,
    ``x_t = sqrt(ab_t) x0 + sqrt(1 - ab_t) eps``, ``loss = mean((f(x_t, t) - eps)^2)``, backward,
    ``clip_grad_norm_``, ``AdamW.step()``, ``ema = beta ema + (1 - beta) p`` per parameter."""

    def __init__(self, cfg: RunConfig, images_nchw: torch.Tensor, device: torch.device):
        self.device, self.images, self.batch = device, images_nchw, cfg.train.batch_size
        self.hflip = cfg.data.hflip
        torch.manual_seed(cfg.train.seed)
        self.net = build_model(cfg, images_nchw.shape[-1], images_nchw.shape[1]).to(device).train()
        betas = torch.linspace(1e-4, 0.02, NUM_TIMESTEPS, dtype=torch.float64)  # DDPM's linear schedule
        alpha_bar = torch.cumprod(1.0 - betas, dim=0)
        self.sqrt_ab = alpha_bar.sqrt().float().to(device)
        self.sqrt_1m_ab = (1.0 - alpha_bar).sqrt().float().to(device)
        self.opt = torch.optim.AdamW(self.net.parameters(), lr=LR, weight_decay=0.0)
        self.ema = [p.detach().clone() for p in self.net.parameters()]
        self.ema_beta = 0.5 ** (self.batch / (EMA_HALFLIFE_KIMG * 1000))

    def step(self) -> None:
        # torch's defaults: build_train_step switches cuDNN autotuning on process-wide (one of our
        # optimisations); a plain loop runs without it
        saved, torch.backends.cudnn.benchmark = torch.backends.cudnn.benchmark, False
        try:
            self._step()
        finally:
            torch.backends.cudnn.benchmark = saved

    def _step(self) -> None:
        B, dev = self.batch, self.device
        idx = torch.randint(0, self.images.shape[0], (B,))
        x0 = self.images[idx].to(dev).float() / 127.5 - 1.0
        if self.hflip:
            flip = (torch.rand(B, device=dev) < 0.5).view(-1, 1, 1, 1)
            x0 = torch.where(flip, x0.flip(3), x0)
        t = torch.randint(0, NUM_TIMESTEPS, (B,), device=dev)
        noise = torch.randn_like(x0)
        x_t = self.sqrt_ab[t].view(-1, 1, 1, 1) * x0 + self.sqrt_1m_ab[t].view(-1, 1, 1, 1) * noise
        loss = F.mse_loss(self.net(x_t, t), noise)
        self.opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.net.parameters(), GRAD_CLIP)
        self.opt.step()
        with torch.no_grad():
            for e, p in zip(self.ema, self.net.parameters()):
                e.mul_(self.ema_beta).add_(p, alpha=1.0 - self.ema_beta)


def flops_per_step(net: torch.nn.Module, shape: tuple[int, ...], device: torch.device) -> int:
    """FLOPs of one forward + backward of ``net`` on a batch of ``shape`` (FlopCounterMode)."""
    from torch.utils.flop_counter import FlopCounterMode

    x = torch.randn(shape, device=device)
    t = torch.randint(0, NUM_TIMESTEPS, (shape[0],), device=device)
    counter = FlopCounterMode(display=False)
    with counter:
        net(x, t).square().mean().backward()
    net.zero_grad(set_to_none=True)
    return int(counter.get_total_flops())


def main(argv: list[str] | None = None) -> dict:
    p = base_parser(__doc__.splitlines()[0])
    p.add_argument("--model", choices=sorted(MODELS), default="digits")
    p.add_argument("--batch", type=int, default=128, help="global batch (images per step)")
    p.add_argument("--steps", type=int, default=None, help="steps per round (default: 20 digits, 5 cifar10)")
    p.add_argument("--rounds", type=int, default=7, help="alternating rounds")
    p.add_argument("--warmup", type=int, default=None, help="unmeasured steps each (default: 5; 20 with compile)")
    p.add_argument("--compile", action=argparse.BooleanOptionalAction, default=None,
                   help="torch.compile our network (default: on CUDA only)")
    p.add_argument("--sampler", default="uniform", help="our timestep sampler (the reference is always uniform)")
    args = p.parse_args(argv)
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        p.error("--device cuda but CUDA is not available on this machine")
    compile_ = device.type == "cuda" if args.compile is None else args.compile
    steps = args.steps or (20 if args.model == "digits" else 5)
    warmup = args.warmup if args.warmup is not None else (20 if compile_ else 5)
    if args.quick:
        steps, warmup, args.rounds = 3, 2, 2
    torch.set_num_threads(args.threads)

    _, size, channels, _, n_images = MODELS[args.model]
    with tempfile.TemporaryDirectory(prefix="train-step-bench-") as tmp:
        data = synthetic_prepared(Path(tmp) / "data", n_images, size, channels)
        cfg = our_config(data, args.model, args.batch, args.device, compile_, args.sampler)
        t0 = time.perf_counter()
        ours = build_train_step(cfg)
        images = torch.from_numpy(np.array(PreparedData(data).images)).permute(0, 3, 1, 2).contiguous()
        ref = ReferenceLoop(cfg, images, device)
        n_params = sum(p.numel() for p in ours.net.parameters())
        flops = flops_per_step(ref.net, (args.batch, channels, size, size), device) if device.type == "cuda" else None

        def timed(step_fn):
            def run() -> float:
                with Timer(device) as tm:
                    for _ in range(steps):
                        step_fn()
                return tm.seconds / steps
            return run

        for _ in range(warmup):  # compilation, cuDNN autotuning, allocator warm-up
            ours.step()
            ref.step()
        sync(device)
        setup_s = time.perf_counter() - t0
        fns = {"ours": timed(ours.step), "reference": timed(ref.step)}
        times: dict[str, list[float]] = {k: [] for k in fns}
        for r in range(args.rounds):  # alternate the order every round
            for name in (list(fns) if r % 2 == 0 else list(fns)[::-1]):
                times[name].append(fns[name]())
        compiled = ours.fwd is not (ours.ddp or ours.net)  # False if compilation failed and fell back

    step_ratio = median([o / r for o, r in zip(times["ours"], times["reference"])])
    med = {k: median(v) for k, v in times.items()}
    ips = {k: args.batch / v for k, v in med.items()}
    result = {
        "model": args.model, "device": str(device), "batch": args.batch, "params": n_params,
        "steps_per_round": steps, "rounds": args.rounds, "warmup_steps": warmup, "threads": torch.get_num_threads(),
        "ours": {"precision": cfg.train.precision, "channels_last": ours.channels_last, "compile": compiled,
                 "optimizer": type(ours.optimizer).__name__ + (" (fused)" if ours.optimizer.defaults.get("fused")
                                                               else " (foreach)"),
                 "sampler": args.sampler},
        "s_per_step": med, "all_s_per_step": times, "images_per_s": ips,
        "ratio_step_time": step_ratio, "ratio_images_per_s": 1.0 / step_ratio,
        "setup_and_warmup_s": setup_s, "machine": machine(),
    }
    gpu_name = torch.cuda.get_device_name(device) if device.type == "cuda" else None
    peak = peak_bf16_flops(gpu_name) if gpu_name else None
    if flops is not None:
        result["flops_per_step"] = flops
        result["achieved_flops"] = {k: flops / v for k, v in med.items()}
        result["peak_bf16_flops"] = peak
        result["mfu"] = {k: (flops / v / peak if peak else None) for k, v in med.items()}

    print(f"# {machine()}")
    print(f"# {args.model} network ({n_params / 1e6:.2f}M params), batch {args.batch}, {args.device}, "
          f"{args.rounds} rounds x {steps} steps (+{warmup} warm-up, {setup_s:.0f} s incl. set-up); "
          f"ours: {result['ours']}")
    for name in fns:
        print(f"{name:<10} {med[name] * 1000:9.2f} ms/step  {ips[name]:10.1f} images/s   "
              f"({', '.join(f'{x * 1000:.1f}' for x in times[name])})")
    target = "target <= 1.10 on CPU" if device.type == "cpu" else "target >= 1.5 images/s on an H100"
    print(f"ours / reference: step time {step_ratio:.3f}, images/s {1.0 / step_ratio:.3f}  ({target})")
    if flops is not None:
        if peak:
            print(f"MFU ({gpu_name}, peak bf16 {peak / 1e12:.1f} TFLOP/s, {flops / 1e9:.1f} GFLOP/step): "
                  f"ours {result['mfu']['ours']:.1%}, reference {result['mfu']['reference']:.1%}  (target >= 35%)")
        else:
            print(f"MFU: unknown (no peak bf16 rate for {gpu_name!r}); achieved "
                  f"{result['achieved_flops']['ours'] / 1e12:.1f} TFLOP/s ours, "
                  f"{result['achieved_flops']['reference'] / 1e12:.1f} reference")
    write_json(args.json, result)
    return result


if __name__ == "__main__":
    main()
