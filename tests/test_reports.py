"""Every report rendered from a small synthetic results folder (tests/synthetic_results.py), its
text checked against the numbers in that folder: no prose can go stale, every figure is drawn.

The notebooks run in this process (their cells executed in order, the parameters cell followed by
the test's values, ``display`` captured), not through the renderer: the smoke study renders them
(tests/test_pipeline.py); this checks what they *say*.
"""

from __future__ import annotations

import html
import json
import re
from pathlib import Path

import matplotlib
import pytest

matplotlib.use("Agg")

from synthetic_results import FINETUNED_SLOTS, FLOOR, MIXED_FIDS, make_results  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]

PARAMS = {  # report -> {notebook parameter: key of Synthetic.paths}
    "sampler_comparison": {k: k for k in ("metrics_csv", "runs_csv", "summary", "verdicts", "results_dir")},
    "schedules": {k: k for k in ("metrics_csv", "runs_csv", "summary", "verdicts", "results_dir")},
    "loss_profile": {"profile": "profile", "slots": "slots", "optimal": "optimal", "verdicts": "verdicts",
                     "results_dir": "results_dir"},
    "slot_finetune": {k: k for k in ("interference", "interference_control", "slots", "verdicts", "results_dir")},
    "batch_size": {k: k for k in ("metrics_csv", "runs_csv", "profiles", "optimal", "summary", "verdicts",
                                  "results_dir")},
    "timestep_contribution": {k: k for k in ("contribution", "posterior", "summary", "verdicts", "results_dir")},
    "prediction_types": {"profile": "prediction_profile", **{k: k for k in ("metrics_csv", "runs_csv", "summary",
                                                                             "verdicts", "results_dir")}},
    "consistency": {k: k for k in ("consistency", "controls", "metrics_csv", "runs_csv", "summary", "verdicts",
                                   "results_dir")},
    "flow_matching": {k: k for k in ("metrics_csv", "runs_csv", "summary", "verdicts", "results_dir", "run_configs")},
}


def _text(obj) -> str:
    if type(obj).__name__ == "Markdown":
        return obj.data
    if hasattr(obj, "data") and isinstance(obj.data, str):  # HTML
        raw = obj.data
    elif hasattr(obj, "to_html"):  # a DataFrame or a Styler
        raw = obj.to_html()
    else:
        raw = str(obj)
    return html.unescape(re.sub(r"<[^<>]+>", " ", raw))


def run_report(name: str, params: dict[str, str], monkeypatch) -> tuple[str, int]:
    """Executes reports/<name>.py cell by cell; returns everything it displayed, as text, and how
    many figures it showed."""
    import IPython.display
    import jupytext
    import matplotlib.pyplot as plt

    import timestep_lab.reporting.notebook as nbmod

    shown: list[str] = []
    figures = [0]

    def display(*objs, **_):
        shown.extend(_text(o) for o in objs)

    def show(*_, **__):
        figures[0] += len(plt.get_fignums())
        plt.close("all")

    monkeypatch.setattr(IPython.display, "display", display)
    monkeypatch.setattr(nbmod, "display", display)
    monkeypatch.setattr(plt, "show", show)
    nb = jupytext.read(ROOT / "reports" / f"{name}.py")
    ns: dict = {"__name__": f"report_{name}"}
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        exec(compile(cell.source, f"{name}.py", "exec"), ns)  # noqa: S102 - our own notebooks
        if "parameters" in cell.metadata.get("tags", []):
            ns.update(params)
    plt.close("all")
    return "\n".join(shown), figures[0]


@pytest.fixture(scope="module")
def synthetic(tmp_path_factory):
    return make_results(tmp_path_factory.mktemp("syn"))


@pytest.fixture
def render(synthetic, monkeypatch):
    def go(name):
        params = {p: synthetic.paths[k] for p, k in PARAMS[name].items()}
        return run_report(name, params, monkeypatch)
    return go


def _numbers(text: str) -> set[str]:
    return set(re.findall(r"-?\d+\.\d+|\d+", text))


