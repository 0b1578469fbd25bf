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
# # Same noise, same image? And momentum decay
#
# arXiv 2404.07946 observes that diffusion models trained from different initialisations, and
# even different architectures, produce very similar images from the same initial noise. Here
# models trained from different seeds and one of a different width sample with exactly the same
# seeds (initial noise and every step's noise). We compare the distance between *paired*
# samples (same seed) with *unpaired* ones (different seeds).
#
# **The unit is the model.** Pairs of models share models (4 models make 6 pairs), so the pairs
# are not independent: the test is the mean of `paired - unpaired` over the pairs with a
# leave-one-model-out jackknife interval (n = models) and a permutation p that permutes each
# model's sample seeds once for all its pairs.
#
# **Same noise, same image, or the same early solution?** Every network first learns the linear
# (Gaussian) denoiser of its data, and short runs may all still sit near it; models could then
# agree on a noise because they share that solution, not because of the phenomenon. The control
# samples the training set's Gaussian denoiser (its mean and covariance) and its optimal
# denoiser with the same sampler and seeds. If the models are closer to each other than each is
# to the Gaussian solution, they share more than it. The Gaussian control itself has paired
# samples much closer than unpaired ones, so "paired < unpaired" cannot tell the phenomenon from
# the shared solution: the scorecard tests the models against the control, per model pair
# `log(paired/unpaired)` of the pair minus its two models' `log(paired/unpaired)` against the
# Gaussian control (negative: the models agree more than the control's solution explains), with
# the jackknife interval over models (docs/methods.md §9.5). `paired - unpaired` is shown as a
# description. We chose the closed-form denoisers over,
# say, comparing snapshots across training because they cost no training, are deterministic
# given the noise, and are exactly the "early solution" hypothesis.
#
# The paper's momentum-decay strategy (reconstruction: Adam's beta1 decays linearly; by default
# the learning rate is left alone, a second arm adds the SGD-style compensation, docs/methods.md
# §4.2) is compared with the constant-momentum run of the same seed, paired over seeds.
#
# How we measure it, and where we deviate from the papers: `docs/methods.md#consistency`.

# %% tags=["parameters"]
consistency = "results/digits/analyses/consistency.json"
metrics_csv = "results/digits/metrics.csv"
runs_csv = "results/digits/runs.csv"
summary = "results/digits/summary.json"
verdicts = "results/digits/verdicts.json"
results_dir = "results/digits"
group = "consistency"
controls = ""  # the closed-form controls' samples, when sampled (a declared input of the report)

# %%
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from IPython.display import Markdown, display

from timestep_lab.artifacts.io import read_json
from timestep_lab.artifacts.samples_file import load_controls
from timestep_lab.reporting.curves import (paired_differences, per_seed_table, plot_paired_differences, plot_progress,
                                          progress_table)
from timestep_lab.reporting.notebook import load_study, setup, show_comparisons, show_verdicts
from timestep_lab.reporting.regime import show_regime

setup()
show_verdicts(verdicts, ["same_noise_same_image", "momentum_decay", "momentum_decay_compensated"])
study = load_study(group, metrics_csv, runs_csv)
res = read_json(consistency)
models = res.get("models") or list(res["sets"])
rows = []
for p in res["pairs"]:
    row = {"a": p["a"], "b": p["b"], "pixel: paired": p["pixel"]["paired"], "pixel: unpaired": p["pixel"]["unpaired"],
           "pixel ratio": p["pixel"]["ratio"]}
    if p.get("feature"):
        row.update({"feature: paired": p["feature"]["paired"], "feature: unpaired": p["feature"]["unpaired"],
                    "feature ratio": p["feature"]["ratio"]})
    rows.append(row)
table = pd.DataFrame(rows)
display(Markdown(f"**What ran.** {len(models)} models compared ({', '.join(f'`{m}`' for m in models)}), "
                 f"{res.get('n_samples', '?')} samples each; sampler {res.get('sampler', {}).get('method')} with "
                 f"{res.get('sampler', {}).get('steps')} steps."))
display(Markdown("Every pair of models (descriptive): RMS pixel distance in [0, 1] units and Euclidean distance in "
                 "the study's feature space (" + str(res.get("feature_extractor") or "none") + "); ratio = paired / unpaired, lower means more consistent."))
