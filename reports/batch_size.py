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
# # Small against large batch: equal images, and equal optimizer steps
#
# Seed paper (arXiv 2502.01990) Fig. 1b-g: a small batch trained for the same number of images
# (so every timestep is seen equally often in expectation) ends worse than a large batch, mostly
# at timesteps near 0. Whether it does here is what the headline below says, from the data. Retraining the small-batch model with a sampler that favours t near 0
# (`toward_zero`, Fig. 1d) lowers those losses but makes the losses near T worse (Fig. 1e-f).
#
# Equal images at a smaller batch also mean proportionally more optimizer steps, so FID is shown
# against steps and wall-clock beside images, and, where the study runs it, the small batch at
# *equal optimizer steps* with the large one (fewer images) is an arm of its own: the step
# confound controlled, not only plotted. The retraining adds images of its own; the same
# continuation on uniform t, when the study runs it, is its control: what the extra images do
# without favouring t near 0.
#
# How we measure it, and where we deviate from the papers: `docs/methods.md#batch-size`.

# %% tags=["parameters"]
metrics_csv = "results/digits/metrics.csv"
runs_csv = "results/digits/runs.csv"
profiles = ""
optimal = ""
summary = "results/digits/summary.json"
verdicts = "results/digits/verdicts.json"
results_dir = "results/digits"
group = "batch_size"

# %%
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from IPython.display import Markdown, display

from timestep_lab.artifacts.io import read_json
from timestep_lab.reporting.curves import (paired_differences, per_seed_table, plot_paired_differences, plot_progress,
                                          progress_table)
from timestep_lab.reporting.notebook import load_study, setup, show_verdicts
from timestep_lab.reporting.regime import show_regime

setup()
show_verdicts(verdicts, ["small_batch"])
study = load_study(group, metrics_csv, runs_csv)
runs, label = study.runs.set_index("run"), study.label
fid = study.fid("final", study.tool).set_index("run")["value"]
profs = {Path(p).stem: read_json(p) for p in profiles.split(",") if p}
opt = read_json(optimal) if optimal and Path(optimal).is_file() else None
RETRAINED, CONTROL, EQUAL_STEPS = "retrained toward t=0", "continued on uniform t", "equal steps"
# the study's own length: a plain run trained for fewer images is the equal-steps arm
full_kimg = runs.loc[[r for r in runs.index if not r.startswith(("toward_zero_from-", "uniform_from-"))],
                     "total_kimg"].max() if "total_kimg" in runs and len(runs) else None


def name(r) -> str:
    """A run's model: its batch size, the small batch at equal optimizer steps (a shorter run), or
    the small-batch model's retraining / its control."""
    rid = r.name if isinstance(r, pd.Series) else r
    batch = int(runs.loc[rid, "batch_size"]) if rid in runs.index else None
    if rid.startswith("toward_zero_from-"):
        return f"batch {batch}, {RETRAINED}"
    if rid.startswith("uniform_from-"):
        return f"batch {batch}, {CONTROL}"
    kimg = runs.loc[rid, "total_kimg"] if rid in runs.index and full_kimg is not None else None
    if kimg is not None and pd.notna(kimg) and kimg < full_kimg:
        return f"batch {batch}, {EQUAL_STEPS} ({kimg:g} kimg)"
    return f"batch {batch}"


plain = [r for r in runs.index if not r.startswith(("toward_zero_from-", "uniform_from-")) and EQUAL_STEPS not in name(r)]
sizes = sorted({int(runs.loc[r, "batch_size"]) for r in plain})
large, small = (f"batch {sizes[-1]}", f"batch {sizes[0]}") if len(sizes) >= 2 else (None, None)
models = sorted({name(r) for r in runs.index}, key=lambda m: (RETRAINED in m or CONTROL in m, EQUAL_STEPS in m, m))
display(Markdown("**What ran.** " + "; ".join(
    f"{m}: seed{'s' if len(sd) != 1 else ''} {', '.join(map(str, sd))}" for m, sd in
    ((m, sorted(int(runs.loc[r, 'seed']) for r in runs.index if name(r) == m)) for m in models))
    + (f". The retraining and its control each continue the small-batch run of their seed for "
       f"{runs.loc[[r for r in runs.index if name(r).endswith((RETRAINED, CONTROL))], 'nimg'].max() / 1000:.3g} "
       "kimg more (their own images seen, below)."
       if any(RETRAINED in m for m in models) else ".")))
study.show_failed()
per_seed = per_seed_table(study, name=name)
diffs = paired_differences(per_seed, large) if large else pd.DataFrame()
equal_steps = next((m for m in per_seed.index if EQUAL_STEPS in str(m)), None) if len(per_seed) else None


