"""Training-step images/s of one UNet under each execution mode, interleaved in one run (+ MFU on a GPU).

    python benchmarks/train_variants.py --device cuda --model cifar10 --json out.json   # H100: ~5 min
    python benchmarks/train_variants.py --quick --json out.json                         # CPU: seconds

Variants (same data, same batch, each trains its own copy of the network):

``reference-fp32``     the plain fp32 eager loop of ``benchmarks/train_step.py`` (:class:`ReferenceLoop`)
``ours-fp32``          :func:`timestep_lab.train.build_train_step`, fp32, eager, NCHW
``ours-bf16``          + bf16 autocast
``ours-bf16-cl``       + channels_last
``ours-bf16-compile``  bf16 + ``torch.compile`` (NCHW)
``ours-bf16-compile-cl``  bf16 + compile + channels_last: what ``train()`` runs on CUDA by default
``flow-bf16-cl`` / ``flow-bf16-compile-cl``  the same network trained on the flow-matching objective
                       (``diffusion.kind=flow``, velocity target, logit-normal t): the objective's own
                       cost beside the DDPM step's
``diffusers-fp32`` / ``diffusers-bf16``  DDPM's CIFAR-10 configuration built as diffusers'
                       ``UNet2DModel`` (``google/ddpm-cifar10-32``'s config.json) under the reference
                       loop (bf16: the same loop inside autocast): a peer implementation
                       (skipped when diffusers is not installed)

MFU = FlopCounterMode FLOPs of forward + backward at this batch / step time / the device's dense
bf16 peak (``train_step.peak_bf16_flops``). When the best variant stays under ``--mfu-goal`` the
profiler's top CUDA kernels of the default variant are written too. Compiled variants are skipped
on a CPU unless ``--compile-on-cpu`` (inductor on a CPU takes minutes).
"""

from __future__ import annotations

import dataclasses
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import Timer, base_parser, machine, median, sync, synthetic_prepared, write_json  # noqa: E402
from train_step import MODELS, ReferenceLoop, flops_per_step, our_config, peak_bf16_flops  # noqa: E402

from timestep_lab.data import PreparedData  # noqa: E402
from timestep_lab.train import build_train_step  # noqa: E402

OURS = {  # name -> (precision, channels_last, compile)
    "ours-fp32": ("fp32", False, False),
    "ours-bf16": ("bf16", False, False),
    "ours-bf16-cl": ("bf16", True, False),
    "ours-bf16-compile": ("bf16", False, True),
    "ours-bf16-compile-cl": ("bf16", True, True),
    "flow-bf16-cl": ("bf16", True, False),
    "flow-bf16-compile-cl": ("bf16", True, True),
}
FLOW = {"diffusion": {"kind": "flow", "prediction": "v"}, "timesteps": {"name": "logit_normal"}}
DDPM_CIFAR10_DIFFUSERS = dict(  # google/ddpm-cifar10-32 config.json
    sample_size=32, in_channels=3, out_channels=3, layers_per_block=2, block_out_channels=(128, 256, 256, 256),
    down_block_types=("DownBlock2D", "AttnDownBlock2D", "DownBlock2D", "DownBlock2D"),
    up_block_types=("UpBlock2D", "UpBlock2D", "AttnUpBlock2D", "UpBlock2D"), downsample_padding=0,
    flip_sin_to_cos=False, freq_shift=1, norm_eps=1e-6, norm_num_groups=32, dropout=0.1)


def variant_config(base, name: str):
    """``base`` (a RunConfig) as variant ``name`` of :data:`OURS` trains: its precision, channels_last
    and compile, and for ``flow-*`` the flow-matching objective (:data:`FLOW`)."""
    precision, cl, comp = OURS[name]
    cfg = base
    if name.startswith("flow"):
        cfg = dataclasses.replace(base, diffusion=dataclasses.replace(base.diffusion, **FLOW["diffusion"]),
                                  timesteps=dataclasses.replace(base.timesteps, **FLOW["timesteps"]))
    return dataclasses.replace(cfg, train=dataclasses.replace(cfg.train, precision=precision, channels_last=cl,
                                                              compile=comp))


class DiffusersLoop(ReferenceLoop):
    """The reference loop with diffusers' ``UNet2DModel`` as the network (optionally in bf16 autocast)."""

    def __init__(self, cfg, images, device, bf16: bool):
        super().__init__(cfg, images, device)
        from diffusers import UNet2DModel  # optional peer: only this variant needs it

        unet = UNet2DModel(**DDPM_CIFAR10_DIFFUSERS).to(device).train()
        self.net = _Sample(unet)
        self.opt = torch.optim.AdamW(self.net.parameters(), lr=self.opt.defaults["lr"], weight_decay=0.0)
        self.ema = [p.detach().clone() for p in self.net.parameters()]
        self.bf16 = bf16

    def _step(self) -> None:
        if not self.bf16:
            return super()._step()
        with torch.autocast(self.device.type, dtype=torch.bfloat16):
            return super()._step()


class _Sample(torch.nn.Module):
    def __init__(self, unet):
        super().__init__()
        self.unet = unet

    def forward(self, x, t):
        return self.unet(x, t).sample


