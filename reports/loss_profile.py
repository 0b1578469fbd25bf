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
# # How unequal are the per-timestep losses?
#
# Seed paper (Xie & Agam, arXiv 2502.01990) Fig. 1a and Table 1: the eps-prediction MSE of a
# trained model varies by orders of magnitude across timesteps, so the paper splits t into 10
# consecutive *slots* of equal summed loss. The adaptive-sampler paper (arXiv 2411.09998) adds
# that the gradient variance is also very unequal across t. The profile is measured on a fixed
# bank of images and noise (the same for every model).
#
# No paper in this family separates the loss a model *cannot* avoid from the loss it has not yet
# learned. For a finite training set the best possible denoiser is known in closed form: its
# E[x0 | x_t] is a softmax-weighted mean of the training images. Its loss on the same bank and
# noise is the floor under every model's loss at each t; the model's loss above it is its
# *excess* (learnable) loss. Slots are split on the total loss, as the paper does, and on the
# excess beside them.
#
# That floor scores the training images with a denoiser that holds them: near t = 0 it finds the
# image x_t came from, so it is a *memorisation* floor. Beside it, the **held-out floor**: the same
# closed-form denoiser leaving each bank image out (the posterior mean of the other training
# images), what it scores on an image it never saw. A model below the held-out floor does better
# than copying its nearest training image; "excess" there is not a deficit against anything a
# generalising model can reach.
#
# How we measure it, and where we deviate from the papers: `docs/methods.md#loss-profile`.

# %% tags=["parameters"]
profile = "results/digits/analyses/profiles/reference.json"
slots = "results/digits/analyses/slots.json"
optimal = ""
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

setup()
show_verdicts(verdicts, ["table1_pretrained"])
prof, sl = read_json(profile), read_json(slots)
opt = read_json(optimal) if optimal and Path(optimal).is_file() else None
t = np.array(prof["timesteps"])
T = prof["T"]
eps = np.array(prof["eps_mse"])
n_slots = len(sl["slots"])
nimg = (prof.get("model") or {}).get("nimg")
display(Markdown(f"Model `{prof.get('model', {}).get('path', '?')}` ({prof.get('prediction', 'eps')}-prediction"
                 + (f", trained on {nimg / 1000:.4g} kimg" if nimg else "") + f"), T = {T}, {prof['num_images']} bank "
                 f"images, every {prof['stride']}th timestep, seed {prof['seed']}."
                 + (f" Optimal denoiser of the {opt['model']['train_images']} training images on the same bank and noise."
                    if opt else " The optimal denoiser was not profiled in this study (analyses.loss_profile.optimal).")))
floor = np.array(opt["eps_mse"]) if opt else None
excess = eps - floor if opt else None
held = np.array(opt["heldout"]["eps_mse"]) if opt and opt.get("heldout") else None  # leave-one-out floor

# %%
fig, axes = plt.subplots(1, 2, figsize=(13, 4.4))
ax = axes[0]
ax.plot(t, eps, lw=1.8, label="model: eps-MSE")
ax.fill_between(t, eps - np.array(prof["eps_mse_sem"]), eps + np.array(prof["eps_mse_sem"]), alpha=0.25)
if opt:
    ax.plot(t, np.maximum(floor, 1e-8), lw=1.5, color="C2", label="optimal denoiser (floor; clipped at 1e-8)")
    ax.plot(t, np.maximum(excess, 1e-8), lw=1.2, ls="--", color="C3", label="excess = model - floor")
if held is not None:
    ax.plot(t, np.maximum(held, 1e-8), lw=1.5, ls=":", color="C2", label="optimal denoiser, held out (leave-one-out)")
for i, (lo, hi) in enumerate(sl["slots"]):
    ax.axvspan(lo, hi + 1, color=f"C{i % 2 + 4}", alpha=0.08)
ax.set_yscale("log")
ax.set_xlabel("t (timestep index, 0 = least noisy)")
ax.set_ylabel("eps-MSE per pixel (eps ~ N(0, 1); log)")
ax.set_title(f"eps-prediction MSE per timestep; shading = our {n_slots} slots (total loss)", fontsize=9)
ax.legend(fontsize=8)
ax = axes[1]
ax.plot(t, prof["vlb_bpd"], color="C1")
ax.set_yscale("log")
ax.set_xlabel("t (timestep index)")
ax.set_ylabel("VLB term (bits/dim, log)")
ax.set_title("per-timestep variational bound term", fontsize=9)
plt.tight_layout()
plt.show()

# %% [markdown]
# ## Gradient noise across timesteps (2411.09998)
# The trace of the single-sample gradients' covariance, `tr Cov(g) = E ||g - E g||^2`, per t: the
# noise an SGD step at that t carries, the quantity a variance-reducing timestep sampler is about.
# Beside it `||E g||^2`, the signal. (The variance of the gradient *norm*, shown before, is not
# it: gradients of equal norm pointing every way have no norm variance and the largest noise.)

# %%
g = prof.get("grad") or {}
trace = g.get("cov_trace")
if g.get("timesteps") and trace:
    fig, ax = plt.subplots(figsize=(7, 3.8))
    ax.plot(g["timesteps"], np.maximum(trace, 1e-30), "o-", label="tr Cov(g) (noise)")
    ax.plot(g["timesteps"], np.maximum(g["mean_sq_norm"], 1e-30), "s--", label="||E g||^2 (signal)")
    ax.set_yscale("log")
    ax.set_xlabel("t (timestep index)")
    ax.set_ylabel("squared gradient norm (log)")
    ax.set_title(f"{g['samples']} single-sample gradients per timestep")
    ax.legend(fontsize=8)
    plt.show()
    gv = pd.DataFrame({"t": g["timesteps"], "tr Cov(g)": trace, "||E g||^2": g["mean_sq_norm"],
                       "grad norm mean": g["norm_mean"]})
    display(gv.set_index("t").T.style.format("{:.3g}"))
