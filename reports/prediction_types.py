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
# # eps vs x0 vs v vs mixed heads
#
# Seed paper (arXiv 2502.01990) Sec. 2.2: "a pre-trained model for the d-prediction and the
# a-prediction works better at time step closer to T and 0, respectively" (d: x0, a: eps), and v
# "works more average"; a *mixed* model with three heads trained on the per-sample minimum x0
# error is proposed. Sec. 3.2: mixed predictions proved "exceptionally challenging" to converge,
# and their results "are often worse than those from a single prediction". An unweighted loss is
# not the same weighting for every type: in eps units an x0 loss weights timestep t by 1/SNR(t)
# and a v loss by 1/alpha_bar(t) (x0 - x0_hat = -(eps - eps_hat) / sqrt(SNR)), so "x0 vs eps"
# unweighted compares a type *and* a per-t weighting. Where the study runs them, x0 and v are also
# trained at the eps loss's per-t weighting (`@ eps_units`: x0 loss x SNR, v loss x alpha_bar):
# those arms against eps differ in the prediction type alone. Every model is scored as
# an x0 estimator on the same bank and noise, beside the training set's optimal denoiser (the
# floor: no estimator can do better at any t).
#
# How we measure it, and where we deviate from the papers: `docs/methods.md#prediction-types`.

# %% tags=["parameters"]
profile = "results/digits/analyses/prediction_types.json"
metrics_csv = "results/digits/metrics.csv"
runs_csv = "results/digits/runs.csv"
summary = "results/digits/summary.json"
verdicts = "results/digits/verdicts.json"
results_dir = "results/digits"
group = "prediction_types"

# %%
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from IPython.display import Markdown, display

from timestep_lab.artifacts.io import read_json
from timestep_lab.reporting.curves import (paired_differences, per_seed_table, plot_paired_differences, plot_progress,
                                          progress_table)
from timestep_lab.reporting.notebook import load_study, read_log, setup, show_verdicts
from timestep_lab.reporting.regime import show_regime
from timestep_lab.studies.prediction_types import winning_ranges

setup()
show_verdicts(verdicts, ["mixed_heads", "mixed_heads_hypothesis"])
study = load_study(group, metrics_csv, runs_csv)
runs, label = study.runs, study.label
prof = read_json(profile)
t = np.array(prof["timesteps"])
T = prof.get("T", int(t.max()) + 1)
kinds = prof["predictions"]  # model name -> prediction type
single = [m for m, k in kinds.items() if k != "mixed"]
mixed = [m for m, k in kinds.items() if k == "mixed"]
ran = runs.assign(w=runs["weighting"].where(runs["weighting"] != "none", "")).groupby(["prediction", "w"])["seed"].agg(
    lambda x: sorted(int(v) for v in x))
display(Markdown("**What ran.** " + "; ".join(f"`{p}` prediction{f' at `{w}` weighting' if w else ''}: {len(sd)} "
                                             f"seed{'s' if len(sd) != 1 else ''} ({', '.join(map(str, sd))})"
                                             for (p, w), sd in ran.items())
                 + f". The x0-error profile uses the lowest seed of each unweighted type ({', '.join(prof['x0_mse'])})."
                 + ("" if {"x0", "v"} <= set(runs["prediction"]) else
                    " Not run: " + ", ".join(f"`{p}`" for p in ("x0", "v") if p not in set(runs["prediction"]))
                    + " prediction.")))
study.show_failed()

# %%
opt = np.array(prof["optimal_x0_mse"]) if prof.get("optimal_x0_mse") else None
fig, axes = plt.subplots(1, 3 if opt is not None else 2, figsize=(17 if opt is not None else 12, 4.3))
for name, err in prof["x0_mse"].items():
    style = dict(ls="--", lw=1) if "/" in name else dict(lw=2)
    axes[0].plot(t, err, label=name, **style)
if opt is not None:
    axes[0].plot(t, np.maximum(opt, 1e-8), color="k", lw=1, ls=":", label="optimal denoiser (floor)")
