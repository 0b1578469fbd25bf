"""FID/KID through torch-fidelity and clean-fid: the digits CNN, the reference file, the
protocol record, agreement with our own Fréchet distance, and the Inception paths offline."""

from __future__ import annotations

import json
import socket
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from timestep_lab.artifacts.io import load_torch, save_torch, sha256_file
from timestep_lab.artifacts.samples_file import save_samples
from timestep_lab.cli import main
from timestep_lab.config import ConfigError, EvalConfig, config_from_dict
from timestep_lab.data import PreparedData
from timestep_lab.metrics import (
    CF_INCEPTION_FILE,
    TF_INCEPTION_FILE,
    WeightsMissingError,
    evaluate_samples,
    frechet_distance,
    load_reference,
)
from timestep_lab.metrics import extractors as metrics  # the module whose weight caches the tests patch
from timestep_lab.metrics.features import load_feature_net, sidecar_path
from timestep_lab.metrics.fid import clean_fid_frechet
from timestep_lab.metrics.floor import _bootstrap

FAST = EvalConfig(kid_subsets=10, kid_subset_size=300)  # KID with fewer subsets: same code path, faster


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    """These networks are small or the batches tiny; on a shared 2-core machine two intra-op
    threads ran Inception 7x slower than one (spinning OpenMP workers), so use one here."""
    old = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(old)


# ------------------------------------------------------------------------------ Fréchet distance


def test_clean_fid_frechet_under_a_scipy_without_sqrtm_disp(monkeypatch):
    """SciPy 1.18 removed sqrtm's ``disp``, which clean-fid 0.1.35 passes (the first smoke study on a
    GPU image failed there): the stand-in gives the library's number, and calls the library otherwise."""
    from cleanfid import fid as cfid
    from scipy import linalg

    rng = np.random.default_rng(3)
    d = 8
    s1, s2 = (np.cov(rng.normal(size=(40, d)) @ rng.normal(size=(d, d)), rowvar=False) for _ in range(2))
    mu1, mu2 = rng.normal(size=d), rng.normal(size=d)
    library = float(cfid.frechet_distance(mu1, s1, mu2, s2))
    assert clean_fid_frechet(mu1, s1, mu2, s2) == library  # the library itself where disp exists
    real_sqrtm = linalg.sqrtm

    def sqrtm_118(a):  # SciPy >= 1.18: no disp, returns the root alone
        return real_sqrtm(a)

    monkeypatch.setattr(linalg, "sqrtm", sqrtm_118)
    with pytest.raises(TypeError, match="disp"):
        cfid.frechet_distance(mu1, s1, mu2, s2)  # what every clean-fid score did before
    assert clean_fid_frechet(mu1, s1, mu2, s2) == pytest.approx(library, rel=1e-12)
    assert clean_fid_frechet(mu1, s1, mu2, s2) == pytest.approx(frechet_distance(mu1, s1, mu2, s2), rel=1e-8)
    with pytest.raises(ValueError, match="shape"):
        clean_fid_frechet(mu1[:3], s1, mu2, s2)


def test_frechet_distance_matches_closed_form_for_gaussians():
    rng = np.random.default_rng(0)
    d = 6
    mu1, mu2 = rng.normal(size=d), rng.normal(size=d)
    a, b = rng.uniform(0.1, 3, d), rng.uniform(0.1, 3, d)
    # diagonal covariances: |mu1 - mu2|^2 + sum (sqrt(a) - sqrt(b))^2
    expected = float(((mu1 - mu2) ** 2).sum() + ((np.sqrt(a) - np.sqrt(b)) ** 2).sum())
    assert frechet_distance(mu1, np.diag(a), mu2, np.diag(b)) == pytest.approx(expected, rel=1e-10)
    # a common rotation leaves the distance unchanged
    q, _ = np.linalg.qr(rng.normal(size=(d, d)))
    got = frechet_distance(q @ mu1, q @ np.diag(a) @ q.T, q @ mu2, q @ np.diag(b) @ q.T)
    assert got == pytest.approx(expected, rel=1e-9)
    # 1-D: (m1 - m2)^2 + (s1 - s2)^2
    assert frechet_distance([1.0], [[4.0]], [-2.0], [[9.0]]) == pytest.approx(9.0 + 1.0)
    # non-commuting covariances: against tr sqrtm(S1 S2) from scipy
    from scipy import linalg

    s1 = np.cov(rng.normal(size=(50, d)), rowvar=False)
    s2 = np.cov(rng.normal(size=(50, d)) @ rng.normal(size=(d, d)), rowvar=False)
    ref = ((mu1 - mu2) ** 2).sum() + np.trace(s1) + np.trace(s2) - 2 * np.trace(linalg.sqrtm(s1 @ s2)).real
    assert frechet_distance(mu1, s1, mu2, s2) == pytest.approx(ref, rel=1e-8)
    assert frechet_distance(mu1, s1, mu1, s1) == pytest.approx(0.0, abs=1e-9)


