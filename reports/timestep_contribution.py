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
# Seed paper (arXiv 2502.01990) Fig. 3: during reverse sampling, replace the model's x0
# prediction by the true x0 of a held-out image inside a range of timesteps (its noise path
# otherwise unchanged) and measure the FID. If a range matters, getting it exactly right helps a
# lot. The paper finds [1, 500] better than [500, 1000], [10, 100] better than [100, 500], and
# [1, 10] best: the timesteps near 0 contribute most. Its ranges are 1-based on T = 1000 and are
# scaled to our T.
#
# How we measure it, and where we deviate from the papers: `docs/methods.md#timestep-contribution`.

# %% tags=["parameters"]
metrics = ""
posterior = "results/digits/analyses/posterior.json"
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

setup()
show_verdicts(verdicts, [])
post = read_json(posterior)
labels = {r["label"]: r["range"] for r in post.get("ranges", [])}
rows = []
for path in metrics.split(","):
    if not path:
        continue
    m = read_json(path)
    key = Path(path).parent.name  # "none" or "t<lo>-<hi>"
    paper = "no replacement" if key == "none" else "[" + key[1:].replace("-", ", ") + "]"
    ours = labels.get(paper.replace(", ", ","), None)
    rows.append({"replaced range (paper, T=1000)": paper, "our t range": str(ours) if ours else "–",
                 "FID (torch-fidelity)": m["fid"], "FID (clean-fid)": m.get("fid_clean_fid"),
                 "n": next(r["num_generated"] for r in m["records"])})
label = m.get("label", "FID") if rows else "FID"
table = pd.DataFrame(rows).set_index("replaced range (paper, T=1000)")
display(Markdown(f"**Metric:** {label}, against the training set; samples from the reference model with one "
                 "held-out image per seed."))
display(table.style.format({"FID (torch-fidelity)": "{:.2f}", "FID (clean-fid)": "{:.2f}"}))

# %%
fig, axes = plt.subplots(1, 2, figsize=(12, 4))
ax = axes[0]
order = table.sort_values("FID (torch-fidelity)").index
ax.barh(order, table.loc[order, "FID (torch-fidelity)"], color=["C2" if i == "no replacement" else "C0" for i in order])
ax.set_xlabel(label)
ax.set_title("FID when the true x0 replaces the prediction in a range")
ax.invert_yaxis()
ax = axes[1]
t = np.array(post["t"])
ax.plot(t, post["c1"], label="coefficient of x0 (c1)")
ax.plot(t, post["c2"], label="coefficient of x_t (c2)")
ax.set_xscale("symlog", linthresh=10)
ax.set_yscale("log")
ax.set_xlabel("t (symlog)")
ax.set_title("posterior mean  c1_t x0 + c2_t x_t  (Fig. 3b)")
ax.legend()
plt.tight_layout()
plt.show()

# %% [markdown]
# ## What our numbers show

# %%
fid = table["FID (torch-fidelity)"]
lines = []


def cmp(a, b):
    if a in fid.index and b in fid.index:
        better = fid[a] < fid[b]
        return (f"- {a}: {fid[a]:.2f} vs {b}: {fid[b]:.2f}: replacing {a if better else b} gave the lower FID "
                + ("(the paper's direction" if better else "(the paper's is the opposite")
                + "; one model, one sample set, no interval: descriptive, not a verdict).")
    return None


for a, b in (("[1, 500]", "[500, 1000]"), ("[10, 100]", "[100, 500]")):
    line = cmp(a, b)
    if line:
        lines.append(line)
ranges_only = fid.drop("no replacement", errors="ignore")
if len(ranges_only):
    best = ranges_only.idxmin()
    lines.append(f"- The best range is {best} ({fid[best]:.2f}); the paper's best is [1, 10]."
                 + (" Agreement." if best == "[1, 10]" else ""))
if "no replacement" in fid.index:
    lines.append(f"- Without replacement: {fid['no replacement']:.2f}.")
c1, c2 = np.array(post["c1"]), np.array(post["c2"])
cross = int(t[c1 > c2].max()) if (c1 > c2).any() else None
lines.append(f"- The x0 coefficient exceeds the x_t coefficient only for t <= {cross}" if cross is not None
             else "- The x0 coefficient never exceeds the x_t coefficient.")
display(Markdown("\n".join(lines)))