def finding(arm: str) -> str | None:
    """``arm - large`` in final FID, per seed, as the data say it: lower / higher in every seed
    and with its interval, or no difference shown (descriptive; the scorecard judges the claim)."""
    if not len(diffs) or arm not in set(diffs["arm"]):
        return None
    d = diffs.set_index("arm").loc[arm]
    seeds = [d[c] for c in d.index if str(c).startswith("seed ") and pd.notna(d[c])]
    ci = f" [{d['ci_low']:+.2f}, {d['ci_high']:+.2f}]" if pd.notna(d["ci_low"]) else ""
    side = ("lower" if pd.notna(d["ci_high"]) and d["ci_high"] < 0 else
            "higher" if pd.notna(d["ci_low"]) and d["ci_low"] > 0 else None)
    lower_in = sum(v < 0 for v in seeds)
    word = (f"a **{side}** final {label} than {large}" if side else f"no {label} difference from {large} shown")
    return (f"{arm} reaches {word}: {d['diff']:+.2f}{ci} over {int(d['n'])} seed{'s' if d['n'] != 1 else ''}, "
            f"lower in {lower_in} of {len(seeds)}")


head = [x for x in (finding(small) if small else None, finding(equal_steps) if equal_steps else None) if x]
display(Markdown("**Headline (from the data).** At equal images seen, " + head[0] + "."
                 + (f" At equal optimizer steps, {head[1]}." if len(head) > 1 else
                    " The small batch at equal optimizer steps did not run in this study.")
                 if head else "**Headline.** _Not enough paired seeds for one._"))

# %% [markdown]
# ## Loss profile per model (same bank and noise for every model)

# %%
order = sorted(profs, key=lambda r: (name(r) if r in runs.index else r))
curves = {m: np.mean([profs[r]["eps_mse"] for r in order if r in runs.index and name(r) == m], axis=0)
          for m in models if any(r in runs.index and name(r) == m for r in order)}
steps_t = np.array(next(iter(profs.values()))["timesteps"]) if profs else np.zeros(0)
nseeds = {m: sum(r in runs.index and name(r) == m for r in order) for m in curves}
fig, axes = plt.subplots(1, 2, figsize=(13, 4.4))
for m, c in curves.items():
    axes[0].plot(steps_t, c, label=f"{m} (mean of {nseeds[m]} seed{'s' if nseeds[m] > 1 else ''})")
if opt is not None and list(opt["timesteps"]) == list(steps_t):
    axes[0].plot(steps_t, np.maximum(opt["eps_mse"], 1e-8), color="k", lw=1, ls=":", label="optimal denoiser (floor)")
axes[0].set_yscale("log")
axes[0].set_xlabel("t (timestep index, 0 = least noisy)")
axes[0].set_ylabel("eps-MSE per pixel (log)")
axes[0].set_title("loss profile", fontsize=9)
axes[0].legend(fontsize=7)
if large in curves:
    for m, c in curves.items():
        if m != large:
            axes[1].plot(steps_t, c / curves[large] - 1, label=m)
    axes[1].axhline(0, color="k", lw=0.8)
    axes[1].set_xlabel("t (timestep index)")
    axes[1].set_ylabel(f"eps-MSE relative to {large} (fraction)")
    axes[1].set_title("relative loss difference per t", fontsize=9)
    axes[1].legend(fontsize=7)
plt.tight_layout()
plt.show()

rows = []
for run in order:
    if run not in runs.index:
        continue
    p = profs[run]
    eps, T, t = np.array(p["eps_mse"]), p["T"], np.array(p["timesteps"])
    rows.append({"model": name(run), "seed": int(runs.loc[run, "seed"]), "images seen (kimg)": runs.loc[run, "nimg"] / 1000,
                 "optimizer steps": runs.loc[run, "nimg"] / runs.loc[run, "batch_size"],
                 f"final {label}": fid.get(run, np.nan), "eps-MSE, t < T/10": eps[t < T / 10].mean(),
                 "eps-MSE, t > 9T/10": eps[t > 0.9 * T].mean(), "eps-MSE, all t": eps.mean()})
table = pd.DataFrame(rows).set_index(["model", "seed"])
display(Markdown("Every run, straight from the data:"))
display(table.style.format("{:.4g}"))
means = table.groupby(level=0, sort=False).mean()

# %% [markdown]
# ## FID against images seen, optimizer steps and wall-clock

# %%
prog = progress_table(study, name=name)
if len(prog):
    plot_progress(prog, f"{label} ({study.tool})", baseline=large)
    plt.show()
else:
    display(Markdown("_No progress points in this group._"))

# %% [markdown]
# ## Small against large batch, per seed

# %%
display(per_seed.style.format("{:.2f}", na_rep="–"))
if len(diffs) and plot_paired_differences(diffs, label, large) is not None:
    plt.show()