display(table.style.format({c: "{:.3f}" for c in table.columns if c not in ("a", "b")}).hide(axis="index"))

# %% [markdown]
# ## The test over models, and the closed-form controls

# %%
test_rows, ctrl_rows = [], []
for space in ("pixel", "feature"):
    sp = res.get(space)
    if not sp:
        continue
    t = sp["test"]
    ci = f"[{t['ci_low']:+.4g}, {t['ci_high']:+.4g}]" if t.get("ci_low") is not None else "n/a (fewer than 3 models)"
    test_rows.append({"space": space, "paired (mean)": t["paired"], "unpaired (mean)": t["unpaired"],
                      "paired - unpaired": t["diff"], "95% CI (jackknife over models)": ci, "n models": t["n"],
                      "pairs": t["pairs"], "permutation p (two-sided)": t["p"]})
    for c, v in sp["controls"].items():
        cl = v["closer_to_each_other"]
        cci = f"[{cl['ci_low']:+.4g}, {cl['ci_high']:+.4g}]" if cl.get("ci_low") is not None else "n/a"
        mv = v.get("models_vs_control") or {}
        mci = f"[{mv['ci_low']:+.3g}, {mv['ci_high']:+.3g}]" if mv.get("ci_low") is not None else "n/a"
        ctrl_rows.append({"space": space, "control": c, "models' paired distance to it (mean)": np.mean(list(v["paired"].values())),
                          "its paired / unpaired ratio (mean)": np.mean(list(v["ratio"].values())),
                          "d(a, b) - mean d(model, control)": cl["diff"], "95% CI (jackknife)": cci,
                          "log ratio, models - control": mv.get("diff", np.nan), "95% CI (jackknife) ": mci})
display(pd.DataFrame(test_rows).set_index("space"))
if ctrl_rows:
    display(pd.DataFrame(ctrl_rows).set_index(["space", "control"]))
else:
    display(Markdown("_The controls were not sampled in this study (analyses.consistency.controls)._"))

# %%
sets = dict(res["sets"])
n_show = 12


def strip(images: np.ndarray) -> np.ndarray:
    """A row of images with a 1-pixel white border (grey or RGB)."""
    if images.shape[-1] == 1:
        images = images[..., 0]
    pad = [(0, 0), (1, 1), (1, 1)] + [(0, 0)] * (images.ndim - 3)
    return np.concatenate(list(np.pad(images, pad, constant_values=255)), axis=1)


rows_img = []
for name, path in sets.items():
    with np.load(path) as z:
        rows_img.append((name, z["images"][:n_show]))
if controls:
    _, control_images = load_controls(controls)  # checked against its recorded sha256
    rows_img += [(f"control: {k}", v[:n_show]) for k, v in control_images.items()]
fig, axes = plt.subplots(len(rows_img), 1, figsize=(n_show * 0.7, 0.85 * len(rows_img) + 0.3), squeeze=False)
for ax, (name, imgs) in zip(axes[:, 0], rows_img):
    ax.imshow(strip(imgs), cmap="gray", vmin=0, vmax=255)
    ax.set_yticks([])
    ax.set_xticks([])
    ax.set_ylabel(name, rotation=0, ha="right", fontsize=7)
plt.suptitle(f"the same {n_show} seeds, one row per model (and per closed-form control)", fontsize=10)
plt.show()

# %% [markdown]
# ## Momentum decay: FID against images seen, optimizer steps and wall-clock

# %%
runs = study.runs


def arm_name(r) -> str:
    rid = r["run"] if "run" in r else r.name  # a runs.csv row, indexed by run or not
    if r["optim_schedule"] == "momentum_decay":
        return "beta1 decay + lr compensation" if "compensate" in rid else "beta1 decay"
    return f"constant momentum, width {int(r['channels'])}" if pd.notna(r.get("channels")) else "constant momentum"


prog = progress_table(study, name=arm_name)
base_width = runs.loc[runs["optim_schedule"] == "constant", "channels"].min() if len(runs) else None
baseline = f"constant momentum, width {int(base_width)}" if base_width == base_width and base_width is not None else None
if len(prog):
    plot_progress(prog, f"{study.label} ({study.tool})", baseline=baseline)
    plt.show()
