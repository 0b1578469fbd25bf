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
# # Does training one slot undo the others?
#
# Seed paper (arXiv 2502.01990) Fig. 2: starting from the pretrained model, fine-tune only on the
# timesteps of one slot (the paper's slots 3, 5, 7 and 9), then measure the loss profile again.
# Each cell is the relative change of the evaluated slot's summed eps-MSE,
# `(after - before) / before`; red means the slot got worse.
#
# Any fine-tuning at a given learning rate perturbs a model, so every seed also fine-tunes the
# reference on *uniform* t with the same budget, learning rate and seed (the control). The claim
# is tested on the change relative to that control, paired over seeds (docs/methods.md §3.2, §9).
#
# How we measure it, and where we deviate from the papers: `docs/methods.md#slot-finetune`.

# %% tags=["parameters"]
interference = "results/digits/analyses/interference.json"
interference_control = "results/digits/analyses/interference_control.json"
slots = "results/digits/analyses/slots.json"
verdicts = "results/digits/verdicts.json"
results_dir = "results/digits"

# %%
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from IPython.display import Markdown, display

from timestep_lab.io import read_json
from timestep_lab.reporting.notebook import setup, show_verdicts

setup(grid=False)  # heatmaps: grid lines would cut through the cells
show_verdicts(verdicts, ["slot_interference", "table1_pretrained"])


def heatmap(m, trained, evaluated, title, label):
    lim = np.nanmax(np.abs(m)) or 1.0
    fig, ax = plt.subplots(figsize=(1.0 + 0.75 * len(evaluated), 1.2 + 0.6 * len(trained)))
    im = ax.imshow(100 * m, cmap="RdBu_r", vmin=-100 * lim, vmax=100 * lim, aspect="auto")
    ax.set_xticks(range(len(evaluated)), [str(e) for e in evaluated])
    ax.set_yticks(range(len(trained)), [str(k) for k in trained])
    ax.set_xlabel("evaluated slot")
    ax.set_ylabel("fine-tuned slot")
    for i in range(m.shape[0]):
        for j in range(m.shape[1]):
            ax.text(j, i, f"{100 * m[i, j]:+.0f}", ha="center", va="center", fontsize=8)
    fig.colorbar(im, ax=ax, label=label)
    plt.title(title)
    plt.show()


# %% [markdown]
# ## Against the uniform-t control, paired over seeds
# `E_s[k, j] = (L_j(fine-tuned on slot k) - L_j(control)) / L_j(reference)` for seed `s`: the
# change that training on slot k causes beyond what the same fine-tuning on uniform t causes.
# Cells show the mean over seeds; the table gives each entry's 95% t-interval over seeds.

# %%
ctl = read_json(interference_control) if interference_control and Path(interference_control).is_file() else None
if ctl is None:
    display(Markdown("_This study has no uniform-t control fine-tunes: the interference claim is not tested._"))
else:
    tr, ev = ctl["trained"], ctl["evaluated"]
    excess = np.array([[np.nan if e["diff"] is None else e["diff"] for e in row] for row in ctl["excess"]], float)
    heatmap(excess, tr, ev, f"slot fine-tune minus uniform control, mean over {len(ctl['seeds'])} seeds",
            "relative loss change vs control (%)")

    def cell(e):
        if e["diff"] is None:
            return "n/a"
        if e["ci_low"] is None:
            return f"{100 * e['diff']:+.1f}% (n = {e['n']})"
        return f"{100 * e['diff']:+.1f}% [{100 * e['ci_low']:+.1f}, {100 * e['ci_high']:+.1f}]"

    display(pd.DataFrame([[cell(e) for e in row] for row in ctl["excess"]], index=[f"trained {k}" for k in tr],
                         columns=[f"slot {e}" for e in ev]))
    display(Markdown("Change the control itself made (mean over seeds): " + ", ".join(
        f"slot {j}: {100 * c:+.1f}%" for j, c in zip(ev, ctl["control"]))))

# %% [markdown]
# ## The reference seed alone (the paper's figure; an illustration, not a finding)
# One seed's fine-tunes against the reference, without the control: seed-to-seed spread and the
# perturbation any fine-tuning causes are both in these numbers.

# %%
res = read_json(interference)
m = np.array(res["matrix"], dtype=float)
trained, evaluated = res["trained"], res["evaluated"]
heatmap(m, trained, evaluated, "loss change per slot after fine-tuning one slot (reference seed)",
        "relative loss change (%)")
sl = read_json(slots)
display(Markdown("Slots: " + ", ".join(f"{i + 1}: [{a}, {b}]" for i, (a, b) in enumerate(sl["slots"]))))

# %% [markdown]
# ## What our numbers show

# %%
if ctl is None:
    display(Markdown("- No control, so no finding: see the verdict above (not run)."))
else:
    def paired_line(d, what):
        if d.get("diff") is None:
            return f"- {what}: n/a."
        if d.get("ci_low") is None:
            return f"- {what}: {100 * d['diff']:+.1f}% over {d['n']} seed (no interval with one seed)."
        covers = d["ci_low"] <= 0 <= d["ci_high"]
        return (f"- {what}: {100 * d['diff']:+.1f}% [{100 * d['ci_low']:+.1f}, {100 * d['ci_high']:+.1f}] "
                f"(95% interval over {d['n']} seeds, p = {d['p']:.3g})"
                + ("; the interval covers no difference, so at this budget we cannot tell it from the control "
                   f"(detectable: about {100 * d['detectable']:.1f} points)." if covers and d.get("detectable") is not None
                   else "; the interval covers no difference." if covers else "."))

    display(Markdown("\n".join([
        paired_line(ctl["off_diagonal"], "Other slots' loss, slot fine-tune minus uniform control (mean off-diagonal)"),
        paired_line(ctl["diagonal"], "The fine-tuned slot's own loss, slot fine-tune minus uniform control"),
        "- The verdict on the paper's claim is the one in the table at the top (reproduced only if the first "
        "interval lies above 0 and its p < 0.05).",
    ])))
