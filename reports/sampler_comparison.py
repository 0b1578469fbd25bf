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
# Timestep samplers and loss weightings from SpeeD (arXiv 2405.17403), the learned Beta sampler
# (arXiv 2411.09998), the curriculum schedule CLTS (arXiv 2404.07946) and the seed paper, trained
# under one protocol; which of them this study ran is listed below, from its results. This
# notebook only reads `results/`; it trains nothing.
#
# How we measure it, and where we deviate from the papers: `docs/methods.md#samplers`,
# `docs/methods.md#weightings` and `docs/methods.md#speedup`.

# %% tags=["parameters"]
metrics_csv = "results/digits/metrics.csv"
runs_csv = "results/digits/runs.csv"
results_dir = "results/digits"
verdicts = "results/digits/verdicts.json"
summary = "results/digits/summary.json"
group = "sampler_comparison"
baseline = "uniform+none"

# %%
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from IPython.display import Markdown, display

from timestep_lab.cost.step_overhead import CONTROLLED, SOURCE
from timestep_lab.reporting.curves import (paired_differences, per_seed_table, plot_paired_differences, plot_progress,
                                          progress_table)
from timestep_lab.reporting.notebook import (
    code_text,
    load_study,
    read_log,
    setup,
    comparison_lines,
    show_comparisons,
    show_speedup_seeds,
    show_verdicts,
)
from timestep_lab.reporting.regime import show_regime

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
        f"`timestep sampler + loss weighting`; spread is over training seeds. Code: {code_text(final)}."))
arms_ran = runs.groupby("variant")["seed"].agg(lambda x: sorted(int(v) for v in x))
display(Markdown("**What ran.** " + "; ".join(f"`{v}`: {len(sd)} seed{'s' if len(sd) != 1 else ''} ({', '.join(map(str, sd))})"
                                             for v, sd in arms_ran.items()) + "."))
if any(v.startswith("clts+") for v in arms_ran.index):
    display(Markdown("**CLTS is a reconstruction.** The curriculum timestep schedule of 2404.07946 is rebuilt from "
                     "the paper's abstract (we hold no text with its schedule; `docs/methods.md` §1.5): the `clts` "
                     "arm tests our reading of it, not the authors' code."))
study.show_failed(" (excluded from means)")
show_verdicts(verdicts, ["speed_faster", "speed_sampling_alone", "adaptive_faster", "adaptive_converges_better",
                         "clts_faster"])

# %% [markdown]
# ## FID against images seen, optimizer steps and wall-clock

# %%
curves = progress_table(study)
if len(curves):
    plot_progress(curves, f"{label} ({tool})", baseline=baseline)
    plt.show()
else:
    display(Markdown("_No progress points in this group._"))

# %% [markdown]
# ## Final FID per arm (mean ± std over seeds; descriptive)

# %%
table = (final.groupby(["variant", "tool"])["value"].agg(["mean", "std", "count"]).unstack("tool"))
table.columns = [f"{stat} ({tl})" for stat, tl in table.columns]
table = table[sorted(table.columns, key=lambda c: (c.split("(")[1], c))]
if f"mean ({tool})" in table:
    table = table.sort_values(f"mean ({tool})")
display(table.style.format({c: ("{:.0f}" if c.startswith("count") else "{:.3f}") for c in table.columns}, na_rep="–"))

# %% [markdown]
# ## Every arm against uniform, paired by seed
# The difference is `arm - uniform` in final FID per seed, its mean with a 95% Student-t interval
# over seeds; the verdict column is the scorecard's for the claims that read the comparison (one
# verdict per comparison, the table above; docs/methods.md §9), the detectable difference at the
# Holm level across the arms of this group. The speed-up is the images an arm needs to reach the level
# uniform's FID has at its last progress point (the same sample count as the arm's curve), per
# seed, interpolated in log FID between progress points: ">x" when a seed got there before its
# first point, "<x" when one never did, n/a when both happened; the progress-point spacing cannot
# say more (docs/methods.md#speedup).

# %%
comparisons = show_comparisons(study, summary, verdicts)

# %% [markdown]
# ### The speed-up seed by seed
# Per arm and seed: the level (uniform's FID at its last progress point), the images uniform took to
# get there, the images the arm needs to reach it (a bound when censored), their ratio and the
# censoring. A seed with no finite level or no finite point on the arm's curve is left out, with the
# reason.

# %%
show_speedup_seeds(study, summary)

# %% [markdown]
# ## Every seed, straight from the data
# Final FID of each run, and each seed's `arm - uniform` (dots) with the mean and its 95% interval.

# %%
per_seed = per_seed_table(study)
display(per_seed.style.format("{:.2f}", na_rep="–"))
diffs = paired_differences(per_seed, baseline)
if plot_paired_differences(diffs, label, baseline) is not None:
    plt.show()

# %% [markdown]
# ## Regime: the floor, the long run, and the share of the gap each arm closes

# %%
reg = show_regime(study, metrics_csv, runs_csv, summary, per_seed, baseline)

# %% [markdown]
# ## Cost per training step
# Step time relative to uniform from the controlled benchmark (`benchmarks/sampler_overhead.py`:
# every sampler through the real training loop in lockstep, so all meet the same machine
# conditions). The study's runs log seconds per step too, but they shared the CPUs with the
# jobs beside them: those medians are not a measurement of a sampler's cost and are not shown.

# %%
ran_samplers = sorted(runs["sampler"].unique())
overhead = pd.DataFrame({"sampler": ran_samplers,
                         "step time vs uniform (controlled)": [CONTROLLED.get(s, np.nan) for s in ran_samplers]})
display(overhead.set_index("sampler").style.format("{:.3f}", na_rep="not benchmarked"))
display(Markdown(f"Source: {SOURCE}. A weighting adds no measurable step time (it scales the per-sample loss)."))

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
# One verdict per comparison: the scorecard's (index.html), for the claims that read it; a
# comparison no claim reads is described, with the smallest difference this budget finds with 80%
# power at the group's Holm level (estimated from the sample SD), never judged here a second time.

# %%
lines = comparison_lines(comparisons, study.label, "uniform")
display(Markdown("\n".join(lines) if lines else "_Not enough paired seeds for conclusions (intervals need 2)._"))