def top_kernels(step, device: torch.device, n: int = 15) -> list[dict]:
    """The profiler's ``n`` most expensive device kernels over 5 steps of ``step``."""
    from torch.profiler import ProfilerActivity, profile

    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    with profile(activities=acts) as prof:
        for _ in range(5):
            step()
        sync(device)
    key = "self_device_time_total" if device.type == "cuda" else "self_cpu_time_total"
    events = sorted(prof.key_averages(), key=lambda e: getattr(e, key, 0), reverse=True)[:n]
    return [{"name": e.key[:120], "self_us": getattr(e, key, 0), "calls": e.count} for e in events]


def main(argv: list[str] | None = None) -> dict:
    p = base_parser(__doc__.splitlines()[0])
    p.add_argument("--model", choices=sorted(MODELS), default="digits")
    p.add_argument("--batch", type=int, default=128)
    p.add_argument("--steps", type=int, default=10, help="steps per round per variant")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--warmup", type=int, default=5, help="unmeasured steps (compiled variants: 4x)")
    p.add_argument("--variants", nargs="*", default=None, help="default: all")
    p.add_argument("--compile-on-cpu", action="store_true")
    p.add_argument("--mfu-goal", type=float, default=0.35)
    args = p.parse_args(argv)
    device = torch.device(args.device)
    if args.quick:
        args.batch, args.steps, args.rounds, args.warmup = min(args.batch, 16), 1, 1, 1
    torch.set_num_threads(args.threads)
    names = args.variants or ["reference-fp32", *OURS, "diffusers-fp32", "diffusers-bf16"]
    skipped: dict[str, str] = {}
    _, size, channels, _, n_images = MODELS[args.model]
    with tempfile.TemporaryDirectory(prefix="train-variants-") as tmp:
        data = synthetic_prepared(Path(tmp) / "data", n_images, size, channels)
        images = torch.from_numpy(np.array(PreparedData(data).images)).permute(0, 3, 1, 2).contiguous()
        base = our_config(data, args.model, args.batch, args.device, False, "uniform")
        steps: dict = {}
        for name in names:
            t0 = time.perf_counter()
            try:
                if name == "reference-fp32":
                    fn = ReferenceLoop(base, images, device).step
                elif name.startswith("diffusers"):
                    if args.model != "cifar10":
                        raise RuntimeError("the diffusers peer exists for --model cifar10 only")
                    fn = DiffusersLoop(base, images, device, bf16=name.endswith("bf16")).step
                else:
                    precision, cl, comp = OURS[name]
                    if device.type == "cpu" and (comp and not args.compile_on_cpu or precision == "bf16" and cl):
                        raise RuntimeError("skipped on a CPU (compile: minutes; channels_last: no CPU effect)")
                    fn = build_train_step(variant_config(base, name)).step
                for _ in range(args.warmup * (4 if "compile" in name else 1)):
                    fn()
                sync(device)
                steps[name] = fn
                print(f"# {name}: set-up + warm-up {time.perf_counter() - t0:.1f} s", flush=True)
            except Exception as exc:  # a missing optional package or a failed compile: report, go on
                skipped[name] = f"{type(exc).__name__}: {exc}"[:300]
                print(f"# {name}: skipped ({skipped[name]})", flush=True)
        times: dict[str, list[float]] = {k: [] for k in steps}
        for r in range(args.rounds):
            for name in (list(steps) if r % 2 == 0 else list(steps)[::-1]):
                with Timer(device) as tm:
                    for _ in range(args.steps):
                        steps[name]()
                times[name].append(tm.seconds / args.steps)
        ref_net = ReferenceLoop(base, images, device).net
        flops = flops_per_step(ref_net, (args.batch, channels, size, size), device)
        gpu_name = torch.cuda.get_device_name(device) if device.type == "cuda" else None
        peak = peak_bf16_flops(gpu_name) if gpu_name else None
        med = {k: median(v) for k, v in times.items()}
        ips = {k: args.batch / v for k, v in med.items()}
        mfu = {k: (flops / v / peak if peak else None) for k, v in med.items()}
        result = {"model": args.model, "device": str(device), "gpu": gpu_name, "batch": args.batch,
                  "flops_per_step": flops, "peak_bf16_flops": peak, "s_per_step": med, "all_s_per_step": times,
                  "images_per_s": ips, "mfu": mfu, "skipped": skipped, "machine": machine(),
                  "ratio_to_reference": ({k: v / ips["reference-fp32"] for k, v in ips.items()}
                                         if "reference-fp32" in ips else {})}
        best = max((m for m in mfu.values() if m is not None), default=None)
        default = "ours-bf16-compile-cl" if "ours-bf16-compile-cl" in steps else next(iter(steps), None)
        if default and (best is None or best < args.mfu_goal) and device.type == "cuda":
            result["top_kernels"] = {default: top_kernels(steps[default], device)}
    print(f"# {machine()}\n# {args.model}, batch {args.batch}, {flops / 1e9:.1f} GFLOP/step (fwd+bwd), "
          f"{args.rounds} rounds x {args.steps} steps")
    for name in times:
        m = f"  MFU {mfu[name]:.1%}" if mfu[name] is not None else ""
        rel = result["ratio_to_reference"].get(name)
        print(f"{name:<22} {med[name] * 1000:9.2f} ms/step {ips[name]:10.1f} images/s"
              f"{f'  x{rel:.2f} of reference' if rel else ''}{m}")
    write_json(args.json, result)
    return result


if __name__ == "__main__":
    main()
