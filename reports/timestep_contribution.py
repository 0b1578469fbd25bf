# ---
# jupyter:
#   jupytext:
#     text_representation:
#       extension: .py
#       format_name: percent
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Which timesteps matter at inference?
#
# Seed paper (arXiv 2502.01990, Sec. 2.1, Fig. 3a): during reverse sampling, replace the model's
# x0 prediction by the true x0 of a held-out image inside a range of timesteps and measure the
# FID. The paper finds [1, 500] better than [500, 1000], [10, 100] better than [100, 500], and
# [1, 10] best, and concludes that "the timesteps closer to 0 contribute more".
#
# **On a super-resolution model, as the paper ran it.** The paper's model is guided-diffusion's
# ImageNet 64 -> 256 super-resolution model: its chain has the high-resolution image as its own
# target, so the injected x0 is the image the chain is heading to. Ours is the study's run
# `superres`: the study's UNet conditioned on a low-resolution copy of its target (average-pooled,
# upsampled back, concatenated to x_t), trained here; each held-out image's chain is conditioned
# on that image's own low-resolution copy, and that image is what the ranges inject. (On an
# unconditional model the injected image has nothing to do with the chain's own digit, and inside a
# range the residual to it only shrinks by the closed-form blend factor
# sqrt((1 - alpha_bar_exit) / (1 - alpha_bar_enter)): the FIDs then rank blend factors, not timesteps.
# That design is dropped.) The blend factor is still the contraction of a range that ends just
# above the final step ([1, 10]) on a deterministic chain: that arm's distance is the factor times
# "none"'s here too, by arithmetic; what "none"'s distance now is, is the model's own error to
# the image it was asked for.
#
# **The design is partly trivial.** The last reverse step outputs the x0 estimate itself (its
# posterior coefficients are c1 = 1 and c2 = 0, right-hand figure), so replacing x0 at the final
# step returns the held-out image byte for byte, and any range that contains the final step
# (the paper's [1, 500] and [1, 10]) returns the held-out set, whatever the model does anywhere
# else. Its FID is then the held-out set's FID, the floor, and says nothing about which
# timesteps matter. Here, therefore: the final step is taken out of every range; "final step
# only" is an arm of its own, the control that returns the held-out images; "none" is the
# super-resolution model alone; the chain holds several steps in every range; and every FID has
# a bootstrap interval over samples, paired across arms (the same seeds, held-out images and
# conditions in every arm). The RMS distance of each sample to the held-out image (its chain's
# own target) says how close an arm comes to it. A range matters beyond copying when it improves
# on "none" while staying measurably away from the copy.
#
# How we measure it, and where we deviate from the papers: `docs/methods.md#timestep-contribution`.

# %% tags=["parameters"]
contribution = "results/digits/analyses/contribution.json"
posterior = "results/digits/analyses/posterior.json"
summary = "results/digits/summary.json"
verdicts = "results/digits/verdicts.json"
results_dir = "results/digits"

# %%
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from IPython.display import Markdown, display

from timestep_lab.artifacts.io import read_json
from timestep_lab.reporting.notebook import setup, show_verdicts
from timestep_lab.artifacts.floor import FID_TOOL_ORDER, floor_record
from timestep_lab.reporting.regime import summary_floor

setup()
show_verdicts(verdicts, [])
res, post = read_json(contribution), read_json(posterior)
arms = {a["label"]: a for a in res["arms"]}
chain, label, n = res["chain"], res["label"], res["num_samples"]
floor = floor_record(summary_floor(summary))
TOOL = FID_TOOL_ORDER[0]


def name(a) -> str:
    if a["kind"] == "none":
        return "none (SR model alone)"
    if a["kind"] == "final":
        return "final step only (control)"
    return f"[{a['paper'][0]}, {a['paper'][1]}]"


def ci(d, fmt="{:.3g}") -> str:
    return f"{fmt.format(d['value'])} [{fmt.format(d['ci'][0])}, {fmt.format(d['ci'][1])}]"


cond = res["model"].get("conditioning") or {}
cparams = cond.get("params") or {}
display(Markdown(
    f"**Protocol.** The super-resolution model (run superres, conditioning {cond.get('name', '?')}: "
    f"a copy average-pooled by {cparams.get('factor', '?')}, upsampled {cparams.get('upsample', '?')}; "
    f"{res['model']['model_format']}, "
    + (f"{res['model']['nimg'] / 1000:.4g} kimg" if res["model"].get("nimg") else "pretrained") + "), "
    f"{chain['method'].upper()} with {chain['steps']} steps ({chain['spacing']} spacing, eta {chain['eta']}) of T = "
    f"{chain['num_timesteps']}; every range holds at least {chain['min_steps']} of them without the final step "
    f"(t = {chain['final_step']}). {n} samples per arm, sample i from seed i, conditioned on held-out image i's "
    f"low-resolution copy, with image i injected. Intervals: "
    f"{res['bootstrap']['interval']}, {res['bootstrap']['replicates']} replicates, {int(100 * res['bootstrap']['level'])}%."))