def test_sampler_comparison_says_what_ran_and_the_regime(render, synthetic):
    text, figs = render("sampler_comparison")
    assert figs >= 4
    assert "`adaptive+none`: 3 seeds (0, 1, 3)" in text and "`speed+speed`: 3 seeds (0, 1, 3)" in text
    assert "loss-second-moment" not in text and "slot-balanced" not in text  # arms that did not run are not promised
    assert f"{FLOOR['value']:.3g} [{FLOOR['ci'][0]:.3g}, {FLOOR['ci'][1]:.3g}]" in text  # the floor, from summary.json
    assert "359 samples" in text and "trained for 48 kimg" in text
    # issue 42: the long run's FID at 200 samples is set against the floor at 200, not at 359
    assert f"{150.0 / FLOOR['at_counts']['200']:.2g}x the floor at the same 200 samples" in text
    from timestep_lab.reporting.regime import _floor_ratio
    assert "no ratio" in _floor_ratio(150.0, 128, FLOOR) and "x the floor" not in _floor_ratio(150.0, 128, FLOOR)
    assert _floor_ratio(150.0, 359, FLOOR).startswith(f", {150.0 / 7.77:.2g}x the floor (both at 359 samples)")
    # issue 42: CLTS named a reconstruction; step cost from the controlled benchmark, not the shared-CPU logs
    assert "**CLTS is a reconstruction.**" in text and "`clts+none`: 3 seeds (0, 1, 3)" in text
    from timestep_lab.cost.step_overhead import CONTROLLED
    assert "step time vs uniform (controlled)" in text
    assert f"{CONTROLLED['adaptive']:.3f}" in text and f"{CONTROLLED['clts']:.3f}" in text
    for rid, fid in synthetic.expect["per_seed"].items():
        if rid.startswith(("adaptive_none_eps_b64_linear", "speed_speed_eps_b64_linear")):
            assert f"{fid:.2f}" in text, rid  # the per-seed table straight from the data


def test_schedules_lists_exactly_what_ran(render):
    text, figs = render("schedules")
    assert figs >= 2
    assert "Not run in this study, although 2411.09998 uses them: sampler `adaptive`, schedule `quad`" in text
    assert "`speed+speed` under `cosine`: 3 seeds (0, 1, 3)" in text
    assert "one seed there is no interval" not in text and "Kendall" not in text
    assert "effect under cosine minus under linear" in text and "(3 seeds)" in text


def test_prediction_types_per_seed_table_is_the_data(render, synthetic):
    text, figs = render("prediction_types")
    assert figs >= 3
    for fid in MIXED_FIDS.values():
        assert f"{fid:.2f}" in text  # 255.20, 262.00, 255.50: not their mean three times
    assert f"{sum(MIXED_FIDS.values()) / 3:.2f}" not in text.split("What our numbers show")[0]
    assert "`x0` prediction: 3 seeds (0, 1, 3)" in text and "`v` prediction: 3 seeds" in text
    # the mixed model's heads: eps near 0, x0 near T, as the paper expects
    assert "Among the mixed model's heads (mixed): lowest x0 error for t <= 10 mostly **eps**, for t >= 90 mostly **x0**" \
           ". The paper expects eps near 0 and x0 near T: agreement." in text
    assert "optimal denoiser" in text
    # issue 42: x0 and v at the eps loss's per-t weighting beside unweighted, each compared as the data say
    assert "`x0` prediction at `eps_units` weighting: 3 seeds (0, 1, 3)" in text
    fid = synthetic.expect["per_seed"]
    alone = sum(fid[f"uniform_eps-units_x0_b64_linear_s{s}"] - fid[f"uniform_none_x0_b64_linear_s{s}"]
                for s in (0, 1, 3)) / 3
    assert f"- x0 @ eps_units minus x0 (the weighting alone): {alone:+.2f}" in text
    assert "x0 @ eps_units minus eps" in text and "(the same per-t weighting as eps: the type alone)" in text
    assert "only the prediction type differs" not in text


def test_slot_finetune_names_the_slots_that_ran(render, synthetic):
    text, figs = render("slot_finetune")
    assert figs == 2
    slots = ", ".join(map(str, FINETUNED_SLOTS))
    # issue 42: the slots that ran are named against the paper's 3, 5, 7, 9 (synthetic: 2 and 7)
    assert (f"Slots fine-tuned: {slots} (of 10), not the paper's 3, 5, 7, 9 (Fig. 2): its 7 only, the study's "
            "`analyses.slots.finetune` chose these; seeds: 0, 4") in text
    assert "over 2 seeds" in text
    assert "Other slots' loss, slot fine-tune against the uniform control" in text


