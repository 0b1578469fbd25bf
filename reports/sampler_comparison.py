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
# # Sampler comparison: which timestep sampler and weighting trains fastest?
#
# SpeeD (arXiv 2405.17403), the learned Beta sampler (arXiv 2411.09998), the curriculum schedule
# CLTS (arXiv 2404.07946), improved-diffusion's loss-second-moment importance sampling and the
# seed paper's slot-balanced sampler, trained under one protocol. This notebook only reads
# `results/`; it trains nothing.
#
# How we measure it, and where we deviate from the papers: `docs/methods.md#samplers`,
# `docs/methods.md#weightings` and `docs/methods.md#speedup`.

# %% tags=["parameters"]
metrics_csv = "results/digits/metrics.csv"
runs_csv = "results/digits/runs.csv"
results_dir = "results/digits"
group = "sampler_comparison"
baseline = "uniform+none"

# %%
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from IPython.display import Markdown, display

from timestep_lab.reporting.notebook import load_study, read_log, setup
from timestep_lab.studies import kimg_to_reach, speedups

setup()
study = load_study(group, metrics_csv, runs_csv)
runs, tool, label = study.runs, study.tool, study.label
final, progress = study.fid("final"), study.fid("progress", tool)
proto = final.iloc[0] if len(final) else None
if proto is not None:
    display(Markdown(
        f"**Protocol.** {label}, computed with torch-fidelity and clean-fid on {int(proto['num_generated'])} generated "
        f"vs {int(proto['num_reference'])} reference images; reverse sampler {proto['method']} with {int(proto['steps'])} "
        f"steps, {'EMA' if proto['ema'] else 'raw'} weights, seeds `base + i`. Progress points use the same sampler on "
        f"fewer samples ({int(progress['num_generated'].iloc[0]) if len(progress) else 'n/a'}). Variants are "
        f"`timestep sampler + loss weighting`; spread is over training seeds."))
study.show_failed(" (excluded from means)")

# %% [markdown]
# ## FID against images seen

# %%
fig, ax = plt.subplots(figsize=(8, 5))
curves = {}
for variant, df in progress.groupby("variant"):
    per_kimg = df.groupby("kimg")["value"]
    mean, lo, hi = per_kimg.mean(), per_kimg.min(), per_kimg.max()
    curves[variant] = mean
    style = dict(lw=2.5, color="black") if variant == baseline else dict(lw=1.5)
    line, = ax.plot(mean.index, mean.values, marker="o", ms=3, label=variant, **style)
    ax.fill_between(mean.index, lo.values, hi.values, alpha=0.15, color=line.get_color())
ax.set_xlabel("images seen (kimg)")
ax.set_ylabel(f"{label} ({tool})")
ax.set_yscale("log")
ax.set_title("mean over seeds; band = min..max")
ax.legend(fontsize=8, ncol=2)
plt.show()

# %% [markdown]
# ## Final FID (mean ± std over seeds)

# %%
table = (final.groupby(["variant", "tool"])["value"].agg(["mean", "std", "count"]).unstack("tool"))
table.columns = [f"{stat} ({tl})" for stat, tl in table.columns]
table = table[sorted(table.columns, key=lambda c: (c.split("(")[1], c))]
if f"mean ({tool})" in table:
    table = table.sort_values(f"mean ({tool})")
    base_fid = table.loc[baseline, f"mean ({tool})"] if baseline in table.index else np.nan
    table["vs uniform"] = table[f"mean ({tool})"] / base_fid
display(table.style.format({c: ("{:.0f}" if c.startswith("count") else "{:.3f}") for c in table.columns}, na_rep="–"))

# %% [markdown]
# ## Speed-up: images needed to reach the uniform baseline's final FID

# %%
sp = speedups({v: (c.index.tolist(), c.tolist()) for v, c in curves.items()}, baseline)
target = curves[baseline].iloc[-1] if baseline in curves else np.nan
speedup = pd.DataFrame({
    "kimg to reach uniform's final FID": {v: kimg_to_reach(c.index.tolist(), c.tolist(), target) for v, c in curves.items()},
    "speed-up": sp,
}).sort_values("speed-up", ascending=False) if sp else pd.DataFrame()
display(speedup.style.format("{:.2f}", na_rep="not reached"))

# %% [markdown]
# ## Cost per training step
# Median seconds per optimizer step from each run's log, relative to uniform. The study runs
# jobs side by side, so these are noisy; `benchmarks/sampler_overhead.py` measures the same
# ratio in a controlled, interleaved run.

# %%
cost = runs.groupby("variant")["sec_per_step"].median()
overhead = (cost / cost.get(baseline, np.nan)).rename("step time vs uniform").to_frame()
display(overhead.sort_values("step time vs uniform").style.format("{:.3f}"))

# %% [markdown]
# ## How p(t) evolves for the stateful samplers
# Each row is one log interval; columns are 10 equal ranges of t (t = 0 least noisy).

# %%
stateful = []
for _, r in runs[runs["seed"] == runs["seed"].min()].iterrows():
    recs = read_log(r["train_log"])
    bins = [rec["sampler"]["p_bins"] for rec in recs if "sampler" in rec]
    if bins:
        stateful.append((r["variant"], np.array([rec["kimg"] for rec in recs if "sampler" in rec]), np.array(bins)))
if stateful:
    fig, axes = plt.subplots(1, len(stateful), figsize=(4 * len(stateful), 3.6), squeeze=False)
    for ax, (variant, kimg, bins) in zip(axes[0], stateful):
        im = ax.imshow(bins, aspect="auto", origin="lower", cmap="viridis",
                       extent=[0, bins.shape[1], kimg.min(), kimg.max()])
        ax.set_title(variant, fontsize=9)
        ax.set_xlabel("t bin (T/10 each)")
        ax.set_ylabel("kimg")
        fig.colorbar(im, ax=ax, fraction=0.046)
    plt.tight_layout()
    plt.show()
else:
    display(Markdown("_No stateful sampler in this study._"))

# %% [markdown]
# ## What our numbers show

# %%
lines = []
if f"mean ({tool})" in table and len(table):
    best = table.index[0]
    lines.append(f"- Lowest final {label}: **{best}** ({table.iloc[0][f'mean ({tool})']:.3f}); "
                 f"uniform: {table.loc[baseline, f'mean ({tool})']:.3f}." if baseline in table.index else
                 f"- Lowest final {label}: **{best}**.")
    worse = [v for v in table.index if v != baseline and table.loc[v, "vs uniform"] > 1]
    if worse:
        lines.append(f"- Worse than uniform at the end: {', '.join(worse)}.")
if len(speedup):
    sp = speedup["speed-up"]
    for name, claim in (("speed+speed", "SpeeD claims about 3x"), ("clts+none", "CLTS claims 2x to 2.6x"),
                        ("adaptive+none", "the adaptive sampler claims faster convergence than SpeeD")):
        if name in sp.index:
            val = sp[name]
            lines.append(f"- {name}: speed-up {val:.2f}x to uniform's final FID ({claim})."
                         if val == val else f"- {name}: never reached uniform's final FID ({claim}); "
                         "our result disagrees with the paper at this scale.")
spread = final[final["tool"] == tool].groupby("variant")["value"].std().mean()
if spread == spread:
    lines.append(f"- Mean seed-to-seed std of the final FID: {spread:.3f}; differences smaller than this are noise.")
display(Markdown("\n".join(lines) if lines else "_Not enough data for conclusions._"))
