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
# How we measure it, and where we deviate from the papers: `docs/methods.md#slot-finetune`.

# %% tags=["parameters"]
interference = "results/digits/analyses/interference.json"
slots = "results/digits/analyses/slots.json"
results_dir = "results/digits"

# %%
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from IPython.display import Markdown, display

from timestep_lab.io import read_json
from timestep_lab.reporting.notebook import setup

setup(grid=False)  # a heatmap: grid lines would cut through the cells
res = read_json(interference)
m = np.array(res["matrix"], dtype=float)
trained, evaluated = res["trained"], res["evaluated"]
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
fig.colorbar(im, ax=ax, label="relative loss change (%)")
plt.title("loss change per slot after fine-tuning one slot")
plt.show()

# %%
table = pd.DataFrame(100 * m, index=[f"trained {k}" for k in trained], columns=[f"slot {e}" for e in evaluated])
display(table.style.format("{:+.1f}%").background_gradient(cmap="RdBu_r", vmin=-100 * lim, vmax=100 * lim, axis=None))
sl = read_json(slots)
display(Markdown("Slots: " + ", ".join(f"{i + 1}: [{a}, {b}]" for i, (a, b) in enumerate(sl["slots"]))))

# %% [markdown]
# ## What our numbers show

# %%
big = res["largest_off_diagonal"]
diag = res["diagonal"]
improved = res["trained_improved"]
lines = [
    f"- Largest off-diagonal change: **{100 * big['value']:+.1f}%** (fine-tuning slot {big['trained']}, "
    f"evaluated on slot {big['evaluated']}).",
    f"- Mean off-diagonal change: {100 * res['mean_off_diagonal']:+.1f}%; the trained slot itself changed by "
    + ", ".join(f"{100 * d:+.1f}% (slot {k})" for k, d in zip(trained, diag)) + ".",
]
worse_entry = res["max_off_diagonal_increase"] or {"value": 0.0}
worse = worse_entry["value"]
if worse > 0:
    lines.append(f"- Fine-tuning one slot made other slots worse by up to {100 * worse:.1f}% "
                 f"(slot {worse_entry.get('trained')} -> slot {worse_entry.get('evaluated')}): "
                 + ("this agrees with the paper's claim that training one range of timesteps destroys the others."
                    if worse > 0.05 else "a small effect; the paper reports a strong one."))
else:
    lines.append("- No other slot got worse: at this scale we do **not** reproduce the paper's interference.")
if not all(improved):
    lines.append("- Not every fine-tuned slot improved on its own loss: " + ", ".join(
        f"slot {k}" for k, ok in zip(trained, improved) if not ok) + ".")
display(Markdown("\n".join(lines)))
