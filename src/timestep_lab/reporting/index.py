"""The study index: ``index.html`` with the claim-by-claim scorecard (both verdicts, the family,
the regime), the papers' own numbers beside ours with a size verdict each, the protocol and
links to every report.

Reads ``verdicts.json`` (:func:`timestep_lab.workflow.collect.write_verdicts`; the claims' records
carry the papers' numbers, :mod:`timestep_lab.claims`), ``summary.json`` (failed runs, the FID
protocol, the floor) and ``slots.json``; renders ``reports/index.html.j2`` with jinja2. Every
difference it prints is a paired one with its 95% interval, and every speed-up the censored
per-seed one (docs/methods.md §9): no unpaired mean or mean-curve speed-up reaches the page.
Must not know how the numbers are computed or how the notebooks are executed.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping, Sequence

from timestep_lab.arithmetic import LEVELS
from timestep_lab.artifacts.io import atomic_write_text, read_json
from timestep_lab.cost.measured import estimate_vs_measured, study_cost
from timestep_lab.evidence.convergence import PLATEAU_DROP
from timestep_lab.reporting.forest import forest_rows, forest_svg
from timestep_lab.reporting.render import PAGE_CSS
from timestep_lab.reporting.scorecard import (
    COLUMNS,
    floor_text,
    format_difference,
    format_ratio,
    load_verdicts,
    scorecard_rows,
)
from timestep_lab.reporting.stages import read_stage_plans, stage_lines

__all__ = ["render_index", "headline_rows", "protocol_lines", "family_lines", "code_lines", "arithmetic_lines"]


def render_index(template: str | Path, out_html: str | Path, *, study: str, summary: str | Path,
                 reports: list[str], config_source: str, verdicts: str | Path | None = None,
                 slots: str | Path | None = None, pending: list[str] | None = None,
                 estimate: str | Path | None = None, results_dir: str | Path | None = None,
                 logs_dir: str | Path | None = None,
                 rehearsal: Mapping[str, Any] | None = None, scales: list[str] | None = None,
                 reproducibility: str | None = None, stages: Sequence[str] | None = None) -> Path:
    """The study's ``index.html``: scorecard, the papers' figures beside our verdicts, protocol, the
    cost estimate (``estimate``: the JSON of ``estimate --out``) beside the measured cost per rule (the
    benchmark files under ``results_dir``, :mod:`timestep_lab.cost.measured`), links. ``rehearsal``:
    the study config's ``rehearsal`` section (``of``, ``stand_ins``), which puts a banner on top:
    nothing on the page is a result. ``scales``: the other studies whose results exist; when there
    are any the page links the scorecard across scales (``../scorecard.html``, rule ``scorecard``),
    whether or not it has been built yet. ``reproducibility``: the config's level, which the
    protocol compares with the records' own (:func:`arithmetic_lines`). ``stages``: a budgeted
    study's plan files (:func:`timestep_lab.reporting.stages.stage_lines`: spent, still needed, why it stopped)."""
    import jinja2  # only the Snakemake index job renders; the rule's module import stays light

    summary_data = read_json(summary)
    if slots is not None and Path(slots).exists():
        summary_data["slots"] = read_json(slots)["slots"]
    verdict_data = load_verdicts(verdicts)
    card = scorecard_rows(verdict_data)
    est = read_json(estimate) if estimate is not None and Path(estimate).exists() else None
    try:
        measured = study_cost(results_dir, logs_dir) if results_dir is not None else {}
    except (FileNotFoundError, ValueError):  # not run yet, or a malformed benchmark file: show the estimate alone
        measured = {}
    cost = estimate_vs_measured(est, measured) if (est or measured) else []
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(Path(template).parent)), autoescape=True,
                             undefined=jinja2.StrictUndefined)
    page = env.get_template(Path(template).name).render(
        study=study, summary=summary_data, css=PAGE_CSS, config_source=config_source,
        scorecard=card, columns=COLUMNS, forest=forest_svg(forest_rows(verdict_data)) if card else "",
        headline=headline_rows(summary_data, verdict_data),
        protocol=protocol_lines(summary_data, reproducibility),
        family=family_lines(verdict_data, summary_data) + stage_lines(read_stage_plans(stages or []), verdict_data),
        code_mixed=bool((summary_data.get("code") or {}).get("mixed")),
        code_identities=len((summary_data.get("code") or {}).get("identities") or []),
        reports=[{"name": Path(r).stem.replace("_", " "), "file": Path(r).name} for r in reports],
        pending=pending or [], cost=cost, rehearsal=dict(rehearsal) if rehearsal else None,
        cost_device=(est or {}).get("device_name", "n/a"), cost_gpu=bool(est and est.get("device") != "cpu"),
        cost_calibration=(est or {}).get("calibration"), scales=list(scales or []),
    )
    atomic_write_text(out_html, page)
    return Path(out_html)