def test_eval_config_is_validated():
    with pytest.raises(ConfigError, match="tools"):
        config_from_dict({"tools": ["pytorch-fid"]}, "t", EvalConfig)
    with pytest.raises(ConfigError, match="kid_subset_size"):
        config_from_dict({"kid_subset_size": 1}, "t", EvalConfig)
    with pytest.raises(ConfigError, match="feature_extractor"):
        config_from_dict({"feature_extractor": "vgg"}, "t", EvalConfig)


# ------------------------------------------------------------------------------ digits CNN + reference


@pytest.fixture(scope="module")
def digits_cnn(digits_dir, digits_test_dir, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("features") / "digits_cnn.pt"
    assert main(["train-features", "--data", str(digits_dir), "--test-data", str(digits_test_dir),
                 "--out", str(out), "--seed", "0"]) == 0
    return out


@pytest.fixture(scope="module")
def digits_ref(digits_cnn, digits_dir, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("ref") / "digits-train.npz"
    assert main(["reference-stats", "--data", str(digits_dir), "--extractor", "digits-cnn",
                 "--weights", str(digits_cnn), "--out", str(out)]) == 0
    return out


def test_digits_cnn_reaches_95_percent_held_out_and_records_its_hash(digits_cnn, digits_test_dir):
    side = json.loads(sidecar_path(digits_cnn).read_text())
    assert side["sha256"] == sha256_file(digits_cnn)
    obj = load_torch(digits_cnn)  # weights_only=True
    assert obj["arch"] == "digits-cnn-v1" and obj["feature_dim"] == 64 and obj["num_test"] == 359
    assert obj["accuracy"] >= 0.95, obj["accuracy"]
    net, _ = load_feature_net(digits_cnn)
    test = PreparedData(digits_test_dir)
    pred = net(torch.from_numpy(np.array(test.images)).permute(0, 3, 1, 2)).argmax(1).numpy()
    assert (pred == test.labels).mean() == pytest.approx(obj["accuracy"])


def test_reference_file_holds_both_tools_features_and_provenance(digits_ref, digits_cnn, digits_dir):
    ref = load_reference(digits_ref)
    n = len(PreparedData(digits_dir))
    assert ref.count == n and ref.meta["extractor"] == "digits-cnn"
    assert ref.arrays["tf_features"].shape == ref.arrays["cf_features"].shape == (n, 64)
    assert ref.meta["feature_weights_sha256"] == {t: sha256_file(digits_cnn) for t in ("clean-fid", "torch-fidelity")}
    assert ref.meta["data"]["images_sha256"] == PreparedData(digits_dir).manifest["images_sha256"]
    assert set(ref.meta["tool_versions"]) == {"torch-fidelity", "clean-fid"}
    # both libraries fed the network the same 8x8 pixels
    np.testing.assert_allclose(ref.arrays["tf_features"], ref.arrays["cf_features"], rtol=1e-5, atol=1e-5)


def test_fid_and_kid_of_a_set_against_itself_are_zero(digits_ref, digits_dir):
    images = np.array(PreparedData(digits_dir).images)
    n = len(images)
    # KID subsets of the whole set: every subset pair is the set against a permutation of itself
    cfg = EvalConfig(kid_subset_size=n, kid_subsets=1)
    res = evaluate_samples(images, digits_ref, cfg=cfg)
    ref = load_reference(digits_ref)
    scale = np.trace(ref.arrays["tf_sigma"])
    assert abs(res["fid"]) < 1e-6 * scale and abs(res["fid_clean_fid"]) < 1e-6 * scale, res
    # the unbiased MMD^2 estimate of a set against itself is -2 (mean k(x,x) - mean k(x,y)) / n: O(1/n), ~0
    f = ref.arrays["tf_features"].astype(np.float64)
    k = (f @ f.T / f.shape[1] + 1) ** 3
    diag, off = np.trace(k) / n, (k.sum() - np.trace(k)) / (n * (n - 1))
    expected = -2 * (diag - off) / n
    assert res["kid"] == pytest.approx(expected, rel=1e-3) and res["kid_clean_fid"] == pytest.approx(expected, rel=1e-3)
    noise = np.random.default_rng(0).integers(0, 256, size=(500, 8, 8, 1), dtype=np.uint8)
    far = evaluate_samples(noise, digits_ref, cfg=FAST)
    assert abs(res["kid"]) < 0.02 * far["kid"] and abs(res["kid_clean_fid"]) < 0.02 * far["kid_clean_fid"]
    assert res["precision"] == 1.0 and res["recall"] == 1.0


def test_samples_of_a_pretrained_checkpoint_are_scored_without_images_seen(digits_ref, digits_test_dir):
    """A pretrained reference (diffusers, guided-diffusion) records ``nimg: None``: how long it
    trained is unknown. Scoring its samples must not fail after the sampling is paid for (it
    raised a TypeError in every timestep-contribution job of the paper configs)."""
    images = np.array(PreparedData(digits_test_dir).images)[:40]
    cfg = EvalConfig(kid_subsets=2, kid_subset_size=20, precision_recall=False)
    pretrained = evaluate_samples(images, digits_ref, cfg=cfg, samples_meta={"nimg": None, "model_format": "diffusers"})
    assert "nimg" not in pretrained and "kimg" not in pretrained and np.isfinite(pretrained["fid"])
    ours = evaluate_samples(images, digits_ref, cfg=cfg, samples_meta={"nimg": 1536})
    assert (ours["nimg"], ours["kimg"]) == (1536, 1.536) and ours["fid"] == pretrained["fid"]


def test_both_tools_agree_with_our_frechet_distance_on_digits_features(digits_ref, digits_cnn, digits_test_dir):
    test = np.array(PreparedData(digits_test_dir).images)
    res = evaluate_samples(test, digits_ref, cfg=FAST)
    net, _ = load_feature_net(digits_cnn)
    with torch.no_grad():
        f_test = net.features(torch.from_numpy(test).permute(0, 3, 1, 2)).double().numpy()
    f_ref = load_reference(digits_ref).arrays["tf_features"].astype(np.float64)
    ours = frechet_distance(f_test.mean(0), np.cov(f_test, rowvar=False), f_ref.mean(0), np.cov(f_ref, rowvar=False))
    assert ours > 0.1
    assert res["fid"] == pytest.approx(ours, rel=1e-3)
    assert res["fid_clean_fid"] == pytest.approx(ours, rel=1e-3)


def test_wrapper_equals_direct_library_calls(digits_ref, digits_cnn, digits_dir, digits_test_dir, tmp_path):
    """Our reference-file route gives exactly what each library computes from the two image sets."""
    import torch_fidelity
    from cleanfid import fid as cfid

    train, test = np.array(PreparedData(digits_dir).images), np.array(PreparedData(digits_test_dir).images)
    res = evaluate_samples(test, digits_ref, cfg=EvalConfig(kid=False, precision_recall=False))
    direct = torch_fidelity.calculate_metrics(
        input1=metrics._Images(test), input2=metrics._Images(train), fid=True, feature_extractor="digits-cnn",
        feature_extractor_weights_path=str(digits_cnn), cuda=False, cache=False, verbose=False, save_cpu_ram=True)
    assert res["fid"] == pytest.approx(direct[torch_fidelity.KEY_METRIC_FID], rel=1e-6)
    for name, imgs in (("gen", test), ("ref", train)):
        (tmp_path / name).mkdir()
        for i, img in enumerate(imgs):
            np.save(tmp_path / name / f"{i:05d}.npy", img)
    net, _ = load_feature_net(digits_cnn)
    score = cfid.compute_fid(str(tmp_path / "gen"), str(tmp_path / "ref"), mode="clean",
                             custom_feat_extractor=metrics.CleanFidTrainedCNN(net), custom_fn_resize=metrics.keep_pixels,
                             num_workers=0, batch_size=500, device=torch.device("cpu"), verbose=False)
    assert res["fid_clean_fid"] == pytest.approx(score, rel=1e-6)


def test_evaluate_cli_writes_the_protocol_record(digits_ref, digits_cnn, digits_test_dir, tmp_path):
    test = np.array(PreparedData(digits_test_dir).images)
    meta = {"method": "ddim", "steps": 50, "eta": 0.0, "use_ema": True, "seed_range": [0, len(test) - 1],
            "nimg": 60_000, "model": "run/model.pt", "model_sha256": "ab" * 32, "clip_x0": True, "shift": 1.0}
    save_samples(tmp_path / "samples.npz", test, list(range(len(test))), meta)
    out = tmp_path / "metrics.json"
    assert main(["evaluate", "--samples", str(tmp_path / "samples.npz"), "--reference", str(digits_ref),
                 "--out", str(out), "--set", "eval.kid_subsets=5", "--set", "eval.kid_subset_size=200"]) == 0
    res = json.loads(out.read_text())
    assert res["label"] == "FID (digits-CNN features)" and res["nimg"] == 60_000 and res["kimg"] == 60.0
    assert res["fid"] > 0 and res["fid_clean_fid"] > 0 and res["kid"] is not None and res["precision"] is not None
    required = {"metric", "value", "tool", "tool_version", "feature_extractor", "feature_weights_sha256",
                "num_generated", "num_reference", "sampler", "steps", "eta", "clip_x0", "shift", "ema", "seed_range",
                "reference_file", "reference_sha256", "label", "guidance_scale"}
    got = {(r["tool"], r["metric"]) for r in res["records"]}
    assert got == {("torch-fidelity", m) for m in ("fid", "kid_mean", "kid_std", "precision", "recall")} | \
        {("clean-fid", m) for m in ("fid", "kid_mean")}
    for r in res["records"]:
        assert required <= set(r), required - set(r)
        assert r["feature_weights_sha256"] == sha256_file(digits_cnn)
        assert r["reference_sha256"] == sha256_file(digits_ref)
        assert (r["num_generated"], r["num_reference"], r["sampler"], r["steps"], r["ema"]) == (359, 1438, "ddim", 50, True)
        assert r["seed_range"] == [0, 358] and r["feature_extractor"] == "digits-cnn"
        assert (r["clip_x0"], r["shift"]) == (True, 1.0)  # the samples file's resolved sampling settings
    assert [r["label"] for r in res["records"] if r["metric"] == "fid"] == ["FID (digits-CNN features)"] * 2
    assert not list(tmp_path.glob(".*.tmp"))  # atomic write left nothing behind


def test_evaluate_refuses_mismatched_weights_or_extractor(digits_ref, digits_cnn, digits_test_dir, tmp_path, capsys):
    test = np.array(PreparedData(digits_test_dir).images)
    save_samples(tmp_path / "s.npz", test, list(range(len(test))), {})
    other = tmp_path / "other.pt"
    save_torch({**load_torch(digits_cnn), "seed": 123}, other)  # same network, different file
    base = ["evaluate", "--samples", str(tmp_path / "s.npz"), "--reference", str(digits_ref), "--out",
            str(tmp_path / "m.json")]
    assert main(base + ["--weights", str(other)]) == 2
    assert "differs from the weights" in capsys.readouterr().err
    assert main(base + ["--set", "eval.feature_extractor=inception-v3"]) == 2
    assert "digits-cnn extractor" in capsys.readouterr().err
    assert main(base + ["--set", "sample.steps=3"]) == 2
    assert not (tmp_path / "m.json").exists()


def test_fid_orders_test_split_below_noise(digits_ref, digits_test_dir):
    test = np.array(PreparedData(digits_test_dir).images)
    noise = np.random.default_rng(1).integers(0, 256, size=test.shape, dtype=np.uint8)
    cfg = EvalConfig(kid=False, precision_recall=False)
    a, b = evaluate_samples(test, digits_ref, cfg=cfg), evaluate_samples(noise, digits_ref, cfg=cfg)
    assert 0 < a["fid"] < b["fid"] and 0 < a["fid_clean_fid"] < b["fid_clean_fid"]


def test_floor_is_the_held_out_split_scored_like_a_run(digits_ref, digits_cnn, digits_test_dir, tmp_path, capsys):
    """floor.json: per tool the held-out split's FID against the training reference, exactly what
    scoring those images as samples gives, with a bootstrap interval around it; the sample count is
    evaluation.num_samples or the split's size if smaller, and says which (docs/methods.md §9.7)."""
    test = np.array(PreparedData(digits_test_dir).images)
    out = tmp_path / "floor.json"
    args = ["floor", "--data", str(digits_test_dir), "--reference", str(digits_ref), "--weights", str(digits_cnn),
            "--replicates", "50"]
    assert main(args + ["--num-samples", "500", "--progress-samples", "100", "--out", str(out)]) == 0
    floor = json.loads(out.read_text())
    assert floor["format"] == "timestep_lab.floor/1" and floor["num_samples"] == len(test) == 359
    assert "fewer than the final FID's 500" in floor["sample_count_basis"]
    scored = evaluate_samples(test, digits_ref, cfg=EvalConfig(kid=False, precision_recall=False))
    want = {"torch-fidelity": scored["fid"], "clean-fid": scored["fid_clean_fid"]}
    assert [r["tool"] for r in floor["records"]] == ["torch-fidelity", "clean-fid"]
    for r in floor["records"]:
        assert {"tool", "metric", "value", "ci", "num_samples", "extractor", "reference_sha256"} <= set(r)
        assert r["metric"] == "fid" and r["extractor"] == "digits-cnn" and r["num_samples"] == 359
        assert r["reference_sha256"] == sha256_file(digits_ref) and r["feature_weights_sha256"] == sha256_file(digits_cnn)
        assert r["value"] == pytest.approx(want[r["tool"]], rel=1e-6)
        assert 0 <= r["ci"][0] < r["value"] < r["ci"][1]
    # fewer than the split: a seeded subset of that many (one tool is enough to see it)
    assert main(args + ["--num-samples", "100", "--out", str(tmp_path / "a.json"), "--set", "eval.tools=[torch-fidelity]"]) == 0
    a = json.loads((tmp_path / "a.json").read_text())
    assert a["num_samples"] == 100 and a["sample_count_basis"].startswith("100 held-out images")
    assert a["records"][0]["value"] > floor["records"][0]["value"]  # FID's small-sample bias: fewer images, higher
    # issue 42: the floor at the progress points' count is that same seeded subset's FID, beside the full one
    assert floor["records"][0]["at_counts"]["100"] == pytest.approx(a["records"][0]["value"], rel=1e-6)
    # the bootstrap is seeded: same features and seed, same interval
    feats = np.random.default_rng(0).normal(size=(60, 4)).astype(np.float32)
    boot = [_bootstrap(feats, 0.5, np.zeros(4), np.eye(4), 50, 0) for _ in range(2)]
    assert boot[0] == boot[1] and boot[0] != _bootstrap(feats, 0.5, np.zeros(4), np.eye(4), 50, 1)
    capsys.readouterr()
    assert main(args + ["--num-samples", "1", "--out", str(tmp_path / "c.json")]) == 2
    assert "--num-samples" in capsys.readouterr().err and not (tmp_path / "c.json").exists()


def test_evaluate_snapshots_gives_fid_against_images_seen(digits_dir, digits_ref, tmp_path):
    from conftest import tiny_config

    from timestep_lab.train import train

    cfg = tiny_config(digits_dir, train={"total_kimg": 2.0, "batch_size": 64, "snapshot_every_kimg": 1.0,
                                         "checkpoint_every_kimg": 2.0, "log_every_kimg": 1.0})
    run = train(cfg, tmp_path / "run", progress=False)
    out = tmp_path / "fid_progress.json"
    assert main(["evaluate-snapshots", "--snapshots", str(run.out_dir / "snapshots"), "--reference", str(digits_ref),
                 "--out", str(out), "--set", "sample.num_samples=24", "--set", "sample.steps=4",
                 "--set", "eval.kid_subsets=3", "--no-progress"]) == 0
    progress = json.loads(out.read_text())
    assert progress["label"] == "FID (digits-CNN features)" and progress["reference_sha256"] == sha256_file(digits_ref)
    points = progress["points"]
    assert [p["nimg"] for p in points] == sorted(p["nimg"] for p in points) and len(points) == 2
    assert points[0]["kimg"] == pytest.approx(points[0]["nimg"] / 1000)
    for p in points:
        assert set(p["fid"]) == {"torch-fidelity", "clean-fid"} and p["num_generated"] == 24 and p["steps"] == 4
        assert p["label"] == "FID (digits-CNN features)" and p["model_sha256"]


def _same_samples_and_metrics(a: Path, b: Path) -> dict:
    """Assert two run folders hold the same samples (every array, the metadata) and the same
    metrics.json (every value; only ``samples_file`` names its own folder); return a's metrics."""
    with np.load(a / "samples.npz") as za, np.load(b / "samples.npz") as zb:
        assert sorted(za.files) == sorted(zb.files) == ["images", "meta", "seeds", "sha256"]
        for key in za.files:
            assert np.array_equal(za[key], zb[key]), key
    ma, mb = (json.loads((d / "metrics.json").read_text()) for d in (a, b))
    assert (ma.pop("samples_file"), mb.pop("samples_file")) == (str(a / "samples.npz"), str(b / "samples.npz"))
    assert ma == mb  # FID/KID/PR of both tools to the last digit, and the whole protocol record
    return ma


def test_sample_score_equals_sample_then_evaluate(digits_dir, digits_test_dir, digits_ref, tmp_path):
    """The workflow's one job per run (`sample-score`) writes what the two jobs `sample` and
    `evaluate` wrote, each in its own process: the same sample arrays, PNG grid and FIDs."""
    import os
    import subprocess
    import sys

    from conftest import ROOT, tiny_config

    from timestep_lab.train import train

    model = train(tiny_config(digits_dir), tmp_path / "run", progress=False).out_dir / "model.pt"
    sets = ["--set", "sample.num_samples=24", "--set", "sample.steps=4"]
    scoring = ["--set", "eval.kid_subsets=3", "--set", "eval.kid_subset_size=10"]
    common = ["--threads", "1", "--no-progress"]
    two, one = tmp_path / "two-jobs", tmp_path / "one-job"

    def cli(*args):
        r = subprocess.run([sys.executable, "-m", "timestep_lab", *map(str, args)], cwd=ROOT, capture_output=True,
                           text=True, env={**os.environ, "OMP_NUM_THREADS": "1"}, timeout=600)
        assert r.returncode == 0, r.stderr[-3000:]

    cli("sample", "--model", model, "--out", two / "samples.npz", "--grid", two / "samples.png", *sets, *common)
    cli("evaluate", "--samples", two / "samples.npz", "--reference", digits_ref, "--out", two / "metrics.json",
        *scoring, *common)
    cli("sample-score", "--model", model, "--out", one / "samples.npz", "--grid", one / "samples.png", *sets,
        "--reference", digits_ref, "--metrics", one / "metrics.json", *scoring, *common)
    metrics = _same_samples_and_metrics(two, one)
    assert (two / "samples.png").read_bytes() == (one / "samples.png").read_bytes()
    assert metrics["protocol"]["num_generated"] == 24 and metrics["protocol"]["steps"] == 4
    assert {r["tool"] for r in metrics["records"] if r["metric"] == "fid"} == {"torch-fidelity", "clean-fid"}
    assert metrics["fid"] > 0 and metrics["fid_clean_fid"] > 0

    # the timestep-contribution job: ground-truth replacement inside a t range, in-process this time
    gt = ["--gt-data", digits_test_dir, "--gt-range", "0", "49", "--set", "sample.num_samples=8", "--set",
          "sample.steps=4", "--no-progress"]
    a, b = tmp_path / "contrib-two", tmp_path / "contrib-one"
    assert main(list(map(str, ["sample", "--model", model, "--out", a / "samples.npz", *gt]))) == 0
    assert main(list(map(str, ["evaluate", "--samples", a / "samples.npz", "--reference", digits_ref,
                               "--out", a / "metrics.json", *scoring, "--no-progress"]))) == 0
    assert main(list(map(str, ["sample-score", "--model", model, "--out", b / "samples.npz", *gt, *scoring,
                               "--reference", digits_ref, "--metrics", b / "metrics.json"]))) == 0
    assert _same_samples_and_metrics(a, b)["protocol"]["num_generated"] == 8


def test_sample_score_refuses_bad_input_before_sampling(digits_ref, tmp_path, capsys):
    """A missing reference or an override of another section is one error line, and no samples
    file is written (the work is not done first)."""
    base = ["sample-score", "--model", str(tmp_path / "none.pt"), "--out", str(tmp_path / "s.npz"), "--metrics",
            str(tmp_path / "m.json"), "--no-progress"]
    assert main([*base, "--reference", str(digits_ref), "--set", "train.batch_size=4"]) == 2
    assert "this command takes only eval.* and sample.* overrides" in capsys.readouterr().err
    assert main([*base, "--reference", str(tmp_path / "missing.npz")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error:") and "missing.npz" in err and not (tmp_path / "s.npz").exists()


# ------------------------------------------------------------------------------ Inception, offline


@pytest.fixture
def offline(monkeypatch, tmp_path):
    """No network, and the libraries' weight caches pointed at empty temp folders."""

    def refuse(*args, **kwargs):
        raise OSError("network blocked by the test")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "getaddrinfo", lambda *a, **k: (_ for _ in ()).throw(socket.gaierror("blocked")))
    monkeypatch.setenv("TORCH_HOME", str(tmp_path / "torch-home"))
    monkeypatch.setattr(metrics, "CLEANFID_CACHE_DIR", tmp_path / "cleanfid-cache")
    return tmp_path


def test_missing_inception_weights_fail_fast_with_the_file_names(offline, digits_dir, capsys):
    import cleanfid.fid  # noqa: F401  (import time is not what is timed below)
    import torch_fidelity  # noqa: F401

    for extra in ([], ["--set", "eval.download_weights=false"]):
        t0 = time.perf_counter()
        rc = main(["reference-stats", "--data", str(digits_dir), "--extractor", "inception-v3",
                   "--out", str(offline / "ref.npz"), *extra])
        elapsed = time.perf_counter() - t0
        err = capsys.readouterr().err
        assert rc == 2 and elapsed < 5, (rc, elapsed)
        assert TF_INCEPTION_FILE in err and CF_INCEPTION_FILE in err, err
        assert str(offline / "torch-home" / "hub" / "checkpoints") in err and str(offline / "cleanfid-cache") in err
        assert ("failed after" in err) if not extra else ("downloads disabled" in err)
        assert "Traceback" not in err
    assert not (offline / "ref.npz").exists()
    assert not list((offline / "torch-home").rglob("*.pth")) if (offline / "torch-home").exists() else True
    with pytest.raises(WeightsMissingError, match=TF_INCEPTION_FILE):
        metrics.load_feature_extractor("inception-v3", offline / "nowhere", tools=("torch-fidelity",), download=False)


@pytest.fixture(scope="module")
def inception_weights(tmp_path_factory) -> Path:
    """Randomly initialised Inception-v3 weights in both libraries' real formats, as a rehearsal
    writes them: torch-fidelity's state dict of its own module (built without a download) and a
    TorchScript module with clean-fid's interface (``.layers(x) -> [B, 2048, 1, 1]`` on 299x299
    input: torch-fidelity's network traced, since the NVIDIA TF-graph port cannot be rebuilt
    offline), the same random weights in both."""
    from timestep_lab.rehearsal.fake_weights import write_inception

    return write_inception(tmp_path_factory.mktemp("inception"))


def _tiny_rgb(tmp_path: Path, n: int, seed: int = 0) -> Path:
    """A prepared folder of ``n`` random 3x32x32 images (the on-disk format of `prepare`)."""
    data = tmp_path / "rgb"
    data.mkdir()
    np.save(data / "images.npy", np.random.default_rng(seed).integers(0, 256, size=(n, 32, 32, 3), dtype=np.uint8))
    (data / "manifest.json").write_text(json.dumps({"dataset": "tiny-rgb", "split": "train", "count": n,
                                                    "shape": [32, 32, 3], "images_sha256": sha256_file(data / "images.npy")}))
    return data


def test_inception_weights_load_and_extract_offline(offline, inception_weights, tmp_path):
    """reference-stats through both libraries' Inception loaders, no network: 2048-d features."""
    ref_file = tmp_path / "ref.npz"
    assert main(["reference-stats", "--data", str(_tiny_rgb(tmp_path, 4)), "--extractor", "inception-v3",
                 "--weights", str(inception_weights), "--out", str(ref_file)]) == 0
    ref = load_reference(ref_file)
    assert ref.arrays["tf_features"].shape == ref.arrays["cf_features"].shape == (4, 2048)
    for key in ("tf_features", "cf_features"):
        assert np.isfinite(ref.arrays[key]).all() and ref.arrays[key].std() > 0
    assert ref.meta["feature_weights_sha256"] == {"torch-fidelity": sha256_file(inception_weights / TF_INCEPTION_FILE),
                                                  "clean-fid": sha256_file(inception_weights / CF_INCEPTION_FILE)}
    assert ref.meta["label"] == "FID (Inception-v3)" and ref.meta["cleanfid_resize"].startswith("clean")


@pytest.mark.slow  # two 2048x2048 matrix square roots: ~40 s on a 2-core CPU
def test_inception_path_runs_end_to_end_offline(offline, inception_weights, tmp_path):
    ref_file = tmp_path / "ref.npz"
    assert main(["reference-stats", "--data", str(_tiny_rgb(tmp_path, 4)), "--extractor", "inception-v3",
                 "--weights", str(inception_weights), "--out", str(ref_file)]) == 0
    samples = np.random.default_rng(1).integers(0, 256, size=(4, 32, 32, 3), dtype=np.uint8)  # the floor: 4
    save_samples(tmp_path / "samples.npz", samples, [0, 1, 2, 3], {"method": "ddpm", "steps": 10})
    out = tmp_path / "metrics.json"
    assert main(["evaluate", "--samples", str(tmp_path / "samples.npz"), "--reference", str(ref_file),
                 "--weights", str(inception_weights), "--out", str(out), "--set", "eval.precision_recall=false"]) == 0
    res = json.loads(out.read_text())
    assert res["label"] == "FID (Inception-v3)" and np.isfinite(res["fid"]) and np.isfinite(res["fid_clean_fid"])
    assert {r["tool"] for r in res["records"]} == {"torch-fidelity", "clean-fid"}
    assert all(r["feature_extractor"] == "inception-v3" and r["num_reference"] == 4 and r["feature_dim"] == 2048
               for r in res["records"])


def test_reference_subset_is_seeded_and_spread_over_a_class_ordered_folder():
    """A prepared folder ordered by class (ImageNet's): the first N would cover only the first
    classes; the seeded subset covers them all, the same every time (docs/methods.md §8.5)."""
    from timestep_lab.metrics import reference_subset

    labels = np.repeat(np.arange(100), 50)  # 5000 images, grouped by class
    idx, text = reference_subset(len(labels), 500)
    again, _ = reference_subset(len(labels), 500)
    assert np.array_equal(idx, again) and len(set(idx.tolist())) == 500 and np.all(np.diff(idx) > 0)
    assert len(set(labels[idx].tolist())) > 95 and len(set(labels[:500].tolist())) == 10
    assert "500 of 5000" in text and "seeded random subset" in text
    every, text = reference_subset(len(labels), None)
    assert np.array_equal(every, np.arange(5000)) and text == "all 5000"
    assert np.array_equal(reference_subset(10, 50)[0], np.arange(10))