elif g.get("timesteps"):
    display(Markdown("_This profile was written before the covariance trace was measured (it has the gradient-norm "
                     "variance only, which is not the gradient noise): rerun the profile._"))
else:
    display(Markdown("_Gradient variance not measured in this study (analyses.loss_profile.grad_timesteps = 0)._"))

# %% [markdown]
# ## Our slots beside the paper's Table 1
# Slots of equal summed total loss (the paper's split, the one the fine-tunes use) and, beside
# them, of equal summed excess loss above the optimal denoiser.

# %%
paper = sl["paper_slots"]
scaled = sl.get("paper_slots_scaled")
ex = sl.get("excess")
rows = []
for i in range(n_slots):
    row = {"slot": i + 1, "ours (total loss)": f"[{sl['slots'][i][0]}, {sl['slots'][i][1]}]",
           "share of the total": sl["sums"][i] / sl["total"]}
    if ex:
        row["ours (excess loss)"] = f"[{ex['slots'][i][0]}, {ex['slots'][i][1]}]"
    if i < len(paper):
        row["paper (guided-diffusion ImageNet-256, T=1000)"] = f"[{paper[i][0]}, {paper[i][1]}]"
        if scaled:
            row[f"paper scaled to T={T}"] = f"[{scaled[i][0]}, {scaled[i][1]}]"
    rows.append(row)
display(pd.DataFrame(rows).set_index("slot").style.format({"share of the total": "{:.3f}"}))

# %% [markdown]
# ## What our numbers show

# %%
ratio = eps.max() / max(eps.min(), 1e-12)
first_hi = sl["slots"][0][1]
paper_first = paper[0][1] * T / 1000
lines = [
    f"- The eps-MSE ranges from {eps.min():.3g} (t = {t[eps.argmin()]}) to {eps.max():.3g} (t = {t[eps.argmax()]}): "
    f"a ratio of {ratio:.0f} ({np.log10(ratio):.1f} orders of magnitude). The paper reports differences of several "
    "orders of magnitude.",
    f"- Our first slot (total loss) ends at t = {first_hi} ({(first_hi + 1) / T:.1%} of the timesteps); the paper's first "
    f"slot ends at t = 4 of 1000 ({paper_first:.1f} at our T). "
    + ("Like the paper, the loss is concentrated near t = 0." if (first_hi + 1) / T < 0.1 else
       "Unlike the paper, our loss is not concentrated near t = 0: slots are wide at the start."),
]
if opt:
    share = excess / np.where(eps > 0, eps, np.nan)
    near0 = t < T / 10
    top = t >= 3 * T / 4
    lines.append(f"- The optimal denoiser's eps-MSE on the training images is at most {floor[near0].max():.2g} for "
                 f"t < {T // 10}: there x_t still identifies its training image, so a model that reproduced the training "
                 f"set exactly would have no loss. The model's {eps[near0].mean():.3g} there (mean) is "
                 f"{100 * np.nanmean(share[near0]):.0f}% above that memorisation floor.")
    if held is not None:
        below = eps[near0] < held[near0]
        lines.append(f"- Held out (leave-one-out), the same denoiser scores {held[0]:.3g} at t = {t[0]} and "
                     f"{held[near0].mean():.3g} on average for t < {T // 10}, against the model's {eps[0]:.3g} and "
                     f"{eps[near0].mean():.3g}: the model is below the held-out floor at {below.sum()} of "
                     f"{near0.sum()} of those timesteps. "
                     + ("Its loss near t = 0 is not a deficit against a generalising denoiser: the memorisation floor "
                        "is what makes it look like 100% excess." if below.mean() > 0.5 else
                        "Its loss there is above both floors: model error on either reading."))
    lines.append(f"- For t >= {3 * T // 4} the model's loss ({eps[top].min():.3g} to {eps[top].max():.3g}) is "
                 f"{(eps[top] / np.maximum(floor[top], 1e-300)).min():.0f}x to "
                 f"{(eps[top] / np.maximum(floor[top], 1e-300)).max():.0f}x the optimum ({floor[top].min():.2g} to "
                 f"{floor[top].max():.2g}): the plateau there is the network's error, not the data's.")
    k = int(np.argmin(np.where(floor > 0, eps / np.maximum(floor, 1e-300), np.inf)))
    lines.append(f"- The model is closest to the optimum at t = {t[k]} ({eps[k] / floor[k]:.2g}x); the optimum itself "
                 f"peaks at t = {t[floor.argmax()]} ({floor.max():.3g}).")
    if ex:
        same = sum(a == b for a, b in zip(map(tuple, ex["slots"]), map(tuple, sl["slots"])))
        lines.append(f"- On the excess loss the first slot ends at t = {ex['slots'][0][1]} and the last starts at "
                     f"t = {ex['slots'][-1][0]} (total loss: {first_hi} and {sl['slots'][-1][0]}); {same} of "
                     f"{n_slots} slots are the same. The excess is {100 * ex['share_of_total']:.1f}% of the total "
                     "summed loss.")
if g.get("timesteps") and trace:
    k = int(np.argmax(trace))
    lines.append(f"- The gradient noise tr Cov(g) is largest at t = {g['timesteps'][k]} ({max(trace):.3g}, "
                 f"{max(trace) / max(min(trace), 1e-30):.0f}x its smallest value, over {g['samples']} single-sample "
                 "gradients per t); 2411.09998 reports the highest variance at early (low-t) timesteps.")
display(Markdown("\n".join(lines)))
