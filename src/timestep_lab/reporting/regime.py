"""The regime block of every FID report: how far this study's runs are from converged, and how
much of the remaining distance each arm closes (docs/methods.md §8.8).

* the **floor**: the held-out split's FID against the training set, with its bootstrap interval
  and sample count, as ``summary.json["floor"]`` holds it (``results/<study>/eval/floor.json``,
  read by :func:`timestep_lab.artifacts.floor.floor_record`); "floor not computed" otherwise;
* the **long run**: the study's reference trained far longer than the groups' runs, with its FID
  followed during training (group ``reference`` in ``metrics.csv``): where the groups' length
  sits on the full curve, and whether it has converged by the scorecard's one rule
  (:func:`timestep_lab.evidence.convergence.plateau`: FID fell less than 10% over the last third);
* each arm's **share of the gap closed**: per seed ``(F_base - F_arm) / (F_base - floor)``, the
  fraction of the baseline's distance to the floor the arm removes, with a 95% t-interval over
  seeds (the floor's own uncertainty is not propagated; its interval is shown beside it).

:func:`regime` computes the numbers (a dict the report's text is rendered from);
:func:`plot_regime` draws them. Must not know how notebooks are rendered or how numbers are made.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from timestep_lab.artifacts.floor import FID_TOOL_ORDER, floor_record
from timestep_lab.artifacts.io import read_json
from timestep_lab.evidence.convergence import plateau, span_text
from timestep_lab.evidence.stats import paired

__all__ = ["summary_floor", "long_run", "gap_shares", "regime", "plot_regime", "regime_lines", "show_regime"]

HEADLINE_TOOL = FID_TOOL_ORDER[0]


def summary_floor(summary: str | Path | Mapping[str, Any] | None) -> Any:
    """``summary.json["floor"]`` (a path or the summary dict), None when the study has none."""
    if summary is None or (isinstance(summary, (str, Path)) and not Path(str(summary)).is_file()):
        return None
    data = read_json(summary) if isinstance(summary, (str, Path)) else summary
    return (data or {}).get("floor")


def long_run(metrics: pd.DataFrame, runs: pd.DataFrame, tool: str = HEADLINE_TOOL) -> dict[str, Any] | None:
    """The reference's progress curve and final FID (group ``reference``), or None if not followed."""
    in_ref = metrics["groups"].fillna("").astype(str).str.split(";").apply(lambda g: "reference" in g)
    m = metrics[in_ref & (metrics["metric"] == "fid") & (metrics["tool"] == tool)]
    prog = m[m["stage"] == "progress"].sort_values("kimg")
    if not len(prog):
        return None
    final = m[m["stage"] == "final"]
    r = runs[runs["run"] == "reference"]
    return {"kimg": prog["kimg"].astype(float).tolist(), "fid": prog["value"].astype(float).tolist(),
            "n_progress": int(prog["num_generated"].iloc[0]) if "num_generated" in prog else None,
            "final": float(final["value"].iloc[0]) if len(final) else None,
            "n_final": int(final["num_generated"].iloc[0]) if len(final) and "num_generated" in final else None,
            "final_kimg": float(r["nimg"].iloc[0]) / 1000 if len(r) and pd.notna(r["nimg"].iloc[0]) else prog["kimg"].max(),
            "batch_size": int(r["batch_size"].iloc[0]) if len(r) and "batch_size" in r else None}


def gap_shares(per_seed: pd.DataFrame, baseline: str, floor: float | None) -> pd.DataFrame:
    """Per arm of a :func:`~timestep_lab.reporting.curves.per_seed_table`: the share of the
    baseline's gap to ``floor`` the arm closes, per seed, with mean and 95% t-interval over seeds."""
    if floor is None or baseline not in per_seed.index:
        return pd.DataFrame()
    base = per_seed.loc[baseline]
    rows = []
    for arm, vals in per_seed.iterrows():
        if arm == baseline:
            continue
        keep = vals.notna() & base.notna() & (base - floor > 0)
        if not keep.any():  # no seed in common with the baseline
            continue
        shares = ((base[keep] - vals[keep]) / (base[keep] - floor)).astype(float)
        p = paired(np.zeros(len(shares)), shares.values)
        rows.append({"arm": arm, "n": p.n, "share": p.diff, "ci_low": p.ci_low, "ci_high": p.ci_high,
                     **{c: shares[c] for c in shares.index}})
    return pd.DataFrame(rows)


