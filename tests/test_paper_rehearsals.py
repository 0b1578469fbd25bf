"""The three paper configs rehearsed end to end through Snakemake, as a user would before
submitting them: `python -m timestep_lab rehearse config/<study>.yaml --fast-features` in a fresh
copy of the repo (fake data in the true on-disk formats, a random pretrained reference in its
format, the random rehearsal-cnn for the metrics); imagenet's with its config cut as the cluster's
(below). The cluster rehearsal (through the SLURM profile) is the `cluster_rehearsal` fixture's,
checked in tests/test_slurm.py with the assertions below (`check_rehearsal`)."""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
import yaml
from conftest import CLUSTER_PAIRED, trim_rehearsal
from worktree import children_cpu_s, copy_worktree, study_env

pytestmark = [pytest.mark.workflow, pytest.mark.slow]

REPORTS = ("sampler_comparison", "schedules", "loss_profile", "slot_finetune", "batch_size",
           "timestep_contribution", "prediction_types", "consistency")
FORMATS = {"cifar10": "diffusers", "celebahq": "diffusers", "imagenet": "guided_diffusion"}


PAIRED = ("speed_faster", "adaptive_faster", "clts_faster")


def check_rehearsal(root: Path, name: str, paired: tuple[str, ...] = PAIRED) -> None:
    """Everything a finished rehearsal of config/<name>.yaml must show: every report and the
    index (with its banner), a verdict per claim with paired intervals, the pretrained reference
    scored in its format and never trained, the contribution analysis on the super-resolution
    model trained here, nothing beside the real
    data, and every number labelled a rehearsal's. ``paired``: the claims whose arms ran with two
    paired seeds (the cluster's cut study runs fewer)."""
    from timestep_lab.artifacts.samples_file import load_samples
    from timestep_lab.evidence.verdicts import CLAIMS

    study = f"{name}-rehearsal"
    res, rep, logs = root / "results" / study, root / "reports" / study, root / "logs" / study
    index = (rep / "index.html").read_text()
    assert "REHEARSAL, NOT A RESULT" in index and f"config/{name}.yaml" in index
    for report in REPORTS:
        page = (rep / f"{report}.html").read_text(errors="replace")
        assert "data:image/png" in page and "Traceback" not in page, report
        assert "REHEARSAL, NOT A RESULT" in page, report  # every page says so
        assert f"{report}.html" in index
    claims = {c["id"]: c for c in json.loads((res / "verdicts.json").read_text())["claims"]}
    assert [c.id for c in CLAIMS] == list(claims)
    for claim in paired:  # two paired seeds: a difference and its interval
        c = claims[claim]
        assert c["verdict"] != "not run" and c["n"] == 2 and c["ci_low"] <= c["diff"] <= c["ci_high"], c
    metrics = pd.read_csv(res / "metrics.csv")
    assert set(metrics["feature_extractor"]) == {"rehearsal-cnn"}
    assert set(metrics["label"]) <= {"FID (rehearsal stand-in features)", "KID (rehearsal stand-in features)",
                                     "KID std (rehearsal stand-in features)", "Precision (rehearsal stand-in features)",
                                     "Recall (rehearsal stand-in features)"}
    runs = pd.read_csv(res / "runs.csv")
    assert (runs.loc[runs["groups"].notna(), "status"] == "ok").all()
    # the pretrained reference: scored and sampled in its own format, never trained
    _, _, meta = load_samples(res / "runs" / "reference" / "samples.npz")
    assert meta["model_format"] == FORMATS[name] and meta["nimg"] is None
    assert not (logs / "train" / "reference.log").exists() and not (res / "runs" / "reference" / "model.pt").exists()
    # the contribution: on the super-resolution model trained here (run superres), not on the reference
    contribution = json.loads((res / "analyses" / "contribution.json").read_text())
    assert contribution["model"]["conditioning"]["name"] == "lowres"
    assert contribution["model"]["model"].endswith("runs/superres/model.pt") and contribution["model"]["nimg"] > 0
    for label in ("none", "t1-500", "t500-1000", "t10-100", "t100-500", "t1-10"):
        m = json.loads((res / "analyses" / "contribution" / label / "metrics.json").read_text())
        assert m["label"] == "FID (rehearsal stand-in features)" and m["nimg"] == contribution["model"]["nimg"], label
    # its data: fake, prepared beside the rehearsal's stand-ins, never into data/prepared
    assert list((root / "rehearsal" / name / "prepared").glob("*/manifest.json"))
    assert not (root / "data" / "prepared").exists()
    if name in LATENT:
        _check_latent(root, name, res, metrics, runs)


LATENT = ("celebahq", "imagenet")  # the mixed studies (docs/methods.md 7.9)