def test_consistency_counts_models(render, synthetic):
    text, figs = render("consistency")
    assert figs >= 3
    n = synthetic.expect["consistency_models"]
    assert f"{n} models compared" in text and f"over {n} models ({n * (n - 1) // 2} pairs)" in text
    assert "Control `gaussian`" in text
    # the scorecard's test, models against the Gaussian control, with the file's own numbers (issue 42)
    mv = json.loads(Path(synthetic.paths["consistency"]).read_text())["pixel"]["controls"]["gaussian"]["models_vs_control"]
    assert ("Models against `gaussian` (the scorecard test)" in text
            and f"log ratio, models - control = {mv['diff']:+.3g} [{mv['ci_low']:+.3g}, {mv['ci_high']:+.3g}]" in text)
    assert "a description, not the claim's test" in text
    assert "beta1 decay + lr compensation" in text


def test_contribution_has_the_control_and_intervals(render, synthetic):
    text, figs = render("timestep_contribution")
    assert figs == 2
    assert "final step only (control)" in text and "100% exact copies" in text
    for label, fid in synthetic.expect["contribution"].items():
        assert f"{fid:.2f}" in text, label
    assert "[1, 10]" in text  # the paper's best is named as the paper's
    assert f"held-out floor: {FLOOR['value']:.2f}" in text
    # run on the super-resolution model, as the paper (issue 42), and each range beside its blend factor
    assert "The super-resolution model (run superres, conditioning lowres: a copy average-pooled by 2" in text
    assert "conditioned on held-out image i's low-resolution copy" in text
    assert "[10, 100]: distance 0.387 x the model alone's, blend factor" in text


def test_loss_profile_shows_the_floor_and_excess_slots(render, synthetic):
    text, figs = render("loss_profile")
    assert figs == 2
    assert "Optimal denoiser of the 64 training images" in text
    # the held-out (leave-one-out) floor beside the memorisation floor (issue 42), from the file
    assert f"the same denoiser scores {synthetic.expect['heldout_floor_t0']:.3g} at t = 0" in text
    assert "memorisation floor is what makes it look like 100% excess" in text
    # the gradient noise is the covariance trace, not the variance of the norm (issue 42)
    assert "tr Cov(g) is largest at t = 0 (60, 500x its smallest value" in text and "grad norm variance" not in text
    assert "On the excess loss the first slot ends at t =" in text
    assert "the plateau there is the network's error" in text


def test_batch_size_compares_the_retraining_with_its_control(render, synthetic):
    text, figs = render("batch_size")
    assert figs >= 4
    assert "The same extra images on uniform t changed them by" in text
    assert "took 750 optimizer steps" in text or "optimizer steps for its" in text
    assert "continued on uniform t" in text
    # issue 42: the title presupposes nothing; the headline follows the data, at equal images and at
    # equal optimizer steps (the synthetic FIDs: batch 16 above batch 64 at equal images, in every seed)
    assert "Why do small batches fail" not in text
    fid = synthetic.expect["per_seed"]
    small = [fid[f"uniform_none_eps_b16_linear_s{s}"] - fid[f"uniform_none_eps_b64_linear_s{s}"] for s in (0, 1, 3)]
    steps = [fid[f"uniform_none_eps_b16_linear_s{s}_kimg3"] - fid[f"uniform_none_eps_b64_linear_s{s}"] for s in (0, 1, 3)]
    word = lambda d: "lower" if max(d) < 0 else "higher" if min(d) > 0 else None  # noqa: E731 (identical per-seed shift)
    head = next(line for line in text.splitlines() if line.startswith("**Headline (from the data).**"))
    assert f"At equal images seen, batch 16 reaches a **{word(small)}** final" in head
    assert f"lower in {sum(d < 0 for d in small)} of 3" in head
    assert "At equal optimizer steps, batch 16, equal steps (3 kimg) reaches" in head
    assert f"{sum(steps) / 3:+.2f}" in head


def test_flow_matching_states_each_arm_against_uniform(render, synthetic):
    """With paired seeds the report states each arm's difference and its group-Holm p (the default
    study's flow report once failed on that line: the smoke study has one flow seed)."""
    text, _ = render("flow_matching")
    assert "logit-normal_none_v_b64_linear_flow_heun_kimg8" in text
    assert "uniform_none_v_b64_linear_flow_heun_kimg8" in text
    assert "Holm p within the group" not in text and "lower than the baseline" not in text  # no second verdict
    # issue 42: a per-seed table straight from the data and a regime block, as every FID report has
    for rid, fid in synthetic.expect["per_seed"].items():
        if "_flow_heun" in rid:
            assert f"{fid:.2f}" in text, rid
    assert "Progress points per run: 2 (at 4, 8 kimg)" in text
    assert f"{FLOOR['value']:.3g} [{FLOOR['ci'][0]:.3g}, {FLOOR['ci'][1]:.3g}]" in text  # the regime block's floor


