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
# is tested on the log-ratio of each slot's loss after the slot fine-tune to its loss after the
# control, `R = log(L_slot / L_control)`, paired over seeds (docs/methods.md §3.2, §9): log-ratios
# weigh a doubling and a halving alike, so one slot whose loss grows several-fold cannot carry the
# mean. Which slots this study fine-tuned, and over which seeds, is listed below from its results.
#
# How we measure it, and where we deviate from the papers: `docs/methods.md#slot-finetune`.

# %% tags=["parameters"]
interference = "results/digits/analyses/interference.json"
interference_control = "results/digits/analyses/interference_control.json"
slots = "results/digits/analyses/slots.json"
verdicts = "results/digits/verdicts.json"
results_dir = "results/digits"

# %%
import math
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from IPython.display import Markdown, display

from timestep_lab.artifacts.io import read_json
from timestep_lab.reporting.notebook import setup, show_verdicts

setup(grid=False)  # heatmaps: grid lines would cut through the cells
show_verdicts(verdicts, ["slot_interference", "table1_pretrained"])
res = read_json(interference)
ctl = read_json(interference_control) if interference_control and Path(interference_control).is_file() else None
sl = read_json(slots)


def pct(x: float) -> str:
    """A log-ratio as a relative change."""
    return f"{100 * math.expm1(x):+.0f}%"


def heatmap(m, trained, evaluated, title, label, fmt):
    """Cells coloured on a scale clipped at the 90th percentile of |m| (the colour bar says so), so
    one extreme cell does not wash out the others; every cell is annotated with its value."""
    finite = np.abs(m[np.isfinite(m)])
    lim = float(np.quantile(finite, 0.9)) if finite.size else 1.0
    lim = lim or 1.0
    fig, ax = plt.subplots(figsize=(1.4 + 0.75 * len(evaluated), 1.3 + 0.6 * len(trained)))
    im = ax.imshow(np.clip(m, -lim, lim), cmap="RdBu_r", vmin=-lim, vmax=lim, aspect="auto")
    ax.set_xticks(range(len(evaluated)), [str(e) for e in evaluated])
    ax.set_yticks(range(len(trained)), [str(k) for k in trained])
    ax.set_xlabel("evaluated slot")
    ax.set_ylabel("fine-tuned slot")
    for i in range(m.shape[0]):
        for j in range(m.shape[1]):
            ax.text(j, i, fmt(m[i, j]), ha="center", va="center", fontsize=7)
    fig.colorbar(im, ax=ax, label=f"{label} (colours clipped at ±{lim:.2g})", extend="both")
    plt.title(title, fontsize=9)
    plt.show()


PAPER_SLOTS = (3, 5, 7, 9)  # the slots the seed paper fine-tunes (Fig. 2)
ran = list((ctl or res)["trained"])
as_paper = ("the paper's slots" if sorted(ran) == list(PAPER_SLOTS) else
            f"not the paper's {', '.join(map(str, PAPER_SLOTS))} (Fig. 2): "
            + ("its " + ", ".join(map(str, sorted(set(PAPER_SLOTS) & set(ran)))) + " only, " if set(PAPER_SLOTS) & set(ran)
               else "none of them, ")
            + "the study's `analyses.slots.finetune` chose these")
if ctl:
    display(Markdown(f"**What ran.** Slots fine-tuned: {', '.join(map(str, ctl['trained']))} (of {len(ctl['evaluated'])}), "
                     f"{as_paper}; seeds: {', '.join(map(str, ctl['seeds']))}; one uniform-t control per seed."))
else:
    display(Markdown(f"**What ran.** Slots fine-tuned: {', '.join(map(str, res['trained']))} (of {len(res['evaluated'])}), "
                     f"{as_paper}; the reference seed only; no uniform-t control."))

# %% [markdown]
# ## Against the uniform-t control, paired over seeds
# `R_s[k, j] = log(L_j(fine-tuned on slot k, seed s) / L_j(control, seed s))`. Cells: the mean
# over seeds, annotated as the relative change it means (`exp(R) - 1`); the table gives each
# entry's 95% t-interval over seeds, as relative changes.

# %%
if ctl is None:
    display(Markdown("_This study has no uniform-t control fine-tunes: the interference claim is not tested._"))