def _value_at(kimg: list[float], fid: list[float], at: float) -> tuple[float, float]:
    """The progress point nearest to ``at`` kimg: ``(kimg, fid)``."""
    i = int(np.argmin(np.abs(np.asarray(kimg) - at)))
    return kimg[i], fid[i]


def regime(metrics: pd.DataFrame, runs: pd.DataFrame, per_seed: pd.DataFrame, baseline: str | None,
           summary: str | Path | Mapping[str, Any] | None, *, group_kimg: float | None,
           group_n: int | None, tool: str = HEADLINE_TOOL) -> dict[str, Any]:
    """Every number of the regime block (module docstring), for the text and the figure.

    :param per_seed: the group's final FID per arm and seed (``per_seed_table``).
    :param group_kimg: the group's training length; ``group_n``: its final FID's sample count.
    """
    floor = floor_record(summary_floor(summary), tool)
    out: dict[str, Any] = {"floor": floor, "group_kimg": group_kimg, "group_n": group_n, "baseline": baseline}
    lr = long_run(metrics, runs, tool)
    out["long"] = lr
    if lr:
        k = lr["kimg"]
        out["long_at_group"] = _value_at(k, lr["fid"], group_kimg) if group_kimg else None
        # converged? the scorecard's one rule (evidence.convergence), on the long run's curve
        out["long_plateau"] = plateau([(k, lr["fid"])])
    if baseline and baseline in per_seed.index:
        out["baseline_mean"] = float(per_seed.loc[baseline].mean())
    out["shares"] = gap_shares(per_seed, baseline, floor["value"] if floor else None) if baseline else pd.DataFrame()
    return out


def _floor_ratio(fid: float, n: int | None, f: Mapping[str, Any] | None) -> str:
    """`", 15x the floor at the same 128 samples (...)."`: a FID at ``n`` samples over the floor at
    ``n`` (the record's own count, or its ``at_counts``); no ratio when the floor has no value at
    ``n`` (issue 42: a progress FID at 128 samples over the floor at 359 read 18x, about 15x
    matched; FID falls with the sample count)."""
    if not f:
        return "."
    if n is not None and n == f.get("num_samples"):
        return f", {fid / f['value']:.2g}x the floor (both at {n} samples)."
    matched = (f.get("at_counts") or {}).get(str(n)) if n is not None else None
    if matched:
        return (f", {fid / matched:.2g}x the floor at the same {n} samples ({matched:.3g}; "
                f"{f['value']:.3g} at its {f.get('num_samples')})."
                )
    return (f"; the floor was scored at {f.get('num_samples')} samples, not at these points' {n}: no ratio "
            "(FID falls with the sample count).")


def regime_lines(r: Mapping[str, Any], label: str) -> list[str]:
    """The regime block's sentences, every number from ``r`` (:func:`regime`)."""
    lines = []
    f = r.get("floor")
    if f:
        ci = f.get("ci") or [None, None]
        interval = f" [{ci[0]:.3g}, {ci[1]:.3g}]" if None not in ci else ""
        matched = "" if r.get("group_n") in (None, f.get("num_samples")) else \
            f" (note: at {f.get('num_samples')} samples, this group's final FIDs at {r['group_n']}: FID's bias " \
            f"depends on the count)"
        lines.append(f"- **Floor**: the held-out split's {label} against the training set is {f['value']:.3g}{interval} "
                     f"(95% bootstrap interval, {f.get('num_samples')} samples){matched}.")
    else:
        lines.append("- **Floor**: floor not computed in this study (no held-out FID in summary.json).")
    lr = r.get("long")
    if lr:
        at = r.get("long_at_group")
        p = r.get("long_plateau")
        state = ("whether it has converged is unknown (fewer than 2 points)" if p is None else
                 f"over {span_text(p['from_kimg'], p['to_kimg']).replace('the last', 'its last', 1)} "
                 f"({p['from_kimg']:.3g} -> {p['to_kimg']:.3g} kimg) its FID fell {p['drop']:.0%}: "
                 + (f"converged by the scorecard's rule (less than {p['threshold']:.0%})" if p["converged"] else
                    f"not converged by the scorecard's rule (not under {p['threshold']:.0%})"))
        text = (f"- **Long run**: the reference (uniform t, batch {lr['batch_size']}) trained for {lr['final_kimg']:.4g} kimg; "
                f"its FID during training ({lr['n_progress']} samples per point) went from {lr['fid'][0]:.3g} at "
                f"{lr['kimg'][0]:.3g} kimg to {lr['fid'][-1]:.3g} at {lr['kimg'][-1]:.3g} kimg; {state}.")
        if lr.get("final") is not None:
            text += f" Its final {label} is {lr['final']:.3g} ({lr['n_final']} samples)."
        if at and r.get("group_kimg"):
            text += (f" At {at[0]:.3g} kimg, this group's length ({r['group_kimg']:.3g} kimg), it stood at {at[1]:.3g}: "
                     f"{at[1] / lr['fid'][-1]:.2g}x its last value")
            text += _floor_ratio(at[1], lr.get("n_progress"), f)
        lines.append(text)
    else:
        lines.append("- **Long run**: no long run in this study (reference.progress_every_kimg not set).")
    shares = r.get("shares")
    if f and shares is not None and len(shares):
        base = r.get("baseline_mean")
        lines.append(f"- **Gap to the floor**: the baseline ({r['baseline']}) ends at {base:.3g}, "
                     f"{base - f['value']:.3g} above the floor. Share of that gap each arm closes (per seed, "
                     f"mean and 95% t-interval over seeds; negative: it widens the gap):")
        for _, s in shares.iterrows():
            ci = f" [{100 * s['ci_low']:+.0f}%, {100 * s['ci_high']:+.0f}%]" if pd.notna(s["ci_low"]) else " (no interval)"
            lines.append(f"  - {s['arm']}: {100 * s['share']:+.0f}%{ci}, {int(s['n'])} seed{'s' if s['n'] != 1 else ''}")
    return lines


