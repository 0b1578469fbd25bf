"""Time of one FID-50K on this machine: 50,000 samples plus two Inception feature passes.

    python benchmarks/fid50k_time.py --device cuda --sample-json sample_ddpm.json --json out.json
    python benchmarks/fid50k_time.py --quick --json out.json

The GPU machine has no network, so no Inception weights: the feature pass is timed on
torchvision's Inception-v3 *architecture* with random weights (the same layers and FLOPs as
torch-fidelity's and clean-fid's FID Inception) on random uint8 images resized to 299x299, fp32,
batch ``--batch``. The sampling part comes from a ``sample_throughput.py`` JSON (its ``ours``
images/s for ``--method``, rescaled from the steps it ran to ``--steps``: a reverse step costs
the same whatever the step count). FID-50K time = 50,000 / sampling images/s + 2 x 50,000 /
feature images/s (torch-fidelity and clean-fid each extract their own features).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import Timer, base_parser, machine, median, write_json  # noqa: E402

N_FID = 50_000
TOOLS = 2


def main(argv: list[str] | None = None) -> dict:
    p = base_parser(__doc__.splitlines()[0])
    p.add_argument("--batch", type=int, default=500)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--sample-json", type=Path, default=None, help="sample_throughput.py output")
    p.add_argument("--method", default="ddpm", choices=["ddpm", "ddim"])
    p.add_argument("--steps", type=int, default=1000, help="reverse steps of the FID protocol")
    args = p.parse_args(argv)
    if args.quick:
        args.batch, args.rounds = 2, 1
    torch.set_num_threads(args.threads)
    import torchvision

    device = torch.device(args.device)
    net = torchvision.models.inception_v3(weights=None, aux_logits=False, init_weights=False).to(device).eval()
    net.fc = torch.nn.Identity()  # 2048-d pool features, as FID uses
    x = torch.randint(0, 256, (args.batch, 3, 32, 32), dtype=torch.uint8, device=device)

    @torch.no_grad()
    def features() -> None:
        y = F.interpolate(x.float() / 127.5 - 1.0, size=(299, 299), mode="bilinear", align_corners=False)
        net(y)

    features()
    times = []
    for _ in range(args.rounds):
        with Timer(device) as tm:
            features()
        times.append(tm.seconds)
    feat_ips = args.batch / median(times)
    result = {"device": str(device), "batch": args.batch, "feature_images_per_s": feat_ips,
              "feature_s_per_50k_per_tool": N_FID / feat_ips, "machine": machine()}
    if args.sample_json and args.sample_json.exists():
        s = json.loads(args.sample_json.read_text())
        ips = s[args.method]["images_per_s"]["ours"] * s["steps"] / args.steps
        result.update({"sample_method": args.method, "sample_steps": args.steps, "sample_images_per_s": ips,
                       "sample_s_per_50k": N_FID / ips,
                       "fid50k_s": N_FID / ips + TOOLS * N_FID / feat_ips})
    print(f"# {machine()}\nInception-v3 features: {feat_ips:.1f} images/s ({N_FID / feat_ips:.0f} s per 50k per tool)")
    if "fid50k_s" in result:
        print(f"FID-50K ({args.method}-{args.steps}): sampling {result['sample_s_per_50k'] / 3600:.2f} h + features "
              f"{TOOLS * N_FID / feat_ips / 60:.1f} min = {result['fid50k_s'] / 3600:.2f} h")
    write_json(args.json, result)
    return result


if __name__ == "__main__":
    main()