def _number_cells(num: Mapping[str, Any]) -> tuple[str, str]:
    """(paper: baseline, paper: method) cells of a published number."""
    if num.get("kind") == "fid_pair":
        return f"{num.get('baseline'):g}", f"{num.get('method'):g}"
    return "", str(num.get("text", ""))


def headline_rows(summary: Mapping[str, Any], verdicts: Mapping[str, Any]) -> list[dict[str, str]]:
    """Every number the claims' sources publish (the claim records' ``numbers``), each with ours
    for the same question and a size verdict: for the claim's comparable number the scorecard's
    size verdict, for any other the reason it is not comparable. Ours is the paired difference
    and FID ratio, or the censored per-seed speed-up, never an unpaired mean."""
    rows = []
    for row in verdicts.get("claims", []):
        verdict = row.get("verdict", "not run")
        for i, num in enumerate(row.get("numbers") or []):
            if num.get("kind") == "slots":
                ours = " ".join(f"[{a},{b}]" for a, b in summary["slots"]) if summary.get("slots") else ""
            elif verdict == "not run":
                ours = ""
            elif num.get("kind") == "speedup":
                ours = f"speed-up {row.get('speedup') or 'n/a (no progress curves)'}"
            else:
                ours = f"{format_difference(row)}; FID ratio {format_ratio(row.get('log'))}"
            if num.get("not_comparable"):
                size = f"not comparable: {num['not_comparable']}"
            elif verdict in ("not run", "not judged at this length") or not row.get("size_verdict"):
                size = ""
            else:
                size = f"{row['size_verdict']}" + (" at this length" if row["size_verdict"] != "not comparable" else "") \
                    + f": {row.get('size_detail', '')}"
            base, method = _number_cells(num)
            rows.append({"paper": str(row.get("paper", "")), "claim": str(row.get("id", "")),
                         "setting": f"{num.get('setting', '')} ({num.get('where', '')}; {num.get('unit', '')})",
                         "baseline": base, "method": method, "ours": ours or "not in this study",
                         "verdict": verdict, "size": size, "first": i == 0})
    return rows


def family_lines(verdicts: Mapping[str, Any], summary: Mapping[str, Any]) -> list[str]:
    """What the scorecard's verdicts rest on: the family and its level, the floor, the regime rule."""
    fam = verdicts.get("family") or {}
    m = fam.get("size")
    lines = []
    if m is not None and fam.get("sequential"):  # a budgeted study: the anytime-valid family (stage_lines says more)
        lines.append(f"Family: {m} distinct comparisons judged together with Holm on anytime-valid p-values "
                     f"(referred to {fam['sequential'].get('reference')}): {fam.get('promise')}.")
    elif m is not None:
        promise = fam.get("promise") or ("the file states no condition: its tests assumed normal per-seed "
                                         "differences, and skewed ones break the 5% (docs/methods.md §9.6)")
        lines.append(f"Family: {m} distinct comparisons judged together; p-values are referred to the "
                     f"'{fam.get('calibration', 'student_t')}' calibration and Holm-adjusted across all of them: "
                     f"{promise}. The detectable effect is at Holm's first-step level 0.05/{m} = "
                     f"{fam.get('level', 0.05):.2g} and that calibration's critical value, 80% power for normal "
                     f"per-seed differences, estimated from each comparison's sample SD. Group reports adjust "
                     f"within their group, with Student-t p-values.")
    floor_data = summary.get("floor") or verdicts.get("floor") or {}
    floor = floor_data.get("records") or []
    if floor:
        lines.append("Floor: the held-out split's FID against the same training reference (same extractor and tools), "
                     + "; ".join(f"{r['tool']}: {floor_text(r)}" for r in floor)
                     + f" ({floor_data.get('sample_count_basis', '')}).")
    else:
        lines.append("Floor: none (the study has no held-out split): a final FID cannot be read against the data's own.")
    lines.append(f"Claims about the converged model are judged only when the baseline's FID fell by less than "
                 f"{PLATEAU_DROP:.0%} over the last third of its training; otherwise 'not judged at this length' "
                 f"(docs/methods.md §9.7).")
    return lines


