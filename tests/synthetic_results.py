"""A small synthetic results folder with every file the eight reports read, and the numbers the
reports' text must repeat (tests/test_reports.py).

Values are chosen so that a report whose prose went stale shows it: odd seed sets (0, 1, 3),
fine-tuned slots 2 and 7 (not the paper's 3, 5, 7, 9), a mixed head whose per-seed FIDs differ
from their mean, three consistency models (three pairs), a floor of 7.77. Analyses whose
computation is cheap (interference against the control, the test over models, slots, posterior
coefficients) are computed by the real functions on synthetic inputs; the rest is written as the
analysis commands write it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from timestep_lab.artifacts.samples_file import save_controls
from timestep_lab.workflow.runs import arm_id

#: the synthetic study's own column values (workflow.runs.base_columns): batch 64, width 16, 12 kimg
SYN_BASE = {"batch_size": 64, "channels": 16, "total_kimg": 12, "sample_shift": 1.0}

SEEDS = (0, 1, 3)
T = 100
LABEL = "FID (digits-CNN features)"
FLOOR = {"tool": "torch-fidelity", "metric": "fid", "value": 7.77, "ci": [6.5, 9.25], "num_samples": 359,
         "extractor": "digits-cnn", "reference_sha256": "ab" * 32, "at_counts": {"200": 9.5}}
FINETUNED_SLOTS = (2, 7)
MIXED_FIDS = {0: 255.2, 1: 262.0, 3: 255.5}  # the per-seed values, not their mean


@dataclass
class Synthetic:
    root: Path
    paths: dict[str, str] = field(default_factory=dict)  # report parameter -> path
    expect: dict[str, Any] = field(default_factory=dict)


def _rid(sampler="uniform", weighting="none", pred="eps", batch=64, schedule="linear", seed=0, extra=""):
    return f"{sampler}_{weighting}_{pred}_b{batch}_{schedule}_s{seed}{extra}"


def _fid(run: str, seed: int) -> float:
    """A deterministic final FID per run (distinct per seed, so no table can repeat a mean)."""
    if "_mixed_" in run:
        return MIXED_FIDS[seed]
    base = 140.0 + (sum(map(ord, run.replace(f"_s{seed}", ""))) % 37) - 5.0 * (run.startswith("speed"))
    return round(base + 3.1 * seed + 0.7 * (seed == 1), 2)


def _write_log(path: Path, nimg: int, batch: int, mixed: bool, stateful: bool) -> None:
    recs = []
    for i, frac in enumerate((1 / 3, 2 / 3, 1.0)):
        n = int(nimg * frac)
        rec = {"kimg": n / 1000, "nimg": n, "step": n // batch, "wall_time_s": 5.0 * frac * (64 / batch),
               "sec_per_step": 0.04, "loss": 0.3 - 0.05 * i, "grad_norm": 1.0}
        if mixed:
            rec["mixed_head_fraction"] = {"eps": [0.2] * 10, "x0": [0.5 + 0.1 * i] * 10, "v": [0.3 - 0.1 * i] * 10}
        if stateful:
            rec["sampler"] = {"p_bins": [0.1] * 10}
        recs.append(rec)
    path.write_text("\n".join(json.dumps(r) for r in recs) + "\n")


def _profile(eps: np.ndarray, x0: np.ndarray | None = None, **kw) -> dict[str, Any]:
    ts = list(range(0, T, 10)) + [T - 1]
    x0 = eps if x0 is None else x0
    return {"format": "timestep_lab.loss_profile/1", "T": T, "stride": 10, "num_images": 16, "seed": 1234,
            "prediction": "eps", "image_shape": [1, 8, 8], "timesteps": ts, "eps_mse": [float(v) for v in eps],
            "eps_mse_sem": [0.01 * float(v) for v in eps], "x0_mse": [float(v) for v in x0],
            "vlb_bpd": [0.1] * len(ts), "loss": [float(v) for v in eps], "loss_sem": [0.0] * len(ts),
            "grad": {"timesteps": [0, 50, 99], "norm_mean": [8.0, 2.0, 0.4], "norm_var": [1.2, 0.2, 0.03],
                     "cov_trace": [60.0, 3.5, 0.12], "mean_sq_norm": [4.0, 0.5, 0.04], "samples": 4},
            **kw}


def make_results(root: Path) -> Synthetic:
    """Writes ``root/results/syn`` and returns the report parameters and expected numbers."""
    from timestep_lab.processes.diffusion import GaussianDiffusion
    from timestep_lab.processes.schedules import get_schedule
    from timestep_lab.studies.consistency import consistency_test, paired_distance
    from timestep_lab.studies.contribution import posterior_coefficients, replacement_ranges
    from timestep_lab.studies.interference import interference_matrix, interference_vs_control
    from timestep_lab.studies.slots import equal_loss_slots, slot_sums
    from timestep_lab.workflow.collect import summarize, write_verdicts

    res = root / "results" / "syn"
    (res / "analyses" / "profiles").mkdir(parents=True)
    syn = Synthetic(root)
    # ------------------------------------------------------------------ runs
    runs: dict[str, dict[str, Any]] = {}

    def add(rid, groups, progress, *, sampler="uniform", weighting="none", pred="eps", batch=64, schedule="linear",
            seed=0, optim="constant", compensate=False, channels=16, nimg=12032, init_from="none"):
        r = runs.setdefault(rid, {"run": rid, "sampler": sampler, "weighting": weighting, "prediction": pred,
                                  "batch_size": batch, "schedule": schedule, "seed": seed, "groups": [],
                                  "optim_schedule": optim, "lr_compensated": compensate, "channels": channels,
                                  "nimg": nimg, "init_from": init_from, "sample_shift": 1.0, "progress": set()})
        r["groups"] += [g for g in groups if g not in r["groups"]]
        r["progress"] |= set(progress)

    sc_kimg, group_kimg = (1.5, 4.5, 9.0, 12.0), (4.0, 8.0, 12.0)
    for s in SEEDS:
        for sampler, w in (("uniform", "none"), ("speed", "speed"), ("adaptive", "none"), ("clts", "none")):
            add(_rid(sampler, w, seed=s), ["sampler_comparison"], sc_kimg, sampler=sampler, weighting=w, seed=s)
        for sampler, w in (("uniform", "none"), ("speed", "speed")):
            for sch in ("linear", "cosine"):
                add(_rid(sampler, w, schedule=sch, seed=s), ["schedules"], group_kimg, sampler=sampler, weighting=w,
                    schedule=sch, seed=s)
        for pred in ("eps", "x0", "v", "mixed"):
            add(_rid(pred=pred, seed=s), ["prediction_types"], group_kimg, pred=pred, seed=s)
        for pred in ("x0", "v"):  # at the eps loss's per-t weighting (issue 42)
            add(_rid(weighting="eps-units", pred=pred, seed=s), ["prediction_types"], group_kimg, weighting="eps_units",
                pred=pred, seed=s)
        for b in (16, 64):
            add(_rid(batch=b, seed=s), ["batch_size"], group_kimg, batch=b, seed=s)
        # batch 16 at equal optimizer steps with batch 64 (a quarter of the images)
        add(_rid(batch=16, seed=s, extra="_kimg3"), ["batch_size"], (3.0,), batch=16, seed=s, nimg=3008)
        add(_rid(seed=s), ["consistency"], group_kimg, seed=s)
        for tag, comp in (("_optmomentum-decay_paramsbeta1-min-0.5-decay-kimg-8", False),
                          ("_optmomentum-decay_paramsbeta1-min-0.5-decay-kimg-8-compensate-Tr", True)):
            add(_rid(seed=s, extra=tag), ["consistency"], group_kimg, seed=s, optim="momentum_decay", compensate=comp)
    add(_rid(seed=5, extra="_ch24"), ["consistency"], group_kimg, seed=5, channels=24)
    for s in SEEDS:  # the flow group: its baseline and one density arm, paired by seed
        for label, sampler in (("uniform", "uniform"), ("logit-normal", "logit_normal")):
            add(_rid(label, pred="v", seed=s, extra="_flow_heun_kimg8"), ["flow_matching"], (4.0, 8.0),
                sampler=sampler, pred="v", seed=s, nimg=8000)
    small = _rid(batch=16, seed=0)
    add(f"toward_zero_from-{small}", ["batch_size"], (), sampler="toward_zero", batch=16, seed=0, nimg=16000,
        init_from=small)
    add(f"uniform_from-{small}", ["batch_size"], (), batch=16, seed=0, nimg=16000, init_from=small)
    add("reference", ["reference"], (12.0, 24.0, 36.0, 48.0), nimg=48000)
    long_fids = {12.0: 150.0, 24.0: 60.0, 36.0: 41.0, 48.0: 38.0}
    # ------------------------------------------------------------------ tables
    rows, run_rows = [], []
    proto = {"tool_version": "x", "feature_extractor": "digits-cnn", "feature_weights_sha256": "cd" * 32, "label": LABEL,
             "num_reference": 1438, "steps": 20, "eta": 0.0, "ema": True, "reference_file": "ref.npz",
             "reference_sha256": "ab" * 32, "method": "ddim"}
    for rid, r in runs.items():
        base = {k: r[k] for k in ("run", "sampler", "weighting", "prediction", "batch_size", "schedule", "seed",
                                  "optim_schedule", "channels")}
        base.update(arm=arm_id(rid, r["seed"]), groups=";".join(r["groups"]), lr_compensated=r["lr_compensated"],
                    total_kimg=round(r["nimg"] / 1000), init_from=r["init_from"], sample_shift=r["sample_shift"])
        value = 30.5 if rid == "reference" else _fid(rid, r["seed"])
        for tool in ("torch-fidelity", "clean-fid"):
            rows.append({**base, **proto, "stage": "final", "nimg": r["nimg"], "metric": "fid", "value": value,
                         "tool": tool, "num_generated": 359, "seeds": "0-358"})
        for k in sorted(r["progress"]):
            v = long_fids[k] if rid == "reference" else value * (12.0 / k) ** 0.5
            rows.append({**base, **proto, "stage": "progress", "nimg": int(k * 1000), "metric": "fid", "value": v,
                         "tool": "torch-fidelity", "num_generated": 200, "seeds": "0-199"})
        log = res / "runs" / rid / "train_log.jsonl"
        log.parent.mkdir(parents=True)
        _write_log(log, r["nimg"], r["batch_size"], r["prediction"] == "mixed", r["sampler"] == "adaptive")
        run_rows.append({**base, "status": "ok", "nimg": r["nimg"], "final_loss": 0.2, "sec_per_step": 0.04,
                         "wall_time_s": 5.0, "train_log": str(log)})
    metrics = pd.DataFrame(rows)
    metrics["kimg"] = metrics["nimg"] / 1000
    table = pd.DataFrame(run_rows)
    metrics.to_csv(res / "metrics.csv", index=False)
    table.to_csv(res / "runs.csv", index=False)
    summary = summarize(metrics, table, base=SYN_BASE)
    summary["floor"] = {"format": "timestep_lab.floor/1", "records": [FLOOR]}
    (res / "summary.json").write_text(json.dumps(summary))
    syn.expect["per_seed"] = {rid: _fid(rid, r["seed"]) for rid, r in runs.items() if rid != "reference"}
    # ------------------------------------------------------------------ loss profiles and slots
    t = np.array(list(range(0, T, 10)) + [T - 1], float)
    ref_eps = 1.0 * np.exp(-t / 20) + 0.007
    opt = np.where(t < 20, 0.0, 0.02 * np.exp(-((t - 40) / 25) ** 2)) + 1e-5
    prof_ref = _profile(ref_eps, model={"path": "results/syn/runs/reference/model.pt", "nimg": 48000})
    prof_opt = _profile(opt, opt * 3, model={"kind": "optimal denoiser", "train_images": 64})
    prof_opt["prediction"] = "optimal"
    held = opt + np.where(t < 20, 40.0 * np.exp(-t / 5), 0.0)  # leave-one-out: far above the model near t = 0
    prof_opt["heldout"] = {"definition": "leave-one-out", "eps_mse": held.tolist(), "x0_mse": (held * 3).tolist()}
    syn.expect["heldout_floor_t0"] = float(held[0])
    profiles = res / "analyses" / "profiles"
    (profiles / "reference.json").write_text(json.dumps(prof_ref))
    (profiles / "optimal.json").write_text(json.dumps(prof_opt))
    full = np.interp(np.arange(T), t, ref_eps)
    slots = equal_loss_slots(full, 10)
    excess = np.clip(full - np.interp(np.arange(T), t, opt), 0, None)
    ex_slots = equal_loss_slots(excess, 10)
    (res / "analyses" / "slots.json").write_text(json.dumps({
        "T": T, "n_slots": 10, "key": "eps_mse", "slots": [list(s) for s in slots], "sums": slot_sums(full, slots),
        "total": float(full.sum()), "paper_slots": [[0, 4], [5, 12], [13, 22], [23, 36], [37, 55], [56, 81], [82, 119],
                                                    [120, 176], [177, 276], [277, 999]],
        "paper_slots_scaled": [[0, 0], [1, 1], [2, 2], [3, 3], [4, 5], [6, 8], [9, 12], [13, 18], [19, 28], [29, 99]],
        "excess": {"slots": [list(s) for s in ex_slots], "sums": slot_sums(excess, ex_slots), "total": float(excess.sum()),
                   "share_of_total": float(excess.sum() / full.sum())}}))
    rng = np.random.default_rng(0)
    batch_profiles = []
    for rid in (r for r in runs if "batch_size" in runs[r]["groups"]):
        scale = 1.3 if runs[rid]["batch_size"] == 16 else 1.0
        if rid.startswith("toward_zero"):
            scale = np.where(t < 10, 1.1, 1.6)
        elif rid.startswith("uniform_from"):
            scale = 1.2
        (profiles / f"{rid}.json").write_text(json.dumps(_profile(ref_eps * scale)))
        batch_profiles.append(str(profiles / f"{rid}.json"))
    # ------------------------------------------------------------------ slot interference
    fts, ctls = {}, {}
    for s in (0, 4):
        ctls[s] = _profile(ref_eps * (1.05 + 0.01 * s))
        fts[s] = {k: _profile(ref_eps * (1.05 + 0.01 * s) * np.where((t >= slots[k - 1][0]) & (t <= slots[k - 1][1]),
                                                                     0.9, 1.2 + 0.05 * rng.random(len(t))))
                  for k in FINETUNED_SLOTS}
    (res / "analyses" / "interference.json").write_text(json.dumps(interference_matrix(prof_ref, fts[0], slots)))
    ctl = interference_vs_control(prof_ref, fts, ctls, slots)
    (res / "analyses" / "interference_control.json").write_text(json.dumps(ctl))
    syn.expect["interference_seeds"] = [0, 4]
    # ------------------------------------------------------------------ contribution and posterior
    diffusion = GaussianDiffusion(get_schedule("linear", T))
    post = posterior_coefficients(diffusion)
    post["ranges"] = replacement_ranges([[1, 500], [500, 1000], [10, 100]], T)
    (res / "analyses" / "posterior.json").write_text(json.dumps(post))
    arms = [("none", "none", None, None, 0, 117.3, 0.31, 0.0), ("final", "final", [0, 0], None, 1, 8.8, 0.0, 1.0),
            ("t1-500", "range", [1, 49], [1, 500], 49, 9.1, 0.01, 0.4), ("t500-1000", "range", [49, 99], [500, 1000], 51,
                                                                             121.6, 0.3, 0.0),
            ("t10-100", "range", [1, 9], [10, 100], 9, 44.4, 0.12, 0.0)]
    contrib_dir = res / "analyses" / "contribution"
    arm_rows = []
    for label, kind, replaced, paper, steps, fid, rms, copies in arms:
        (contrib_dir / label).mkdir(parents=True)
        np.savez(contrib_dir / label / "samples.npz", images=rng.integers(0, 256, (16, 8, 8, 1), dtype=np.uint8),
                 seeds=np.arange(16))
        row = {"label": label, "kind": kind, "replaced": replaced, "paper": paper, "chain_steps": steps,
               "fid": {"torch-fidelity": fid}, "fid_bootstrap": {"value": fid, "ci": [fid * 0.9, fid * 1.1], "sd": 1.0},
               "rms_to_heldout": {"mean": rms, "ci": [rms * 0.9, rms * 1.1]}, "copies": copies}
        if label != "final":
            row["minus_final"] = {"value": fid - 8.8, "ci": [fid - 8.8 - 2, fid - 8.8 + 2]}
        if label != "none":
            row["minus_none"] = {"value": fid - 117.3, "ci": [fid - 117.3 - 3, fid - 117.3 + 3]}
        arm_rows.append(row)
    (res / "analyses" / "contribution.json").write_text(json.dumps({
        "format": "timestep_lab.contribution/2", "label": LABEL, "num_samples": 359,
        "chain": {"method": "ddpm", "steps": T, "num_timesteps": T, "eta": None, "spacing": "uniform", "final_step": 0,
                  "min_steps": 3, "timesteps": list(range(T))},
        "model": {"model": "m.pt", "model_sha256": "0", "model_format": "timestep_lab", "nimg": 48000,
                  "conditioning": {"name": "lowres", "params": {"factor": 2, "upsample": "nearest"}}},
        "bootstrap": {"replicates": 200, "seed": 0, "level": 0.95, "interval": "bootstrap"}, "arms": arm_rows}))
    syn.expect["contribution"] = {label: fid for label, _, _, _, _, fid, _, _ in arms}
    # ------------------------------------------------------------------ prediction types
    base_err = 0.3 * np.ones(len(t))
    eps_err = 0.01 * np.exp(t / 12)
    x0_mse = {"eps": eps_err, "x0": base_err, "v": np.minimum(eps_err, base_err) * 1.3,
              "mixed": np.minimum(eps_err, base_err) * 1.1, "mixed/eps": eps_err * 1.05, "mixed/x0": base_err * 1.02,
              "mixed/v": np.minimum(eps_err, base_err) * 1.4}
    heads = ["eps" if a < b else "x0" for a, b in zip(x0_mse["mixed/eps"], x0_mse["mixed/x0"])]
    (res / "analyses" / "prediction_types.json").write_text(json.dumps({
        "T": T, "stride": 10, "num_images": 16, "seed": 1234, "timesteps": [int(v) for v in t],
        "predictions": {"eps": "eps", "x0": "x0", "v": "v", "mixed": "mixed"},
        "x0_mse": {k: [float(x) for x in v] for k, v in x0_mse.items()},
        "heads": {"mixed": {"winner": heads, "wins": [], "head_per_t": [0] * T, "win_counts": {}}},
        "optimal_x0_mse": [float(x) for x in opt * 3],
        "x0_excess": {k: [float(a - b) for a, b in zip(v, opt * 3)] for k, v in x0_mse.items()}}))
    # ------------------------------------------------------------------ consistency
    common = rng.integers(0, 256, (40, 8, 8, 1))
    sets, files = {}, {}
    for name in (_rid(seed=0), _rid(seed=1), _rid(seed=5, extra="_ch24")):
        imgs = np.clip(common + rng.normal(0, 20, common.shape), 0, 255).astype(np.uint8)
        sets[name] = imgs
        files[name] = str(res / "runs" / name / "samples.npz")
        np.savez(files[name], images=imgs, seeds=np.arange(40))
    controls = {"gaussian": np.clip(common + rng.normal(0, 40, common.shape), 0, 255).astype(np.uint8)}
    save_controls(res / "analyses" / "consistency_controls.npz", np.arange(40), controls)
    names = list(sets)
    pairs = [{"a": a, "b": b, **paired_distance(sets[a], sets[b])} for i, a in enumerate(names) for b in names[i + 1:]]
    test = consistency_test(sets, controls, permutations=19)
    (res / "analyses" / "consistency.json").write_text(json.dumps({
        "sets": files, "controls_file": str(res / "analyses" / "consistency_controls.npz"),
        "sampler": {"method": "ddim", "steps": 20, "eta": 0.0}, "pairs": pairs, **test}, default=float))
    syn.expect["consistency_models"] = len(names)
    # ------------------------------------------------------------------ verdicts and parameters
    write_verdicts(str(res / "metrics.csv"), str(res / "verdicts.json"), runs_csv=str(res / "runs.csv"),
                   interference=str(res / "analyses" / "interference_control.json"),
                   consistency=str(res / "analyses" / "consistency.json"), base=SYN_BASE, study="syn")
    a = res / "analyses"
    syn.paths = {
        "metrics_csv": str(res / "metrics.csv"), "runs_csv": str(res / "runs.csv"), "summary": str(res / "summary.json"),
        "verdicts": str(res / "verdicts.json"), "results_dir": str(res), "profile": str(a / "profiles" / "reference.json"),
        "optimal": str(a / "profiles" / "optimal.json"), "slots": str(a / "slots.json"),
        "interference": str(a / "interference.json"), "interference_control": str(a / "interference_control.json"),
        "profiles": ",".join(batch_profiles), "contribution": str(a / "contribution.json"),
        "posterior": str(a / "posterior.json"), "prediction_profile": str(a / "prediction_types.json"),
        "consistency": str(a / "consistency.json"), "controls": str(a / "consistency_controls.npz"), "run_configs": "",
    }
    return syn