rows = []
for a in res["arms"]:
    rows.append({"arm": name(a), "replaced t (0-based)": f"[{a['replaced'][0]}, {a['replaced'][1]}]" if a["replaced"] else "–",
                 "chain steps replaced": a["chain_steps"], f"{label} [95% CI]": ci(a["fid_bootstrap"], "{:.2f}"),
                 "minus final-step control": ci(a["minus_final"], "{:+.2f}") if "minus_final" in a else "–",
                 "minus none": ci(a["minus_none"], "{:+.2f}") if "minus_none" in a else "–",
                 "RMS to the injected image [95% CI]": f"{a['rms_to_heldout']['mean']:.3f} "
                                                       f"[{a['rms_to_heldout']['ci'][0]:.3f}, {a['rms_to_heldout']['ci'][1]:.3f}]",
                 "exact copies": f"{100 * a['copies']:.0f}%"})
table = pd.DataFrame(rows).set_index("arm")
display(table)

# %%
fig, axes = plt.subplots(1, 3, figsize=(16, 4.3))
names = [name(a) for a in res["arms"]]
y = np.arange(len(names))
vals = np.array([a["fid_bootstrap"]["value"] for a in res["arms"]])
lo = np.array([a["fid_bootstrap"]["ci"][0] for a in res["arms"]])
hi = np.array([a["fid_bootstrap"]["ci"][1] for a in res["arms"]])
colors = ["C2" if a["kind"] == "final" else "C7" if a["kind"] == "none" else "C0" for a in res["arms"]]
ax = axes[0]
ax.barh(y, vals, color=colors)
ax.errorbar(vals, y, xerr=[vals - lo, hi - vals], fmt="none", ecolor="k", capsize=3)
if floor:
    ax.axvline(floor["value"], color="C2", ls="--", lw=1, label=f"held-out floor ({floor.get('num_samples')} samples)")
    ax.legend(fontsize=7)
ax.set_yticks(y, names)
ax.invert_yaxis()
ax.set_xlabel(f"{label} (95% bootstrap interval)")
ax.set_title(f"FID with the true x0 in a range ({n} samples per arm)", fontsize=9)
ax = axes[1]
rms = np.array([a["rms_to_heldout"]["mean"] for a in res["arms"]])
rlo = np.array([a["rms_to_heldout"]["ci"][0] for a in res["arms"]])
rhi = np.array([a["rms_to_heldout"]["ci"][1] for a in res["arms"]])
ax.barh(y, rms, color=colors)
ax.errorbar(rms, y, xerr=[rms - rlo, rhi - rms], fmt="none", ecolor="k", capsize=3)
ax.set_yticks(y, [""] * len(y))
ax.invert_yaxis()
ax.set_xlabel("RMS pixel distance to the injected held-out image, the chain's own target (images in [0, 1])")
ax.set_title("how close each arm comes to the image its chain is conditioned on", fontsize=9)
ax = axes[2]
t = np.array(post["t"])
ax.plot(t, post["c1"], label="c1: coefficient of x0")
ax.plot(t, post["c2"], label="c2: coefficient of x_t")
ax.set_xscale("symlog", linthresh=10)
ax.set_yscale("log")
ax.set_xlabel("t (timestep index, symlog; 0 = the final step)")
ax.set_ylabel("coefficient in the posterior mean (log)")
ax.set_title("posterior mean c1_t x0 + c2_t x_t (Fig. 3b)", fontsize=9)
ax.legend(fontsize=7)
plt.tight_layout()
plt.show()

# %%
files = {lab: Path(contribution).parent / "contribution" / lab / "samples.npz" for lab in arms}
if all(f.is_file() for f in files.values()):
    fig, axes = plt.subplots(len(arms), 1, figsize=(9, 0.75 * len(arms) + 0.4), squeeze=False)
    for ax, (lab, f) in zip(axes[:, 0], files.items()):
        with np.load(f) as z:
            imgs = z["images"][:16]
        strip = np.concatenate(list(np.pad(imgs[..., 0], [(0, 0), (1, 1), (1, 1)], constant_values=255)), axis=1)
        ax.imshow(strip, cmap="gray", vmin=0, vmax=255)
        ax.set_xticks([])
        ax.set_yticks([])
        ax.set_ylabel(name(arms[lab]), rotation=0, ha="right", fontsize=7)
    plt.suptitle("the same 16 seeds in every arm ('final step only' shows the held-out images themselves)", fontsize=9)
    plt.show()