# %% [markdown]
# ## Regime: the floor, the long run, and the share of the gap each model closes

# %%
reg = show_regime(study, metrics_csv, runs_csv, summary, per_seed, large)

# %% [markdown]
# ## What our numbers show

# %%
lines = []
if large and small and small in means.index and large in means.index:
    d = diffs.set_index("arm").loc[small] if small in set(diffs["arm"]) else None
    if d is not None:
        ci = f" [{d['ci_low']:+.2f}, {d['ci_high']:+.2f}]" if pd.notna(d["ci_low"]) else " (no interval: one seed)"
        lines.append(f"- At equal images seen, {small} minus {large} in final {label}: {d['diff']:+.2f}{ci} over "
                     f"{int(d['n'])} seed{'s' if d['n'] != 1 else ''}; per seed: "
                     + ", ".join(f"{c.split()[-1]}: {d[c]:+.2f}" for c in d.index if c.startswith("seed ") and pd.notna(d[c]))
                     + ".")
    if equal_steps and equal_steps in set(diffs["arm"]):
        lines.append(f"- At equal optimizer steps: {finding(equal_steps)} (the 4x step confound as an arm).")
    ts, tl = means.loc[small], means.loc[large]
    lines.append(f"- {small} took {ts['optimizer steps']:.0f} optimizer steps for its {ts['images seen (kimg)']:.3g} kimg, "
                 f"{large} {tl['optimizer steps']:.0f}: {ts['optimizer steps'] / tl['optimizer steps']:.2g}x the steps "
                 "(the curves above show FID against both).")
    lines.append(f"- Near t = 0 the small batch's loss is {ts['eps-MSE, t < T/10'] / tl['eps-MSE, t < T/10']:.2f}x the large "
                 f"batch's; near T it is {ts['eps-MSE, t > 9T/10'] / tl['eps-MSE, t > 9T/10']:.2f}x (mean over seeds; the "
                 "paper finds the gap mainly near 0).")
tz = next((m for m in means.index if RETRAINED in m), None)
cz = next((m for m in means.index if CONTROL in m), None)
if tz and small in means.index:
    tz_seeds = list(table.loc[tz].index)  # the retraining continues these seeds of the small batch only
    a = table.loc[small].loc[[s for s in tz_seeds if s in table.loc[small].index]].mean()
    b = means.loc[tz]
    n_tz = len(tz_seeds)
    d0, dT = b["eps-MSE, t < T/10"] / a["eps-MSE, t < T/10"] - 1, b["eps-MSE, t > 9T/10"] / a["eps-MSE, t > 9T/10"] - 1
    lines.append(f"- Retraining toward t = 0 changed the loss near 0 by {100 * d0:+.1f}% and near T by {100 * dT:+.1f}% "
                 f"against {small} before it (seed{'s' if n_tz != 1 else ''} {', '.join(map(str, tz_seeds))}, "
                 "no interval)"
                 + ("; losses near T got worse, as in the paper's Fig. 1f." if dT > 0 else
                    "; losses near T did not get worse, unlike the paper's Fig. 1f."))
    if cz:
        c = means.loc[cz]
        c0, cT = c["eps-MSE, t < T/10"] / a["eps-MSE, t < T/10"] - 1, c["eps-MSE, t > 9T/10"] / a["eps-MSE, t > 9T/10"] - 1
        lines.append(f"- The same extra images on uniform t changed them by {100 * c0:+.1f}% near 0 and {100 * cT:+.1f}% "
                     f"near T. Against this control the retraining's effect is {100 * (b['eps-MSE, t < T/10'] / c['eps-MSE, t < T/10'] - 1):+.1f}% "
                     f"near 0 and {100 * (b['eps-MSE, t > 9T/10'] / c['eps-MSE, t > 9T/10'] - 1):+.1f}% near T.")
        lines.append(f"- Final {label}, same seed{'s' if n_tz != 1 else ''}: {small} {a[f'final {label}']:.2f}, "
                     f"retrained {b[f'final {label}']:.2f}, "
                     f"continued on uniform t {c[f'final {label}']:.2f}: the retraining's FID change "
                     f"({b[f'final {label}'] - a[f'final {label}']:+.2f}) against the control's "
                     f"({c[f'final {label}'] - a[f'final {label}']:+.2f}).")
    else:
        lines.append(f"- {label} of the retrained model: {b[f'final {label}']:.2f} ({small}: {a[f'final {label}']:.2f}); "
                     "without a uniform-t continuation (analyses.batch_size.control) the extra images and the sampler "
                     "cannot be told apart.")
display(Markdown("\n".join(lines) if lines else "_Not enough runs for conclusions._"))
