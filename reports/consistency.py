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
# strategy (reconstruction: Adam's beta1 decays linearly, with learning-rate compensation) is
# compared against the constant-momentum run of the same seed.
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
from timestep_lab.reporting.notebook import load_study, setup, show_verdicts

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
display(Markdown("RMS pixel distance in [0, 1] units (and in digits-CNN feature space); ratio = paired / unpaired, "
                 "lower means more consistent."))
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
    md = md_runs[0]
    seed = runs.loc[runs["run"] == md, "seed"].iloc[0]
    same = runs[(runs["seed"] == seed) & (runs["optim_schedule"] == "constant")
                & (runs["channels"] == runs.loc[runs["run"] == md, "channels"].iloc[0])]
    base = same["run"].tolist()
    fig, ax = plt.subplots(figsize=(7, 4))
    for r, lab in [(md, "momentum decay")] + [(b, "constant momentum") for b in base[:1]]:
        d = prog[prog["run"] == r].sort_values("kimg")
        ax.plot(d["kimg"], d["value"], marker="o", label=lab)
    ax.set_xlabel("images seen (kimg)")
    ax.set_ylabel("FID (torch-fidelity)")
    ax.set_yscale("log")
    ax.legend()
    plt.show()
    if base:
        fm = final.loc[final["run"] == md, "value"].mean()
        fb = final.loc[final["run"] == base[0], "value"].mean()
        lines_md.append(f"- Final FID with momentum decay {fm:.2f} vs {fb:.2f} with constant momentum (same seed): "
                        + ("decay helps here." if fm < fb else "decay does not help here.")
                        + " The paper reports faster convergence (reconstruction; unverified details).")

# %% [markdown]
# ## What our numbers show

# %%
lines = []
for _, r in table.iterrows():
    lines.append(f"- {r['a']} vs {r['b']}: paired samples are {1 / r['pixel ratio']:.1f}x closer than unpaired ones in pixels"
                 + (f", {1 / r['feature ratio']:.1f}x in features." if "feature ratio" in r and r["feature ratio"] == r["feature ratio"] else "."))
mean_ratio = table["pixel ratio"].mean() if len(table) else float("nan")
lines.append(f"- Mean paired/unpaired ratio {mean_ratio:.2f}: "
             + ("the same noise gives clearly similar images, as 2404.07946 claims." if mean_ratio < 0.7
                else "the consistency effect is weak at this scale."))
display(Markdown("\n".join(lines + lines_md)))
