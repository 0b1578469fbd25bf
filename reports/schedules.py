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
# # Do the sampler conclusions hold across noise schedules?
#
# The adaptive-sampler paper (arXiv 2411.09998) reports its gains on linear, cosine and
# quadratic schedules. Here each timestep sampler is trained under each schedule with the same
# budget and scored with the same protocol; the question is whether the *ranking* changes.
#
# How we measure it, and where we deviate from the papers: `docs/methods.md#schedules`.

# %% tags=["parameters"]
metrics_csv = "results/digits/metrics.csv"
runs_csv = "results/digits/runs.csv"
results_dir = "results/digits"
verdicts = "results/digits/verdicts.json"
group = "schedules"

# %%
import matplotlib.pyplot as plt
import numpy as np
from IPython.display import Markdown, display
from scipy.stats import kendalltau

from timestep_lab.reporting.notebook import load_study, setup, show_comparisons, show_verdicts

setup()
study = load_study(group, metrics_csv, runs_csv)
tool, label = study.tool, study.label
fid = study.fid("final", tool)
table = fid.pivot_table(index="variant", columns="schedule", values="value", aggfunc="mean")
show_verdicts(verdicts, [])
display(Markdown(f"**Metric:** {label} ({tool}), mean over seeds; lower is better (descriptive)."))
display(table.style.format("{:.3f}").highlight_min(axis=0, color="#cde8cd"))

# %%
fig, ax = plt.subplots(figsize=(7, 4))
width = 0.8 / max(1, len(table.index))
x = np.arange(len(table.columns))
for i, (variant, row) in enumerate(table.iterrows()):
    ax.bar(x + i * width, row.values, width, label=variant)
ax.set_xticks(x + width * (len(table.index) - 1) / 2, table.columns)
ax.set_ylabel(f"final {label}")
ax.set_title("final FID per schedule and sampler")
ax.legend(fontsize=8)
plt.show()

# %% [markdown]
# ## Each sampler against uniform within its schedule, paired by seed
# `arm - uniform` in final FID per seed, mean with a 95% t-interval, Holm across the arms of one
# schedule (docs/methods.md §9). With one seed there is no interval: nothing here is a finding.

# %%
comparisons = show_comparisons(study)

# %% [markdown]
# ## Ranking per schedule (of the means; descriptive)

# %%
ranks = table.rank(axis=0)
display(ranks.astype("Int64"))
lines = []
cols = list(table.columns)
taus = []
for i in range(len(cols)):
    for j in range(i + 1, len(cols)):
        a, b = table[cols[i]].dropna(), table[cols[j]].dropna()
        common = a.index.intersection(b.index)
        if len(common) >= 2:
            tau = kendalltau(a[common], b[common]).statistic
            taus.append(tau)
            lines.append(f"- Kendall tau between the {cols[i]} and {cols[j]} rankings: {tau:.2f}")
winners = {c: table[c].idxmin() for c in cols if table[c].notna().any()}
lines.append("- Best sampler per schedule: " + ", ".join(f"{c}: **{w}**" for c, w in winners.items()))
if taus:
    consistent = len(set(winners.values())) == 1
    lines.append(f"- The best sampler is {'the same' if consistent else 'not the same'} under every schedule; "
                 f"mean Kendall tau {np.mean(taus):.2f} (1 = identical rankings).")
display(Markdown("\n".join(lines)))
