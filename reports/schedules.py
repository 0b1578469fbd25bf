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
# quadratic noise schedules. Here each timestep sampler is trained under each schedule with the
# same budget and scored with the same protocol; the question is whether a sampler's effect
# against uniform t changes with the schedule. Which samplers and schedules this study ran, with
# how many seeds, is listed below from its results.
#
# How we measure it, and where we deviate from the papers: `docs/methods.md#schedules`.

# %% tags=["parameters"]
metrics_csv = "results/digits/metrics.csv"
runs_csv = "results/digits/runs.csv"
results_dir = "results/digits"
verdicts = "results/digits/verdicts.json"
summary = "results/digits/summary.json"
group = "schedules"

# %%
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from IPython.display import Markdown, display

from timestep_lab.reporting.curves import per_seed_table, plot_progress, progress_table
from timestep_lab.reporting.notebook import load_study, setup, show_comparisons, show_verdicts
from timestep_lab.reporting.regime import show_regime
from timestep_lab.evidence.stats import paired

setup()
study = load_study(group, metrics_csv, runs_csv)
tool, label = study.tool, study.label
runs = study.runs
fid = study.fid("final", tool)
show_verdicts(verdicts, [])
PAPER_SAMPLERS, PAPER_SCHEDULES = ["uniform", "adaptive"], ["linear", "cosine", "quad"]


def arm(r) -> str:
    return f"{r['variant']} @ {r['schedule']}"


ran = runs.groupby(["variant", "schedule"])["seed"].agg(lambda x: sorted(int(v) for v in x)).reset_index()
samplers, schedules = sorted(ran["variant"].unique()), sorted(ran["schedule"].unique())
missing = [f"sampler `{s}`" for s in PAPER_SAMPLERS if not any(v.startswith(s + "+") for v in samplers)] + \
    [f"schedule `{s}`" for s in PAPER_SCHEDULES if s not in schedules]
display(Markdown(
    "**What ran.** " + "; ".join(f"`{r['variant']}` under `{r['schedule']}`: {len(r['seed'])} seed"
                                  f"{'s' if len(r['seed']) != 1 else ''} ({', '.join(map(str, r['seed']))})"
                                  for _, r in ran.iterrows()) + "."
    + (f" Not run in this study, although 2411.09998 uses them: {', '.join(missing)}." if missing else "")))
study.show_failed(" (excluded)")

# %%
table = fid.pivot_table(index="variant", columns="schedule", values="value", aggfunc="mean")
display(Markdown(f"**Mean final {label} ({tool}) over seeds; lower is better (descriptive).**"))
display(table.style.format("{:.3f}").highlight_min(axis=0, color="#cde8cd"))
per_seed = per_seed_table(study, name=arm)
display(Markdown("**Every run's final FID, straight from the data:**"))
display(per_seed.style.format("{:.2f}", na_rep="–"))

# %% [markdown]
# ## FID against images seen, optimizer steps and wall-clock

# %%
curves = progress_table(study, name=arm)
if len(curves):
    plot_progress(curves, f"{label} ({tool})")
    plt.show()
else:
    display(Markdown("_No progress points in this group._"))

# %% [markdown]
# ## Each sampler against uniform within its schedule, paired by seed
# `arm - uniform` in final FID per seed, mean with a 95% t-interval (docs/methods.md §9). No claim
# on the scorecard reads these comparisons: they are described, not judged (one verdict per
# comparison, the scorecard's; the detectable difference is at the Holm level across the arms of
# one schedule).

# %%
comparisons = show_comparisons(study, summary, verdicts)

# %% [markdown]
# ## Does the effect change with the schedule?
# Per seed, a sampler's effect within a schedule is `d_s = FID(sampler) - FID(uniform)`; the
# interaction is `d_s(schedule) - d_s(linear)`, paired over the seeds both schedules ran, with a
# 95% t-interval: an interval that covers 0 means the schedule did not change the effect
# measurably at this budget.

# %%
wide = fid.pivot_table(index="seed", columns=["variant", "schedule"], values="value", aggfunc="first")
base_variant = next((v for v in samplers if v.startswith("uniform+")), None)
effects, rows = {}, []
for v in samplers:
    if v == base_variant:
        continue
    for sch in schedules:
        if (v, sch) in wide and (base_variant, sch) in wide:
            effects[(v, sch)] = (wide[(v, sch)] - wide[(base_variant, sch)]).dropna()
for (v, sch), d in effects.items():
    ref = effects.get((v, "linear"))
    if sch == "linear" or ref is None:
        continue
    common = d.index.intersection(ref.index)
    p = paired(ref[common].values, d[common].values)
    rows.append({"sampler": v, "schedule": sch, "effect here (mean)": d[common].mean(),
                 "effect under linear (mean)": ref[common].mean(), "interaction": p.diff, "ci_low": p.ci_low,
                 "ci_high": p.ci_high, "n seeds": p.n})
inter = pd.DataFrame(rows)
if len(inter):
    display(inter.style.format({c: "{:+.2f}" for c in inter.columns if c not in ("sampler", "schedule", "n seeds")},
                               na_rep="n/a").hide(axis="index"))
else:
    display(Markdown("_No sampler ran under linear and another schedule: no interaction to test._"))

# %% [markdown]
# ## Regime: the floor, the long run, and the share of the gap each arm closes
# The baseline is uniform t under the linear schedule (the long run's schedule).

# %%
reg = show_regime(study, metrics_csv, runs_csv, summary, per_seed,
                  f"{base_variant} @ linear" if base_variant else None)

# %% [markdown]
# ## What our numbers show

# %%
lines = []
for _, r in comparisons.iterrows():
    lines.append(f"- {r['comparison'].split('=')[-1]}: {r['arm']} vs {r['baseline']}: "
                 f"{r[f'{label} difference [95% CI]']} over {r['n seeds']} seed{'s' if r['n seeds'] != 1 else ''}; "
                 f"{r['scorecard verdict']}.")
for _, r in inter.iterrows():
    covers = not (pd.notna(r["ci_low"]) and (r["ci_low"] > 0 or r["ci_high"] < 0))
    ci = f" [{r['ci_low']:+.2f}, {r['ci_high']:+.2f}]" if pd.notna(r["ci_low"]) else " (no interval: fewer than 2 seeds)"
    lines.append(f"- {r['sampler']}'s effect under {r['schedule']} minus under linear: {r['interaction']:+.2f}{ci} "
                 f"({int(r['n seeds'])} seeds): "
                 + ("no measurable change with the schedule." if covers else "the schedule changes the effect."))
winners = {c: table[c].idxmin() for c in table.columns if table[c].notna().any()}
if winners:
    lines.append("- Lowest mean final FID per schedule (descriptive): "
                 + ", ".join(f"{c}: {w} ({table.loc[w, c]:.2f})" for c, w in winners.items()) + ".")
display(Markdown("\n".join(lines) if lines else "_No paired comparison in this group._"))