# %% [markdown]
# ## What our numbers show

# %%
lines = []


def compare(a: str, b: str) -> None:
    A, B = arms.get(a), arms.get(b)
    if not A or not B:
        return
    fa, fb = A["fid_bootstrap"], B["fid_bootstrap"]
    overlap = not (fa["ci"][1] < fb["ci"][0] or fb["ci"][1] < fa["ci"][0])
    better = fa["value"] < fb["value"]
    lines.append(f"- {name(A)}: {ci(fa, '{:.2f}')} vs {name(B)}: {ci(fb, '{:.2f}')}: "
                 + (("lower, the paper's direction" if better else "higher, against the paper's direction")
                    + ("; the intervals overlap." if overlap else "; the intervals do not overlap.")))


compare("t1-500", "t500-1000")
compare("t10-100", "t100-500")
ranges = [a for a in res["arms"] if a["kind"] == "range"]
if ranges:
    best = min(ranges, key=lambda a: a["fid_bootstrap"]["value"])
    lines.append(f"- Lowest FID among the ranges: {name(best)} ({ci(best['fid_bootstrap'], '{:.2f}')}); the paper's best is "
                 "[1, 10].")
fin, none = arms["final"], arms["none"]
lines.append(f"- The control, final step only: {ci(fin['fid_bootstrap'], '{:.2f}')}, with {100 * fin['copies']:.0f}% exact "
             f"copies of the held-out images: the held-out set's own FID at {n} samples. The model alone: "
             f"{ci(none['fid_bootstrap'], '{:.2f}')}, {none['rms_to_heldout']['mean']:.3f} RMS from the images it was "
             f"conditioned on.")
ab_t, used = np.array(post["alpha_bar"]), list(chain["timesteps"])


def blend(a) -> float:
    """The contraction of the residual to the injected image over the arm's range (deterministic
    chain): sqrt((1 - alpha_bar at the step it leaves for) / (1 - alpha_bar at its highest step))."""
    inside = [i for i, u in enumerate(used) if a["replaced"][0] <= u <= a["replaced"][1]]
    exit_ab = ab_t[used[min(inside) - 1]] if min(inside) > 0 else 1.0
    return float(np.sqrt((1 - exit_ab) / (1 - ab_t[used[max(inside)]])))


for a in ranges:
    mf = a["minus_final"]
    ratio, f = a["rms_to_heldout"]["mean"] / max(none["rms_to_heldout"]["mean"], 1e-12), blend(a)
    lines.append(f"- {name(a)}: distance {ratio:.3f} x the model alone's, blend factor {f:.3f}"
                 + (" (equal within 5%: the replacement's own contraction, not a measure of these timesteps)."
                    if abs(ratio - f) <= 0.05 * f else "."))
    at_floor = mf["ci"][0] <= 0 <= mf["ci"][1]
    lines.append(f"- {name(a)} ({a['chain_steps']} steps replaced, final step excluded): {a['fid_bootstrap']['value']:.2f}, "
                 f"{mf['value']:+.2f} [{mf['ci'][0]:+.2f}, {mf['ci'][1]:+.2f}] against the control; RMS distance to the "
                 f"injected image {a['rms_to_heldout']['mean']:.3f}"
                 + (" (a copy, up to noise): trivially at the floor." if at_floor and a["rms_to_heldout"]["mean"] < 0.05
                    else ": indistinguishable from the control." if at_floor
                    else f"; {a['minus_none']['value']:+.2f} [{a['minus_none']['ci'][0]:+.2f}, "
                         f"{a['minus_none']['ci'][1]:+.2f}] against the model alone "
                         f"({100 * a['minus_none']['value'] / none['fid_bootstrap']['value']:+.0f}%)."))
c1, c2 = np.array(post["c1"]), np.array(post["c2"])
cross = int(t[c1 > c2].max()) if (c1 > c2).any() else None
lines.append(f"- The x0 coefficient exceeds the x_t coefficient only for t <= {cross}." if cross is not None
             else "- The x0 coefficient never exceeds the x_t coefficient.")
if floor:
    lines.append(f"- The study's held-out floor: {floor['value']:.2f} [{floor['ci'][0]:.2f}, {floor['ci'][1]:.2f}] at "
                 f"{floor.get('num_samples')} samples.")
else:
    lines.append("- Floor not computed in this study; the final-step control above is the held-out FID at this count.")
display(Markdown("\n".join(lines)))