def _check_latent(root: Path, name: str, res: Path, metrics: pd.DataFrame, runs: pd.DataFrame) -> None:
    """A mixed study's rehearsal: its split encoded once through the VAE stand-in; every group's
    run a DiT trained on those latents, its samples decoded through that VAE (its sha256 in every
    metrics record); the pretrained reference and its fine-tunes, and the SR model, in pixels."""
    from timestep_lab.artifacts.io import sha256_file

    (manifest,) = (root / "rehearsal" / name / "prepared").glob("*-train-latents/manifest.json")
    latents = json.loads(manifest.read_text())
    vae = latents["vae"]
    assert vae["folder"] == f"rehearsal/{name}/vae" and latents["shape"] == [4, 4, 4]
    assert vae["sha256"] == sha256_file(root / "rehearsal" / name / "vae" / vae["weights"])
    grouped = runs.loc[runs["groups"].notna() & (runs["run"] != "reference"), "run"]
    scored = metrics[metrics["run"].isin(grouped)]
    assert len(scored) and set(scored["vae_sha256"]) == {vae["sha256"]}
    assert metrics.loc[metrics["run"] == "reference", "vae_sha256"].isna().all()  # the pixel reference
    for rid in list(grouped)[:1] + ["finetune_uniform", "superres"]:
        cfg = yaml.safe_load((res / "runs" / rid / "run.yaml").read_text())
        model = cfg["model"].get("name", "unet")
        assert (model == "dit") == (rid in set(grouped)) and cfg["data"]["path"].endswith("-latents") == (model == "dit")


# celebahq: the whole rehearsal as a user runs it (`rehearse`, with the real run's estimate: ~17 CPU-s of
# its networks' FLOPs), of config/celebahq.yaml cut as the cluster's study but for the sampler comparison,
# which keeps the baseline, SpeeD, the adaptive sampler and CLTS (PAIRED: their claims with two paired
# seeds; the cut is made to the paper config, so `rehearse` derives, runs and checks it as a user's:
# 20 of the whole rehearsal's 39 trainings, 97 of its 166 jobs; the other sampler arms are registry entries that
# tests/test_samplers.py and test_sampler_recipe.py train). imagenet: `rehearse --prepare-only`, the
# config cut as the cluster's (conftest.trim_rehearsal: every group, analysis, rule kind and report,
# the sampler comparison at the baseline and SpeeD; 17 of its 39 trainings), then the snakemake command
# it printed: what only imagenet has (class labels, classifier-free guidance, a guided-diffusion
# reference) runs end to end at half the suite's time.
LOCAL_SAMPLERS = ["uniform", "adaptive", "clts"]  # + SpeeD's list entry: the arms of PAIRED's claims


@pytest.mark.parametrize("name, whole", [("celebahq", True), ("imagenet", False)])
def test_paper_config_rehearses_end_to_end(name, whole, tmp_path):
    root = copy_worktree(tmp_path / "repo")
    if whole:
        trim_rehearsal(root / "config" / f"{name}.yaml", samplers=LOCAL_SAMPLERS)
    cpu0, t0 = children_cpu_s(), time.monotonic()
    r = subprocess.run([sys.executable, "-m", "timestep_lab", "rehearse", f"config/{name}.yaml", "--fast-features",
                        *([] if whole else ["--no-estimate", "--prepare-only"])], cwd=root, env=study_env(),
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=1800)
    assert r.returncode == 0, r.stdout[-6000:]
    out = r.stdout
    if not whole:
        trim_rehearsal(root / "rehearsal" / name / "config.yaml")
        command = shlex.split(re.search(r"^rehearse: (\S*snakemake --configfile \S+)$", out, re.M)[1])
        run = subprocess.run(command, cwd=root, env=study_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                             text=True, timeout=1800)
        assert run.returncode == 0, run.stdout[-6000:]
    wall, cpu = time.monotonic() - t0, children_cpu_s() - cpu0
    assert (f"rehearsal of config/{name}.yaml passed" in out) == whole
    needs = out.split("that the rehearsal stood in for:", 1)[1]
    assert re.search(r"data: data/raw/\S+ \(\w+, MISSING\)", needs)
    assert "weights-inception-2015-12-05-6726825d.pth (MISSING)" in needs
    assert f"({FORMATS[name]} format, MISSING)" in needs
    assert "GPU(s) per training job" in needs
    assert ("GPU-hours" in needs) == whole  # the estimate's total
    if name in LATENT:  # the stand-in list names the VAE's, and a real run needs the VAE's folder
        assert "rehearse: stand-in: VAE sd-vae-ft-ema: a random AutoencoderKL of its family" in out
        assert f"rehearse: wrote rehearsal/{name}/vae" in out
        assert "VAE: data/weights/sd-vae-ft-ema (a diffusers AutoencoderKL folder" in needs and "MISSING)" in needs
    check_rehearsal(root, name, PAIRED if whole else CLUSTER_PAIRED)
    print(f"rehearsal of config/{name}.yaml: {wall:.0f} s wall, {cpu:.0f} CPU-s (rehearse + snakemake + jobs)")