axes[0].set_yscale("log")
axes[0].set_xlabel("t (timestep index, 0 = least noisy)")
axes[0].set_ylabel("x0 MSE per pixel (x0 in [-1, 1]; log)")
axes[0].set_title("x0 error per timestep (mixed/* = the mixed model's heads)", fontsize=9)
axes[0].legend(fontsize=7)
table_s = np.array([prof["x0_mse"][m] for m in single])
win_single = [single[i] for i in table_s.argmin(axis=0)]
names = sorted(set(win_single))
codes = np.array([names.index(w) for w in win_single])
axes[1].scatter(t, codes, c=codes, cmap="tab10", s=12)
axes[1].set_yticks(range(len(names)), names)
axes[1].set_xlabel("t (timestep index)")
axes[1].set_title("lowest x0 error per t among the single-type models", fontsize=9)
if opt is not None:
    for name, ex in prof["x0_excess"].items():
        if "/" not in name:
            axes[2].plot(t, np.maximum(np.array(ex), 1e-8), label=name)
    axes[2].set_yscale("log")
    axes[2].set_xlabel("t (timestep index)")
    axes[2].set_ylabel("x0 MSE above the optimal denoiser (log; clipped at 1e-8)")
    axes[2].set_title("excess x0 error per timestep", fontsize=9)
    axes[2].legend(fontsize=7)
plt.tight_layout()
plt.show()
wins_single = winning_ranges(list(t), win_single)
heads = {m: prof["heads"][m] for m in mixed if m in prof.get("heads", {})}
display(pd.DataFrame(wins_single).rename(columns={"lo": "from t", "hi": "to t"}).set_index("winner"))

# %% [markdown]
# ## Final FID per prediction type, every seed

# %%
def arm_name(r) -> str:
    """The prediction type, and the loss weighting where it is not the plain (unweighted) loss."""
    return r["prediction"] + ("" if r.get("weighting", "none") == "none" else f" @ {r['weighting']}")


per_seed = per_seed_table(study, name=arm_name)
display(per_seed.style.format("{:.2f}", na_rep="–"))
loss = runs.assign(arm=runs.apply(arm_name, axis=1)).pivot_table(index="arm", columns="seed", values="final_loss",
                                                                  aggfunc="first")
loss.columns = [f"seed {int(c)}" for c in loss.columns]
display(Markdown("Final training loss of each run (in its own prediction space, so not comparable across types):"))
display(loss.style.format("{:.4g}"))
diffs = paired_differences(per_seed, "eps")
if len(diffs) and plot_paired_differences(diffs, label, "eps") is not None:
    plt.show()

# %% [markdown]
# ## FID against images seen, optimizer steps and wall-clock

# %%
prog = progress_table(study, name=arm_name)
if len(prog):
    plot_progress(prog, f"{label} ({study.tool})", baseline="eps")
    plt.show()

# %% [markdown]
# ## Does the mixed model train stably?

# %%
mixed_runs = runs[runs["prediction"] == "mixed"].sort_values("seed")
stable_lines = []
if len(mixed_runs):
    fig, axes = plt.subplots(1, 2, figsize=(12, 3.8))
    for _, mr in mixed_runs.iterrows():
        recs = read_log(mr["train_log"])
        if not recs:
            continue
        k = [r["kimg"] for r in recs]
        axes[0].plot(k, [r["loss"] for r in recs], label=f"seed {int(mr['seed'])}")
        losses = np.array([r["loss"] for r in recs])
        fr = {h: np.array([r["mixed_head_fraction"][h] for r in recs]).mean(axis=1) for h in ("eps", "x0", "v")}
        if mr["seed"] == mixed_runs["seed"].min():
            for h, v in fr.items():
                axes[1].plot(k, v, label=f"{h} head")
        stable_lines.append(f"- Mixed, seed {int(mr['seed'])}: the loss rose by more than 50% between log intervals "
                            f"{int(np.sum(losses[1:] > 1.5 * losses[:-1]))} time(s) in {len(recs)} intervals; status "
                            f"{mr['status']}; samples won at the end: "
                            + ", ".join(f"{h} {100 * float(v[-1]):.0f}%" for h, v in fr.items()) + ".")
    axes[0].set_xlabel("images seen (kimg)")
    axes[0].set_ylabel("training loss (min x0 error; log)")
    axes[0].set_yscale("log")
    axes[0].legend(fontsize=7)
    axes[0].set_title("mixed model: training loss", fontsize=9)
    axes[1].set_xlabel("images seen (kimg)")
    axes[1].set_ylabel("fraction of samples won")
    axes[1].set_title(f"which head wins during training (seed {int(mixed_runs['seed'].min())})", fontsize=9)
    axes[1].legend(fontsize=7)
    plt.tight_layout()
    plt.show()

