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
# # Flow matching: what the flow trainers' timestep options do
#
# SD3, Flux, SANA and LTX are rectified flows, and the trainers people fine-tune them with
# (diffusers' example scripts, OneTrainer, sd-scripts, SimpleTuner) expose timestep-sampling
# choices whose effect their users keep asking about. Here the same network is trained as SD3's
# rectified flow (`x_t = (1 - sigma) x0 + sigma eps`, velocity target `eps - x0`) with each choice,
# under one protocol and with paired seeds:
#
# 1. which `weighting_scheme`: none (uniform t), logit-normal, mode, cosmap;
# 2. is drawing t from a density the same as weighting the loss by it?
# 3. does SD3's timestep shift help training?
# 4. do SpeeD, min-SNR and the adaptive sampler carry over? 5. curriculum logit-normal -> uniform
#    (questions 4-5 run in `config/digits-full.yaml`).
#
# This notebook only reads `results/`; it trains nothing. How each option is implemented, where
# diffusers differs from the SD3 paper and what we follow: `docs/methods.md#flow-matching`.

# %% tags=["parameters"]
metrics_csv = "results/digits/metrics.csv"
runs_csv = "results/digits/runs.csv"
summary = "results/digits/summary.json"
results_dir = "results/digits"
verdicts = "results/digits/verdicts.json"
run_configs = ""  # comma-separated run.yaml files of the group's runs (their samplers and weightings)
group = "flow_matching"
baseline = "uniform+none"

# %%
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from IPython.display import Markdown, display

from timestep_lab.components import build_diffusion, build_sampler, build_weighting
from timestep_lab.config import load_config
from timestep_lab.claims import FLOW_CLAIMS, QUESTION_OF, QUESTIONS
from timestep_lab.reporting.curves import per_seed_table
from timestep_lab.reporting.notebook import comparison_lines, load_study, read_log, setup, show_comparisons, show_verdicts
from timestep_lab.reporting.regime import show_regime

setup()
study = load_study(group, metrics_csv, runs_csv)
runs, tool, label = study.runs, study.tool, study.label
final, progress = study.fid("final"), study.fid("progress", tool)
has_runs = len(final) > 0
if has_runs:
    proto = final.iloc[0]
    display(Markdown(
        f"**Protocol.** {label}, torch-fidelity and clean-fid on {int(proto['num_generated'])} generated vs "
        f"{int(proto['num_reference'])} reference images; reverse sampler {proto['method']} with "
        f"{int(proto['steps'])} steps, {'EMA' if proto['ema'] else 'raw'} weights, seeds `base + i`; progress points "
        f"use the same sampler on {int(progress['num_generated'].iloc[0]) if len(progress) else 'n/a'} samples. "
        f"Every arm predicts the velocity; variants are `timestep sampler + loss weighting` (catalogue labels of "
        f"the study config); spread is over training seeds."))
    study.show_failed(" (excluded from means)")
else:
    display(Markdown("_This study has no `flow_matching` runs: add the group (config/config.yaml has one)._"))
show_verdicts(verdicts, [c.id for c in FLOW_CLAIMS])

# %% [markdown]
# ## The questions and where they come from
# Each claim with its source (paper section or table, or the thread where users ask), the source's
# words (the note says when a quote is recalled because the paper was not available offline), whether
# the source reports it as a finding or puts it forward as a hypothesis, and its numbers.

# %%
rows = []
for c in FLOW_CLAIMS:
    q = QUESTION_OF[c.id]
    rows.append({"question": f"{q}. {QUESTIONS[q]}", "claim": c.id, "source": f"{c.paper}, {c.where}",
                 "quote": f"“{c.quote}”" if c.quote else "", "finding or hypothesis": c.status,
                 "tested": c.statement, "predicts": c.direction,
                 "source's numbers": "; ".join(f"{n.text} ({n.unit})" for n in c.numbers),
                 "note": c.note, "users ask": " ".join(c.asked_in)})
display(pd.DataFrame(rows).style.hide(axis="index"))

# %% [markdown]
# ## What each arm trains on: the effective weight per noise level
# `p(t) w_is(t) w(t)` normalised to mean 1 over the grid (`p` the sampler's marginal at the start
# of training, `w` the loss weighting in the velocity loss), against `sigma = (t + 1) / T`.
# Uniform t with no weighting is the flat line at 1; the density-weighted arm has the same curve as
# the arm that samples from that density (question 2), only its noise differs.

# %%
configs = [p for p in str(run_configs).split(",") if p]
shown = {}
for path in configs:
    cfg = load_config(path)
    variant = f"{cfg.timesteps.name}+{cfg.weighting.name}"
    key = (repr(cfg.timesteps), repr(cfg.weighting))
    if key in shown.values():
        continue
    process = build_diffusion(cfg)
    sampler = build_sampler(cfg, process.alpha_bar)
    eff = (sampler.probs() * sampler.importance_table() * build_weighting(cfg, process).weights().double()).numpy()
    shown[path] = key
    row = runs[runs["run"] == path.split("/")[-2]]
    name = row["variant"].iloc[0] if len(row) else variant
    plt.plot(process.sigmas.numpy() if hasattr(process, "sigmas") else np.arange(len(eff)), eff / eff.mean(),
             lw=2.5 if name == baseline else 1.4, label=name)
