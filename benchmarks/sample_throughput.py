"""Images per second of batched DDPM and DDIM sampling: ours vs a plain reference loop, measured in one run.

    python benchmarks/sample_throughput.py                              # digits model, CPU, 256 images, 50 steps
    python benchmarks/sample_throughput.py --model cifar10 --n 16 --steps 10
    python benchmarks/sample_throughput.py --device cuda --model cifar10 --n 1000 --json out.json
    python benchmarks/sample_throughput.py --quick --json out.json      # CI: a few seconds, ratios rough

``ours``       :func:`timestep_lab.generate.sampling.sample_images` with a :class:`timestep_lab.generate.sampling.Denoiser`
               (as ``timestep_lab sample`` runs it): respaced DDPM ancestral (fixed-large variance) or
               DDIM (``--eta``, default 0), x0 clipped to [-1, 1] and eps recomputed from it, one noise
               generator *per sample* (seed ``i`` -> sample ``i`` whatever the batch size: the noise is
               drawn on the host per row and copied to the device), bf16 autocast on CUDA, uint8 NHWC out.
``reference``  :class:`ReferenceSampler`, written plainly below: the same network, the same respaced
               timesteps and update equations, x0 clipping, but one ``torch.Generator`` for the whole
               batch on the device (noise not reproducible per sample across batch sizes), fp32, uint8 out.

The network is the UNet of ``--model`` with its initial weights (throughput does not depend on
training). Each contender samples ``--n`` images in one batch per call; calls alternate over
``--rounds`` rounds (order flipped every round) after one warm-up call each, and the ratio is the
median over rounds of ours / reference images per second.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import Timer, base_parser, machine, median, write_json  # noqa: E402

from timestep_lab.components import build_diffusion, build_model, build_prediction  # noqa: E402
from timestep_lab.config import load_config  # noqa: E402
from timestep_lab.generate.sampling import Denoiser, sample_images  # noqa: E402

MODELS = {  # name -> (model overrides, image size, channels); as in benchmarks/train_step.py
    "digits": (["model.channels=16", "model.channel_mult=[1,2]", "model.num_res_blocks=1", "model.norm_groups=8"],
               8, 1),
    "mnist": (["model.channels=16", "model.channel_mult=[1,2,2]", "model.num_res_blocks=1", "model.norm_groups=8"],
              32, 1),
    "cifar10": (["model.channels=128", "model.channel_mult=[1,2,2,2]", "model.num_res_blocks=2",
                 "model.attention_resolutions=[16]", "model.dropout=0.1", "model.norm_groups=32"], 32, 3),
}
NUM_TIMESTEPS = 1000


class ReferenceSampler:
    """Plain batched DDPM / DDIM over ``steps`` evenly spaced timesteps of the linear schedule.

    With ``ab`` the respaced alpha_bar and ``ab_prev`` its predecessor (1 at the end)::

        x0_hat = clip((x - sqrt(1 - ab) eps_hat) / sqrt(ab)),  eps_hat = (x - sqrt(ab) x0_hat) / sqrt(1 - ab)
        DDPM:  x <- c1 x0_hat + c2 x + sqrt(beta) z,  beta = 1 - ab / ab_prev,
               c1 = sqrt(ab_prev) beta / (1 - ab),    c2 = sqrt(1 - beta) (1 - ab_prev) / (1 - ab)
        DDIM:  x <- sqrt(ab_prev) x0_hat + sqrt(1 - ab_prev - sigma^2) eps_hat + sigma z,
               sigma = eta sqrt((1 - ab_prev) / (1 - ab)) sqrt(1 - ab / ab_prev)
    """

    def __init__(self, net: torch.nn.Module, alpha_bar: torch.Tensor, steps: int, device: torch.device):
        self.net, self.device = net, device
        T = alpha_bar.numel()
        self.used = torch.unique(torch.round(torch.linspace(0, T - 1, min(steps, T), dtype=torch.float64)).long())
        self.ab = [float(a) for a in alpha_bar[self.used]]

    @torch.no_grad()
    def sample(self, n: int, shape: tuple[int, int, int], method: str, eta: float, seed: int = 0) -> np.ndarray:
        gen = torch.Generator(device=self.device).manual_seed(seed)
        x = torch.randn((n, *shape), generator=gen, device=self.device)
        for i in reversed(range(len(self.used))):
            ab, ab_prev = self.ab[i], (self.ab[i - 1] if i > 0 else 1.0)
            t = torch.full((n,), int(self.used[i]), device=self.device, dtype=torch.long)
            eps = self.net(x, t).float()
            x0 = ((x - math.sqrt(1 - ab) * eps) / math.sqrt(ab)).clamp(-1.0, 1.0)
            eps = (x - math.sqrt(ab) * x0) / math.sqrt(1 - ab)
            z = torch.randn(x.shape, generator=gen, device=self.device) if i > 0 else None
            if method == "ddpm":
                beta = 1.0 - ab / ab_prev
                x = (math.sqrt(ab_prev) * beta / (1 - ab)) * x0 + (math.sqrt(1 - beta) * (1 - ab_prev) / (1 - ab)) * x
                if z is not None:
                    x = x + math.sqrt(beta) * z
            else:
                sigma = eta * math.sqrt((1 - ab_prev) / (1 - ab)) * math.sqrt(1 - ab / ab_prev)
                x = math.sqrt(ab_prev) * x0 + math.sqrt(max(1 - ab_prev - sigma**2, 0.0)) * eps
                if z is not None and sigma > 0:
                    x = x + sigma * z
        return ((x + 1.0) * 127.5).round().clamp(0, 255).to(torch.uint8).permute(0, 2, 3, 1).cpu().numpy()


def main(argv: list[str] | None = None) -> dict:
    p = base_parser(__doc__.splitlines()[0])
    p.add_argument("--model", choices=sorted(MODELS), default="digits")
    p.add_argument("--n", type=int, default=256, help="images per call (one batch)")
    p.add_argument("--steps", type=int, default=50, help="reverse steps (respaced from T = 1000)")
    p.add_argument("--eta", type=float, default=0.0, help="DDIM eta")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--methods", nargs="+", default=["ddpm", "ddim"], choices=["ddpm", "ddim"])
    args = p.parse_args(argv)
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        p.error("--device cuda but CUDA is not available on this machine")
    if args.quick:
        args.n, args.steps, args.rounds = min(args.n, 32), min(args.steps, 4), 2
    torch.set_num_threads(args.threads)

    overrides, size, channels = MODELS[args.model]
    cfg = load_config(None, [*overrides, f"diffusion.num_timesteps={NUM_TIMESTEPS}", "diffusion.prediction=eps"])
    torch.manual_seed(0)
    net = build_model(cfg, size, channels).to(device).eval()
    diffusion = build_diffusion(cfg)
    autocast = (lambda: torch.autocast("cuda", dtype=torch.bfloat16)) if device.type == "cuda" else None
    denoise = Denoiser(net, build_prediction(cfg), diffusion, clip_x0=True, autocast=autocast)
    ref = ReferenceSampler(net, diffusion.alpha_bar, args.steps, device)
    shape = (channels, size, size)
    seeds = list(range(args.n))

    def ours(method: str) -> np.ndarray:
        return sample_images(denoise, diffusion, image_shape=shape, seeds=seeds, method=method, steps=args.steps,
                             eta=args.eta if method == "ddim" else 1.0, batch_size=args.n, device=device)

    def reference(method: str) -> np.ndarray:
        return ref.sample(args.n, shape, method, args.eta)

    contenders = {"ours": ours, "reference": reference}
    result: dict = {"model": args.model, "device": str(device), "n": args.n, "steps": len(ref.used), "eta": args.eta,
                    "rounds": args.rounds, "threads": torch.get_num_threads(), "machine": machine()}
    print(f"# {machine()}")
    print(f"# {args.model} UNet, {args.n} images per call, {len(ref.used)} steps, {args.device}, {args.rounds} rounds")
    for method in args.methods:
        for fn in contenders.values():  # warm-up (allocator, cuDNN)
            fn(method)
        times: dict[str, list[float]] = {k: [] for k in contenders}
        for r in range(args.rounds):
            for name in (list(contenders) if r % 2 == 0 else list(contenders)[::-1]):
                with Timer(device) as tm:
                    contenders[name](method)
                times[name].append(tm.seconds)
        ratio = median([rt / o for o, rt in zip(times["ours"], times["reference"])])  # ours / reference images/s
        ips = {k: args.n / median(v) for k, v in times.items()}
        result[method] = {"images_per_s": ips, "all_s": times, "ratio_images_per_s": ratio}
        print(f"{method}: ours {ips['ours']:9.1f} images/s, reference {ips['reference']:9.1f} images/s, "
              f"ours / reference = {ratio:.3f}")
    result["ratio_images_per_s"] = {m: result[m]["ratio_images_per_s"] for m in args.methods}
    write_json(args.json, result)
    return result


if __name__ == "__main__":
    main()