@pytest.mark.parametrize("report", ["sampler_comparison", "flow_matching"])
def test_group_reports_print_the_scorecards_verdict_for_each_comparison(render, synthetic, report):
    """Issue 42: one verdict per comparison. Every comparison a claim reads carries, in the group
    report, exactly the verdict verdicts.json gives that claim; the others are described, not judged."""
    from timestep_lab.reporting.notebook import NO_CLAIM, claim_verdicts, comparison_table, load_study

    group = {"sampler_comparison": "sampler_comparison", "flow_matching": "flow_matching"}[report]
    study = load_study(group, synthetic.paths["metrics_csv"], synthetic.paths["runs_csv"])
    table = comparison_table(study, synthetic.paths["summary"], synthetic.paths["verdicts"])
    claims = json.loads(Path(synthetic.paths["verdicts"]).read_text())["claims"]
    judged = claim_verdicts(synthetic.paths["verdicts"])
    assert len(table) and "final FID" not in table and "Holm p (group)" not in table
    seen = 0
    for _, r in table.iterrows():
        test = f"{group}:{r['arm']}:{r['baseline']}"
        expect = [(c["id"], c["verdict"]) for c in claims if c.get("test") == test]
        assert judged.get(test, []) == expect
        assert r["scorecard verdict"] == ("; ".join(f"{i}: {v}" for i, v in expect) if expect else NO_CLAIM)
        seen += bool(expect)
    assert seen  # the synthetic card has claims on both groups
    text, _ = render(report)
    for _, r in table.iterrows():
        if r["scorecard verdict"] != NO_CLAIM:
            assert f"scorecard: **{r['scorecard verdict']}**" in text


def test_an_arm_and_its_sampling_shift_twin_are_two_variants(tmp_path):
    """The reports name arms ``sampler+weighting``; an arm scored on a shifted grid (sample_shift
    3.0) gets its own name, so its curve and rows are not merged with its twin's."""
    import pandas as pd

    from timestep_lab.reporting.notebook import load_study

    rows = [{"run": f"uniform_none_v_s0{tag}", "groups": "flow_matching", "sampler": "uniform", "weighting": "none",
             "sample_shift": shift, "value": v, "label": "FID"} for tag, shift, v in (("", 1.0, 10.0), ("_shift3.0", 3.0, 12.0))]
    pd.DataFrame(rows).to_csv(tmp_path / "m.csv", index=False)
    pd.DataFrame(rows).drop(columns="value").to_csv(tmp_path / "r.csv", index=False)
    study = load_study("flow_matching", tmp_path / "m.csv", tmp_path / "r.csv")
    assert list(study.metrics["variant"]) == ["uniform+none", "uniform+none sampled at shift 3"]
    assert list(study.runs["variant"]) == ["uniform+none", "uniform+none sampled at shift 3"]


def test_a_staged_studys_group_tables_say_their_intervals_are_not_valid_after_the_looks(synthetic, tmp_path, monkeypatch):
    """Issue 40: after a budgeted study's stages the group reports' fixed-design intervals have
    looked several times; the report says so above the table, and says nothing for a fixed design."""
    from timestep_lab.reporting.notebook import SEQUENTIAL_NOTE

    verdicts = json.loads(Path(synthetic.paths["verdicts"]).read_text())
    fixed, _ = run_report("sampler_comparison", {p: synthetic.paths[k] for p, k in PARAMS["sampler_comparison"].items()},
                          monkeypatch)
    verdicts["family"] = {**verdicts.get("family", {}), "sequential": {"prior_sd": 3.0, "fid_tests": []}}
    staged = tmp_path / "verdicts.json"
    staged.write_text(json.dumps(verdicts))
    params = {p: synthetic.paths[k] for p, k in PARAMS["sampler_comparison"].items()} | {"verdicts": str(staged)}
    text, _ = run_report("sampler_comparison", params, monkeypatch)
    assert SEQUENTIAL_NOTE in text and SEQUENTIAL_NOTE not in fixed