else:
    tr, ev = ctl["trained"], ctl["evaluated"]
    lr = np.array(ctl["log_ratio"], float)
    heatmap(lr, tr, ev, f"log(slot fine-tune / uniform control), mean over {len(ctl['seeds'])} seeds",
            "log-ratio", pct)

    def cell(e):
        if e["diff"] is None:
            return "n/a"
        if e["ci_low"] is None:
            return f"{pct(e['diff'])} (n = {e['n']})"
        return f"{pct(e['diff'])} [{pct(e['ci_low'])}, {pct(e['ci_high'])}]"

    display(pd.DataFrame([[cell(e) for e in row] for row in ctl["excess"]], index=[f"trained {k}" for k in tr],
                         columns=[f"slot {e}" for e in ev]))
    display(Markdown("Change the control itself made against the reference (mean over seeds): " + ", ".join(
        f"slot {j}: {100 * c:+.1f}%" for j, c in zip(ev, ctl["control"]))))
    # per seed, straight from the data: the mean off-diagonal log-ratio of each seed
    per_seed = {s: np.array(m, float) for s, m in ctl["per_seed"].items()}
    off = np.ones_like(lr, dtype=bool)
    for i, k in enumerate(tr):
        off[i, k - 1] = False
    display(pd.DataFrame({"seed": list(per_seed), "mean off-diagonal (other slots)": [pct(m[off].mean()) for m in per_seed.values()],
                          "mean diagonal (the trained slot)": [pct(m[~off].mean()) for m in per_seed.values()],
                          "largest cell": [f"{pct(m.max())} (trained {tr[int(np.unravel_index(m.argmax(), m.shape)[0])]}, "
                                           f"slot {ev[int(np.unravel_index(m.argmax(), m.shape)[1])]})"
                                           for m in per_seed.values()]}).set_index("seed"))

# %% [markdown]
# ## The reference seed alone (the paper's figure; an illustration, not a finding)
# One seed's fine-tunes against the reference, without the control: seed-to-seed spread and the
# perturbation any fine-tuning causes are both in these numbers.

# %%
m = np.array(res["matrix"], dtype=float)
heatmap(np.log1p(m), res["trained"], res["evaluated"], "log(loss after / before) per slot after fine-tuning one slot "
        "(reference seed)", "log-ratio to the reference", pct)
display(Markdown("Slots (total loss): " + ", ".join(f"{i + 1}: [{a}, {b}]" for i, (a, b) in enumerate(sl["slots"]))))

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
            return f"- {what}: {pct(d['diff'])} over {d['n']} seed (no interval with one seed)."
        covers = d["ci_low"] <= 0 <= d["ci_high"]
        return (f"- {what}: {pct(d['diff'])} [{pct(d['ci_low'])}, {pct(d['ci_high'])}] (geometric mean, 95% interval "
                f"over {d['n']} seeds, p = {d['p']:.3g})"
                + ("; the interval covers no change, so at this budget we cannot tell it from the control "
                   f"(detectable: a log-ratio of about {d['detectable']:.2g})." if covers and d.get("detectable") is not None
                   else "; the interval covers no change." if covers else "."))

    cells = [(k, j, e) for k, row in zip(ctl["trained"], ctl["excess"]) for j, e in zip(ctl["evaluated"], row)
             if j != k and e.get("ci_low") is not None]
    above = [f"{j} (after {k})" for k, j, e in cells if e["ci_low"] > 0]
    below = [f"{j} (after {k})" for k, j, e in cells if e["ci_high"] < 0]
    display(Markdown("\n".join([
        paired_line(ctl["off_diagonal"], "Other slots' loss, slot fine-tune against the uniform control (mean "
                                         "off-diagonal log-ratio)"),
        paired_line(ctl["diagonal"], "The fine-tuned slot's own loss against the control"),
        f"- Of {len(cells)} off-diagonal cells, {len(above)} have an interval above 0"
        + (f" (slots {', '.join(above)})" if above else "") + f" and {len(below)} below 0"
        + (f" (slots {', '.join(below)})" if below else "") + "; the rest cover no change.",
        "- The verdict on the paper's claim is the one in the table at the top (reproduced only if the first "
        "interval lies above 0 and its p < 0.05).",
    ])))
