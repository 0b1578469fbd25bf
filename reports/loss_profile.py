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
# How we measure it, and where we deviate from the papers: `docs/methods.md#loss-profile`.

# %% tags=["parameters"]
profile = "results/digits/analyses/profiles/reference.json"
slots = "results/digits/analyses/slots.json"
verdicts = "results/digits/verdicts.json"
results_dir = "results/digits"

# %%
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from IPython.display import Markdown, display

from timestep_lab.io import read_json
from timestep_lab.reporting.notebook import setup, show_verdicts

setup()
show_verdicts(verdicts, ["table1_pretrained"])
prof, sl = read_json(profile), read_json(slots)
t = np.array(prof["timesteps"])
T = prof["T"]
display(Markdown(f"Model `{prof.get('model', {}).get('path', '?')}` ({prof.get('prediction', 'eps')}-prediction), "
                 f"T = {T}, {prof['num_images']} bank images, every {prof['stride']}th timestep, seed {prof['seed']}."))

# %%
fig, axes = plt.subplots(1, 2, figsize=(12, 4.2))
ax = axes[0]
ax.plot(t, prof["eps_mse"], lw=1.8, label="eps-MSE")
ax.fill_between(t, np.array(prof["eps_mse"]) - np.array(prof["eps_mse_sem"]),
                np.array(prof["eps_mse"]) + np.array(prof["eps_mse_sem"]), alpha=0.25)
for i, (lo, hi) in enumerate(sl["slots"]):
    ax.axvspan(lo, hi + 1, color=f"C{i % 2 + 2}", alpha=0.08)
ax.set_yscale("log")
ax.set_xlabel("t (0 = least noisy)")
ax.set_ylabel("eps-MSE (log)")
ax.set_title("eps-prediction MSE per timestep; shading = our 10 slots")
ax = axes[1]
ax.plot(t, prof["vlb_bpd"], color="C1")
ax.set_yscale("log")
ax.set_xlabel("t")
ax.set_ylabel("VLB term (bits/dim, log)")
ax.set_title("per-timestep variational bound term")
plt.tight_layout()
plt.show()

# %% [markdown]
# ## Gradient-norm variance across timesteps (2411.09998)

# %%
g = prof.get("grad") or {}
if g.get("timesteps"):
    fig, ax = plt.subplots(figsize=(7, 3.8))
    ax.errorbar(g["timesteps"], g["norm_mean"], yerr=np.sqrt(g["norm_var"]), fmt="o-", capsize=3, label="mean ± sd")
    ax.set_yscale("log")
    ax.set_xlabel("t")
    ax.set_ylabel("per-sample gradient norm")
    ax.set_title(f"{g['samples']} single-sample gradients per timestep")
    plt.show()
    gv = pd.DataFrame({"t": g["timesteps"], "grad norm mean": g["norm_mean"], "grad norm variance": g["norm_var"]})
    display(gv.set_index("t").T.style.format("{:.3g}"))
else:
    display(Markdown("_Gradient variance not measured in this study (analyses.loss_profile.grad_timesteps = 0)._"))

# %% [markdown]
# ## Our slots beside the paper's Table 1

# %%
paper = sl["paper_slots"]
scaled = sl.get("paper_slots_scaled")
rows = []
for i in range(len(sl["slots"])):
    row = {"slot": i + 1, "ours": f"[{sl['slots'][i][0]}, {sl['slots'][i][1]}]",
           "our share of the loss": sl["sums"][i] / sl["total"]}
    if i < len(paper):
        row["paper (guided-diffusion ImageNet-256, T=1000)"] = f"[{paper[i][0]}, {paper[i][1]}]"
        if scaled:
            row[f"paper scaled to T={T}"] = f"[{scaled[i][0]}, {scaled[i][1]}]"
    rows.append(row)
display(pd.DataFrame(rows).set_index("slot").style.format({"our share of the loss": "{:.3f}"}))

# %% [markdown]
# ## What our numbers show

# %%
eps = np.array(prof["eps_mse"])
ratio = eps.max() / max(eps.min(), 1e-12)
first_hi = sl["slots"][0][1]
paper_first = paper[0][1] * T / 1000
lines = [
    f"- The eps-MSE ranges from {eps.min():.3g} to {eps.max():.3g}: a ratio of {ratio:.0f} "
    f"({np.log10(ratio):.1f} orders of magnitude). The paper reports differences of several orders of magnitude.",
    f"- The largest loss is at t = {t[eps.argmax()]} and the smallest at t = {t[eps.argmin()]}.",
    f"- Our first slot ends at t = {first_hi} ({(first_hi + 1) / T:.1%} of the timesteps); the paper's first slot "
    f"ends at t = 4 of 1000 ({paper_first:.1f} at our T). "
    + ("Like the paper, the loss is concentrated near t = 0." if (first_hi + 1) / T < 0.1 else
       "Unlike the paper, our loss is not concentrated near t = 0: slots are wide at the start."),
]
if g.get("timesteps"):
    k = int(np.argmax(g["norm_var"]))
    lines.append(f"- The gradient-norm variance is largest at t = {g['timesteps'][k]} "
                 f"({max(g['norm_var']) / max(min(g['norm_var']), 1e-30):.0f}x its smallest value); 2411.09998 reports "
                 "the highest variance at early (low-t) timesteps.")
display(Markdown("\n".join(lines)))