def plot_regime(r: Mapping[str, Any], per_seed: pd.DataFrame, label: str) -> plt.Figure | None:
    """The long run's curve, the floor (band: its interval) and each arm's mean final FID at the
    group's length (dots: seeds)."""
    lr, f = r.get("long"), r.get("floor")
    if not lr and not f:
        return None
    fig, ax = plt.subplots(figsize=(8, 4.2))
    if lr:
        ax.plot(lr["kimg"], lr["fid"], "k-o", ms=3, lw=2, label=f"long run (reference), {lr['n_progress']} samples/point")
        if lr.get("final") is not None:
            ax.scatter([lr["final_kimg"]], [lr["final"]], marker="*", s=120, color="k", zorder=5,
                       label=f"long run, final ({lr['n_final']} samples)")
    if f:
        ax.axhline(f["value"], color="C2", lw=1.5, label=f"floor: held-out vs train ({f.get('num_samples')} samples)")
        ci = f.get("ci")
        if ci and None not in ci:
            ax.axhspan(ci[0], ci[1], color="C2", alpha=0.15)
    if r.get("group_kimg") and len(per_seed):
        for i, (arm, vals) in enumerate(per_seed.iterrows()):
            v = vals.dropna().astype(float)
            x = r["group_kimg"] * (1 + 0.02 * (i - len(per_seed) / 2))
            ax.scatter([x] * len(v), v, s=10, color=f"C{i % 10}", alpha=0.6)
            ax.scatter([x], [v.mean()], s=40, color=f"C{i % 10}", edgecolor="k", label=f"{arm} (final, mean)")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("images seen (kimg, log)")
    ax.set_ylabel(f"{label} (log)")
    ax.set_title("where this group's runs sit on the long run's curve, and the floor", fontsize=10)
    ax.legend(fontsize=7)
    fig.tight_layout()
    return fig


def show_regime(study: Any, metrics_csv: str | Path, runs_csv: str | Path, summary: str | Path | None,
                per_seed: pd.DataFrame, baseline: str | None) -> dict[str, Any]:
    """Displays the regime block of a report (sentences and figure) for ``study``'s group and
    returns :func:`regime`'s numbers. ``per_seed``: the group's final FID per arm and seed."""
    from IPython.display import Markdown, display

    metrics, runs = pd.read_csv(metrics_csv), pd.read_csv(runs_csv)
    final = study.fid("final", study.tool)
    group_kimg = float(study.runs["nimg"].median()) / 1000 if len(study.runs) and study.runs["nimg"].notna().any() else None
    group_n = int(final["num_generated"].iloc[0]) if len(final) and "num_generated" in final else None
    r = regime(metrics, runs, per_seed, baseline, summary, group_kimg=group_kimg, group_n=group_n, tool=study.tool)
    display(Markdown("\n".join(regime_lines(r, study.label))))
    fig = plot_regime(r, per_seed, study.label)
    if fig is not None:
        plt.show()
    return r
