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
# # Same noise, same image? And momentum decay
#
# arXiv 2404.07946 observes that diffusion models trained from different initialisations, and
# even different architectures, produce very similar images from the same initial noise. Here
# models trained from different seeds and one of a different width sample with exactly the same
# seeds (initial noise and every step's noise). We compare the distance between *paired*
# samples (same seed) with *unpaired* ones (different seeds). The paper's momentum-decay
# strategy (reconstruction: Adam's beta1 decays linearly; by default the learning rate is left
# alone, a second arm adds the SGD-style compensation, docs/methods.md §4.2) is compared with the
# constant-momentum run of the same seed, paired over seeds.
#
# How we measure it, and where we deviate from the papers: `docs/methods.md#consistency`.

# %% tags=["parameters"]
consistency = "results/digits/analyses/consistency.json"
metrics_csv = "results/digits/metrics.csv"
runs_csv = "results/digits/runs.csv"
verdicts = "results/digits/verdicts.json"
results_dir = "results/digits"
group = "consistency"

# %%
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from IPython.display import Markdown, display

from timestep_lab.io import read_json
from timestep_lab.reporting.notebook import load_study, setup, show_comparisons, show_verdicts

setup()
show_verdicts(verdicts, ["same_noise_same_image", "momentum_decay", "momentum_decay_compensated"])
study = load_study(group, metrics_csv, runs_csv)
res = read_json(consistency)
rows = []
for p in res["pairs"]:
    row = {"a": p["a"], "b": p["b"], "pixel: paired": p["pixel"]["paired"], "pixel: unpaired": p["pixel"]["unpaired"],
           "pixel ratio": p["pixel"]["ratio"]}
    if p.get("feature"):
        row.update({"feature: paired": p["feature"]["paired"], "feature: unpaired": p["feature"]["unpaired"],
                    "feature ratio": p["feature"]["ratio"]})
    rows.append(row)
table = pd.DataFrame(rows)
space = f" (and Euclidean distance in {res['feature_extractor']} feature space)" if res.get("feature_extractor") else ""
display(Markdown(f"RMS pixel distance in [0, 1] units{space}; ratio = paired / unpaired, lower means more consistent."))
display(table.style.format({c: "{:.3f}" for c in table.columns if c not in ("a", "b")}))

# %%
sets = res["sets"]
n_show = 12


def strip(images: np.ndarray) -> np.ndarray:
    """A row of images with a 1-pixel white border (grey or RGB)."""
    if images.shape[-1] == 1:
        images = images[..., 0]
    pad = [(0, 0), (1, 1), (1, 1)] + [(0, 0)] * (images.ndim - 3)
    return np.concatenate(list(np.pad(images, pad, constant_values=255)), axis=1)


fig, axes = plt.subplots(len(sets), 1, figsize=(n_show * 0.7, 0.85 * len(sets) + 0.3), squeeze=False)
for ax, (name, path) in zip(axes[:, 0], sets.items()):
    with np.load(path) as z:
        ax.imshow(strip(z["images"][:n_show]), cmap="gray", vmin=0, vmax=255)
    ax.set_yticks([])
    ax.set_xticks([])
    ax.set_ylabel(name, rotation=0, ha="right", fontsize=7)
plt.suptitle("the same 12 seeds, one row per model", fontsize=10)
plt.show()

# %% [markdown]
# ## Momentum decay: FID against images seen

# %%
runs = study.runs
prog, final = study.fid("progress", "torch-fidelity"), study.fid("final", "torch-fidelity")
md_runs = runs.loc[runs["optim_schedule"] == "momentum_decay", "run"].tolist()
lines_md = []
if md_runs:
    seed = runs.loc[runs["run"].isin(md_runs), "seed"].min()
    shown = runs[(runs["seed"] == seed) & runs["run"].isin(md_runs)]["run"].tolist()
    width = runs.loc[runs["run"] == shown[0], "channels"].iloc[0]
    base = runs[(runs["seed"] == seed) & (runs["optim_schedule"] == "constant") & (runs["channels"] == width)]["run"]
    fig, ax = plt.subplots(figsize=(7, 4))
    for r in shown + base.tolist()[:1]:
        d = prog[prog["run"] == r].sort_values("kimg")
        lab = "constant momentum" if r in set(base) else ("decay + lr compensation" if "compensate" in r else "beta1 decay")
        ax.plot(d["kimg"], d["value"], marker="o", label=lab)
    ax.set_xlabel("images seen (kimg)")
    ax.set_ylabel("FID (torch-fidelity)")
    ax.set_yscale("log")
    ax.set_title(f"seed {seed}")
    ax.legend()
    plt.show()

# %% [markdown]
# Every arm of the group against the constant-momentum baseline, paired by seed (95% t-interval,
# Holm across arms; docs/methods.md §9). The width arm differs in its network, not its optimizer.

# %%
comparisons = show_comparisons(study)
for _, r in comparisons.iterrows():
    if "momentum" in r["arm"]:
        lines_md.append(f"- {r['arm']}: final FID {r['final FID']} ({r[f'{study.label} difference [95% CI]']}).")

# %% [markdown]
# ## What our numbers show

# %%
lines = []
for _, r in table.iterrows():
    lines.append(f"- {r['a']} vs {r['b']}: paired samples are {1 / r['pixel ratio']:.1f}x closer than unpaired ones in pixels"
                 + (f", {1 / r['feature ratio']:.1f}x in features." if "feature ratio" in r and r["feature ratio"] == r["feature ratio"] else "."))
mean_ratio = table["pixel ratio"].mean() if len(table) else float("nan")
lines.append(f"- Mean paired/unpaired ratio {mean_ratio:.2f} over {len(table)} model pairs; the verdict at the top "
             "tests paired < unpaired with a 95% interval over pairs (optimistic: pairs share models, "
             "docs/methods.md §9.5).")
display(Markdown("\n".join(lines + lines_md)))