# %% [markdown]
# ## Regime: the floor, the long run, and the share of the gap each type closes

# %%
reg = show_regime(study, metrics_csv, runs_csv, summary, per_seed, "eps")

# %% [markdown]
# ## What our numbers show

# %%
lines = []
near0, nearT = t <= T // 10, t >= T - T // 10
for what, who in (("the single-type models", dict(zip(t, win_single))),
                  *((f"the mixed model's heads ({m})", dict(zip(t, heads[m]["winner"]))) for m in heads)):
    lo_w = pd.Series([who[x] for x in t[near0]]).mode().iloc[0]
    hi_w = pd.Series([who[x] for x in t[nearT]]).mode().iloc[0]
    lo_kind, hi_kind = kinds.get(lo_w, lo_w), kinds.get(hi_w, hi_w)
    agree = lo_kind == "eps" and hi_kind == "x0"
    lines.append(f"- Among {what}: lowest x0 error for t <= {T // 10} mostly **{lo_w}**, for t >= {T - T // 10} mostly "
                 f"**{hi_w}**. The paper expects eps near 0 and x0 near T: "
                 + ("agreement." if agree else f"{'agreement near 0' if lo_kind == 'eps' else 'not eps near 0'}, "
                    f"{'x0 near T' if hi_kind == 'x0' else 'not x0 near T'}."))
if opt is not None:
    ex = {m: np.array(prof["x0_excess"][m]) for m in single + mixed}
    ratio_T = {m: float(np.mean(np.array(prof["x0_mse"][m])[nearT] / np.maximum(opt[nearT], 1e-300))) for m in ex}
    lines.append("- Near T the x0 error is this many times the optimal denoiser's (mean over t >= "
                 f"{T - T // 10}): " + ", ".join(f"{m} {r:.3g}x" for m, r in ratio_T.items()) + ".")
for _, d in diffs.iterrows():
    ci = f" [{d['ci_low']:+.2f}, {d['ci_high']:+.2f}]" if pd.notna(d["ci_low"]) else " (no interval: one seed)"
    covers = pd.isna(d["ci_low"]) or d["ci_low"] <= 0 <= d["ci_high"]
    lines.append(f"- {d['arm']} minus eps, final {label}: {d['diff']:+.2f}{ci} over {int(d['n'])} seed"
                 f"{'s' if d['n'] != 1 else ''}: " + ("the interval covers no difference." if covers else
                                                      f"the interval lies {'below' if d['diff'] < 0 else 'above'} 0")
                 + (" (type and per-t weighting both differ from eps)" if " @ " not in d["arm"] and d["arm"] != "mixed"
                    else " (the same per-t weighting as eps: the type alone)" if " @ " in d["arm"] else "")
                 + ("." if covers else "."))
pairs = [(a, a.split(" @ ")[0]) for a in per_seed.index if " @ " in a and a.split(" @ ")[0] in per_seed.index]
for weighted, plain_arm in pairs:  # the weighting alone: the same type, eps-unit weighting minus unweighted
    w = paired_differences(per_seed.loc[[plain_arm, weighted]], plain_arm)
    if len(w):
        d = w.iloc[0]
        ci = f" [{d['ci_low']:+.2f}, {d['ci_high']:+.2f}]" if pd.notna(d["ci_low"]) else " (no interval: one seed)"
        lines.append(f"- {weighted} minus {plain_arm} (the weighting alone): {d['diff']:+.2f}{ci} over {int(d['n'])} "
                     f"seed{'s' if d['n'] != 1 else ''}.")
lines.append("- These are descriptions; the verdicts on the papers' claims (mixed heads) are the scorecard's, at the top.")
display(Markdown("\n".join(lines + stable_lines)))