else:
    display(Markdown("_No progress points in this group._"))

# %% [markdown]
# Every arm of the group against the constant-momentum baseline, paired by seed (95% t-interval,
# the verdict column the scorecard's; docs/methods.md §9). The width arm differs in its network, not its optimizer.

# %%
comparisons = show_comparisons(study, summary, verdicts)
per_seed = per_seed_table(study, name=arm_name)
display(per_seed.style.format("{:.2f}", na_rep="–"))
diffs = paired_differences(per_seed, baseline) if baseline else pd.DataFrame()
if len(diffs) and plot_paired_differences(diffs, study.label, baseline) is not None:
    plt.show()

# %% [markdown]
# ## Regime: the floor, the long run, and the share of the gap each arm closes

# %%
reg = show_regime(study, metrics_csv, runs_csv, summary, per_seed, baseline)

# %% [markdown]
# ## What our numbers show

# %%
lines = []
for space in ("pixel", "feature"):
    sp = res.get(space)
    if not sp:
        continue
    t = sp["test"]
    ratio = t["paired"] / t["unpaired"] if t["unpaired"] else float("nan")
    ci = f" [{t['ci_low']:+.3g}, {t['ci_high']:+.3g}]" if t.get("ci_low") is not None else " (no interval)"
    lines.append(f"- {space.capitalize()} space: paired samples are {t['paired']:.3g} apart against {t['unpaired']:.3g} "
                 f"unpaired (ratio {ratio:.2f}); paired - unpaired = {t['diff']:+.3g}{ci}, 95% jackknife interval over "
                 f"{t['n']} models ({t['pairs']} pairs), permutation p = {t['p']:.3g} ({res['permutations']} permutations): "
                 "a description, not the claim's test (a closed-form control passes it too).")
    for c, v in sp["controls"].items():
        cl = v["closer_to_each_other"]
        ci = f" [{cl['ci_low']:+.3g}, {cl['ci_high']:+.3g}]" if cl.get("ci_low") is not None else ""
        closer = cl.get("ci_high") is not None and cl["ci_high"] < 0
        lines.append(f"  - Control `{c}`: each model is {np.mean(list(v['paired'].values())):.3g} from it on paired "
                     f"samples (ratio paired / unpaired {np.mean(list(v['ratio'].values())):.2f}); the models' distance "
                     f"to each other minus to it: {cl['diff']:+.3g}{ci}: "
                     + ("the models are closer to each other than to it, so they share more than this solution."
                        if closer else "the models are not measurably closer to each other than to it: this solution "
                        "accounts for their agreement."))
        mv = v.get("models_vs_control")
        if mv and mv.get("ci_low") is not None:
            pr = np.mean([q["models_ratio"] for q in mv["per_pair"]])
            lines.append(f"  - Models against `{c}`{' (the scorecard test)' if c == 'gaussian' else ''}: the models' paired / "
                         f"unpaired ratio {pr:.2f} against {np.mean(list(v['ratio'].values())):.2f} to the control; "
                         f"log ratio, models - control = {mv['diff']:+.3g} [{mv['ci_low']:+.3g}, {mv['ci_high']:+.3g}] "
                         f"(95% jackknife interval over {mv['n']} models; the verdict is the scorecard's, above).")
for _, d in diffs.iterrows():
    ci = f" [{d['ci_low']:+.2f}, {d['ci_high']:+.2f}]" if pd.notna(d["ci_low"]) else " (no interval: fewer than 2 seeds)"
    lines.append(f"- {d['arm']} minus {baseline}, final {study.label}: {d['diff']:+.2f}{ci} over {int(d['n'])} seed"
                 f"{'s' if d['n'] != 1 else ''}.")
for arm in per_seed.index:
    if arm != baseline and (not len(diffs) or arm not in set(diffs["arm"])):
        lines.append(f"- {arm}: shares no seed with {baseline}, so no paired FID comparison (it is one of the models "
                     "of the consistency test).")
display(Markdown("\n".join(lines)))