if shown:
    plt.xlabel("sigma (noise fraction)")
    plt.ylabel("effective weight (mean 1)")
    plt.yscale("log")
    plt.ylim(1e-3, None)
    plt.legend(fontsize=8, ncol=2)
    plt.title("where each arm puts its training signal")
    plt.show()
else:
    display(Markdown("_No run configs given._"))

# %% [markdown]
# ## FID against images seen

# %%
if len(progress):
    fig, ax = plt.subplots(figsize=(8, 5))
    for variant, df in progress.groupby("variant"):
        per_kimg = df.groupby("kimg")["value"]
        mean, lo, hi = per_kimg.mean(), per_kimg.min(), per_kimg.max()
        style = dict(lw=2.5, color="black") if variant == baseline else dict(lw=1.5)
        line, = ax.plot(mean.index, mean.values, marker="o", ms=3, label=variant, **style)
        ax.fill_between(mean.index, lo.values, hi.values, alpha=0.12, color=line.get_color())
    ax.set_xlabel("images seen (kimg)")
    ax.set_ylabel(f"{label} ({tool})")
    ax.set_yscale("log")
    ax.set_title("mean over seeds; band = min..max")
    ax.legend(fontsize=8, ncol=2)
    plt.show()
else:
    display(Markdown("_No progress points (the group has `progress: false`)._"))

# %% [markdown]
# ## Final FID per arm (mean ± std over seeds; descriptive)

# %%
if has_runs:
    table = final.groupby(["variant", "tool"])["value"].agg(["mean", "std", "count"]).unstack("tool")
    table.columns = [f"{stat} ({tl})" for stat, tl in table.columns]
    table = table[sorted(table.columns, key=lambda c: (c.split("(")[1], c))]
    if f"mean ({tool})" in table:
        table = table.sort_values(f"mean ({tool})")
    display(table.style.format({c: ("{:.0f}" if c.startswith("count") else "{:.3f}") for c in table.columns},
                               na_rep="–"))

# %% [markdown]
# ## Final FID per arm and seed (straight from the data)

# %%
per_seed = per_seed_table(study) if has_runs else pd.DataFrame()
if len(per_seed):
    display(per_seed.style.format("{:.2f}", na_rep="–"))
    n_points = progress.groupby("run")["kimg"].nunique()
    display(Markdown(f"Progress points per run: {int(n_points.min()) if len(n_points) else 0}"
                     + (f" to {int(n_points.max())}" if len(n_points) and n_points.max() != n_points.min() else "")
                     + f" (at {', '.join(f'{k:g}' for k in sorted(progress['kimg'].unique()))} kimg)."))

# %% [markdown]
# ## Regime: the floor, the long run, and how far these runs trained

# %%
reg = show_regime(study, metrics_csv, runs_csv, summary, per_seed, baseline) if len(per_seed) else None

# %% [markdown]
# ## Every arm against uniform t, paired by seed
# `arm - uniform` in final FID per seed, mean with a 95% Student-t interval over seeds; the verdict
# column is the scorecard's, for the claims that read the comparison (the same verdict as the table
# above: no second test here; docs/methods.md §9); speed-up: images an arm needs to reach
# uniform's final FID, per seed, censored by the progress-point spacing (docs/methods.md#speedup).
# Questions 2 and 3 compare other pairs too (their own baselines): see the verdicts above.

# %%
comparisons = show_comparisons(study, summary, verdicts) if has_runs else pd.DataFrame()

# %% [markdown]
# ## Velocity loss per noise level at the end of training
# The raw (unweighted) training loss of the last log interval in 10 equal t-ranges, mean over
# seeds: where each arm leaves error (Curriculum Sampling's U-shaped profile: errors near the ends).

# %%
bins = {}
for _, r in runs.iterrows():
    recs = read_log(r["train_log"])
    if recs and recs[-1].get("loss_bins"):
        bins.setdefault(r["variant"], []).append(recs[-1]["loss_bins"])
if bins:
    centers = (np.arange(10) + 0.5) / 10
    for variant, rows_ in sorted(bins.items()):
        b = np.nanmean(np.array(rows_, dtype=float), axis=0)
        plt.plot(centers, b, marker="o", lw=2.5 if variant == baseline else 1.4, label=variant)
    plt.xlabel("sigma (centre of the t-range)")
    plt.ylabel("velocity MSE")
    plt.legend(fontsize=8, ncol=2)
    plt.title("last-interval training loss per t-range")
    plt.show()

# %% [markdown]
# ## What our numbers show
# One verdict per comparison: the scorecard's (index.html), for the claims that read it; a
# comparison no claim reads is described, with the smallest difference this budget finds with 80%
# power at the group's Holm level (estimated from the sample SD), never judged here a second time.

# %%
lines = comparison_lines(comparisons, study.label, "uniform t") if len(comparisons) else []
display(Markdown("\n".join(lines) if lines else "_Not enough paired seeds for conclusions (intervals need 2)._"))