def code_lines(summary: Mapping[str, Any]) -> list[str]:
    """What code trained and scored the runs: git commit and dirty flag (or the package's source
    hash outside a checkout) and the hash of envs/requirements.lock, per identity with its runs."""
    ids = (summary.get("code") or {}).get("identities") or []
    if not ids:
        return ["Code: no run recorded its code identity."]
    if len(ids) == 1:
        return [f"Code: {ids[0]['label']}, for every run (trained and scored)."]
    return [f"Code: the runs were trained or scored by {len(ids)} different code identities: "
            + "; ".join(f"{e['label']} ({len(e['runs'])} runs: {', '.join(e['runs'][:4])}"
                        f"{', ...' if len(e['runs']) > 4 else ''})" for e in ids) + "."]


def arithmetic_lines(summary: Mapping[str, Any], asked: str | None = None) -> list[str]:
    """Which CPU code paths computed the study's numbers, from the records' own ``arithmetic`` (in
    their code identities: :mod:`timestep_lab.arithmetic`), and whether that is the level
    ``asked`` (the config's ``reproducibility``)."""
    ids = (summary.get("code") or {}).get("identities") or []
    records = [(e.get("identity") or {}).get("arithmetic") for e in ids]
    seen = sorted({(str(r.get("level")), str(r.get("torch_cpu_capability")), "/".join(r.get("openblas") or []))
                   for r in records if r})
    if not seen:
        return ["Arithmetic: not recorded (records made before the code recorded it)."] if ids else []
    text = [f"{lv} (torch {cap}" + (f", OpenBLAS {blas})" if blas else ")") for lv, cap, blas in seen]
    if len(seen) == 1 and all(records):
        level = LEVELS.get(seen[0][0])
        line = f"Arithmetic: {text[0]} in every record" + (f": {level.summary}." if level else ".")
    else:
        line = (f"Arithmetic: the records were computed with {len(seen)} different CPU code paths ({'; '.join(text)}"
                + ("; some not recorded" if not all(records) else "") + "): their last digits differ, and more so "
                "after training.")
    lines = [line]
    if asked and any(lv != asked for lv, _, _ in seen):
        lines.append(f"The config asks for reproducibility: {asked}; records computed otherwise come from an earlier "
                     f"setting: rerun the study (Snakemake reruns every job whose level changed).")
    return lines


def protocol_lines(summary: Mapping[str, Any], asked: str | None = None) -> list[str]:
    """The protocol list of the index: code, arithmetic, the FID protocol, pairing, speed-ups.
    ``asked``: the config's ``reproducibility`` level."""
    p = summary.get("protocol") or {}
    if not p:
        return ["no metrics collected yet", *code_lines(summary), *arithmetic_lines(summary, asked)]
    return [*code_lines(summary), *arithmetic_lines(summary, asked),
        f"Metric: {p.get('label')} via torch-fidelity and clean-fid (headline numbers: {p.get('tool')} {p.get('tool_version')}); "
        f"feature extractor {p.get('feature_extractor')}.",
        f"{p.get('num_generated')} generated vs {p.get('num_reference')} reference images; reverse sampler "
        f"{p.get('method')} with {p.get('steps')} steps; {'EMA' if p.get('ema') else 'raw'} weights; sample i uses seed base + i.",
        "Runs are paired by seed (same initial weights, data order, noise and sample seeds); a difference is "
        "arm - baseline per seed, reported as its mean with a 95% interval over seeds; on this page interval and "
        "p-value are referred to the scorecard's calibration (the worst case of normal, t3 and skewed seeds) and "
        "the p-values Holm-adjusted across the whole scorecard, in the group reports Student-t ones within a group "
        "(docs/methods.md §9).",
        "Speed-up: images an arm needs to reach the baseline's FID at its last progress point (same sample count), "
        "per seed, interpolated in log FID between progress points; '>x' when a seed got there before its first "
        "point, '<x' when one never did, n/a when both happened.",
    ]
