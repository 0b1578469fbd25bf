"""The study run table (timestep_lab.workflow): ids, dedupe, derived runs, errors."""

import pytest

from timestep_lab.config import ConfigError, config_from_dict
from timestep_lab.workflow import build_runs, scale_range, study_runs


def study(**groups):
    return {
        "study": "t",
        "data": {"dataset": "digits", "train_split": "train"},
        "base": {"train": {"batch_size": 64, "total_kimg": 4}, "diffusion": {"num_timesteps": 100}},
        "samplers": {"uniform": {"name": "uniform"}, "speed": {"name": "speed", "params": {"k": 5}}},
        "weightings": {"none": {"name": "none"}, "speed": {"name": "speed"}},
        "evaluation": {"progress_every_kimg": 2},
        "groups": groups,
    }


def test_grid_times_seeds_with_readable_ids_and_shared_runs():
    s = study(a={"grid": {"sampler": ["uniform", "speed"]}, "seeds": [0, 1], "progress": True},
              b={"grid": {"schedule": ["linear", "cosine"]}, "seeds": [0]})
    runs = build_runs(s)
    assert sorted(runs) == sorted([
        "uniform_none_eps_b64_linear_s0", "uniform_none_eps_b64_linear_s1", "speed_none_eps_b64_linear_s0",
        "speed_none_eps_b64_linear_s1", "uniform_none_eps_b64_cosine_s0"])
    shared = runs["uniform_none_eps_b64_linear_s0"]
    assert shared.groups == ("a", "b") and shared.progress
    assert shared.config["train"]["snapshot_every_kimg"] == 2  # followed during training
    assert "snapshot_every_kimg" not in runs["uniform_none_eps_b64_cosine_s0"].config["train"]
    sp = runs["speed_none_eps_b64_linear_s1"].config
    assert sp["timesteps"] == {"name": "speed", "params": {"k": 5}} and sp["train"]["seed"] == 1
    assert sp["data"]["path"] == "data/prepared/digits-train"
    config_from_dict(sp)  # a valid RunConfig


def test_list_entries_and_overrides():
    s = study(c={"list": [{"seed": 2, "overrides": {"model.channels": 24}}, {"sampler": "speed", "weighting": "speed"}]})
    runs = build_runs(s)
    assert set(runs) == {"uniform_none_eps_b64_linear_s2_ch24", "speed_speed_eps_b64_linear_s0"}
    assert runs["uniform_none_eps_b64_linear_s2_ch24"].config["model"]["channels"] == 24


def test_flow_group_ids_progress_interval_and_scoring_protocol():
    """A flow group: the process and its solver read as words in the id, the group's own progress
    interval, and the scoring protocol per process (evaluation.sample_by_kind)."""
    from timestep_lab.workflow import eval_sample

    s = study(a={"grid": {"sampler": ["uniform"]}, "seeds": [0], "progress": True},
              flow_matching={"grid": {"sampler": ["uniform", "speed"], "prediction": ["v"]}, "seeds": [0],
                             "progress": True, "progress_every_kimg": 0.5,
                             "overrides": {"diffusion.kind": "flow", "sample.method": "heun"}})
    s["evaluation"].update(sample={"method": "ddim", "steps": 20, "eta": 0.0},
                           sample_by_kind={"flow": {"method": "heun", "steps": 10}})
    runs = build_runs(s)
    flow = runs["uniform_none_v_b64_linear_s0_flow_heun"]
    assert flow.config["diffusion"]["kind"] == "flow" and flow.config["sample"]["method"] == "heun"
    assert flow.config["train"]["snapshot_every_kimg"] == 0.5
    assert runs["uniform_none_eps_b64_linear_s0"].config["train"]["snapshot_every_kimg"] == 2
    assert eval_sample(s["evaluation"], flow.config) == {"method": "heun", "steps": 10, "eta": 0.0}
    assert eval_sample(s["evaluation"], runs["uniform_none_eps_b64_linear_s0"].config)["method"] == "ddim"
    config_from_dict(flow.config)


def test_errors_name_the_place():
    with pytest.raises(ConfigError, match="groups.a.grid: unknown axis 'sampler_name'"):
        build_runs(study(a={"grid": {"sampler_name": ["uniform"]}}))
    with pytest.raises(ConfigError, match="sampler 'nope' is not in the samplers catalogue"):
        build_runs(study(a={"grid": {"sampler": ["nope"]}}))
    with pytest.raises(ConfigError, match=r"groups.a.list\[0\]: unknown key"):
        build_runs(study(a={"list": [{"sampler": "uniform", "lr": 1}]}))
    with pytest.raises(ConfigError, match="defined twice with different settings"):
        build_runs(study(a={"list": [{"id": "x"}, {"id": "x", "seed": 3}]}))


def test_derived_runs_for_the_analyses():
    s = study(batch_size={"grid": {"batch_size": [16, 64]}})
    s["analyses"] = {"slots": {"n_slots": 10, "finetune": [3, 9], "overrides": {"train.total_kimg": 2}},
                     "batch_size": {"small": 16, "toward_zero_scale": 20, "overrides": {"train.total_kimg": 1}}}
    s["reference"] = {"overrides": {"train.batch_size": 256}}
    runs = study_runs(s)
    assert runs["reference"].config["train"]["batch_size"] == 256
    ft = runs["finetune_slot9"]
    assert ft.init_from == "reference" and ft.config["timesteps"] == {"name": "slots", "params": {"active": [9]}}
    assert ft.extra["slots_file"] == "analyses/slots.json" and ft.config["train"]["total_kimg"] == 2
    tz = runs["toward_zero_from-uniform_none_eps_b16_linear_s0"]
    assert tz.init_from == "uniform_none_eps_b16_linear_s0" and tz.config["train"]["batch_size"] == 16
    assert tz.config["timesteps"] == {"name": "toward_zero", "params": {"scale": 20}}
    s["analyses"]["slots"]["finetune"] = [11]
    with pytest.raises(ConfigError, match="slot 11 is outside 1..n_slots=10"):
        study_runs(s)


def test_group_progress_cadence_long_reference_and_continuation_control():
    s = study(a={"grid": {"sampler": ["uniform", "speed"]}, "progress": True},
              b={"grid": {"batch_size": [16, 64]}, "progress": True, "progress_every_kimg": 1})
    s["reference"] = {"overrides": {"train.total_kimg": 16}, "progress_every_kimg": 4}
    s["analyses"] = {"batch_size": {"small": 16, "control": True, "overrides": {"train.total_kimg": 1}}}
    runs = study_runs(s)
    # a run in both groups gets the densest spacing; a run of one group its group's own
    assert runs["uniform_none_eps_b64_linear_s0"].config["train"]["snapshot_every_kimg"] == 1
    assert runs["speed_none_eps_b64_linear_s0"].config["train"]["snapshot_every_kimg"] == 2
    ref = runs["reference"]
    assert ref.progress and ref.config["train"]["snapshot_every_kimg"] == 4 and ref.config["train"]["total_kimg"] == 16
    ctl, tz = runs["uniform_from-uniform_none_eps_b16_linear_s0"], runs["toward_zero_from-uniform_none_eps_b16_linear_s0"]
    assert ctl.init_from == tz.init_from == "uniform_none_eps_b16_linear_s0" and ctl.groups == ("batch_size",)
    assert ctl.config["timesteps"] == {"name": "uniform"} and ctl.config["train"]["total_kimg"] == 1
    assert {k: v for k, v in ctl.config.items() if k != "timesteps"} == \
        {k: v for k, v in tz.config.items() if k != "timesteps"}  # the same continuation, t uniform
    assert not ctl.extra.get("control")  # not a slot-analysis control
    s["reference"]["pretrained"] = "some/checkpoint.pt"
    assert not study_runs(s)["reference"].progress  # a pretrained reference has no training to follow


def test_contribution_arms_leave_out_the_final_step_and_need_steps():
    from timestep_lab.workflow import contribution_ranges

    s = study()
    s["analyses"] = {"timestep_contribution": {"ranges": [[1, 500], [10, 100]], "min_steps": 3}}
    assert contribution_ranges(s) == {"none": None, "final": (0, 0), "t1-500": (1, 49), "t10-100": (1, 9)}
    s["analyses"]["timestep_contribution"]["ranges"] = [[1, 10]]  # t = 0 alone at T = 100: the final step
    with pytest.raises(ConfigError, match=r"\[1, 10\] .*nothing once the final step is left out"):
        contribution_ranges(s)
    s["analyses"]["timestep_contribution"] = {"ranges": [[10, 100]], "sample": {"steps": 10}, "min_steps": 2}
    with pytest.raises(ConfigError, match=r"holds 0 step\(s\) of the 10-step chain"):  # 0, 11, 22, ...
        contribution_ranges(s)
    s["analyses"]["timestep_contribution"]["sample"]["spacing"] = "quadratic"  # dense near 0: 0, 1, 5, 11, ...
    assert contribution_ranges(s)["t10-100"] == (1, 9)


def test_the_contribution_runs_on_a_derived_superres_run():
    """Run superres: the base run conditioned on a low-resolution copy (analyses.timestep_contribution
    .superres), trained but not scored; its overrides apply; a study without the analysis has none."""
    s = study()
    assert study_runs(s)["superres"].config["conditioning"]["params"] == {"factor": 4, "upsample": "nearest"}
    s["analyses"] = {"timestep_contribution": {"ranges": [[1, 500]], "superres": {"factor": 2,
                                                                              "overrides": {"train.total_kimg": 3}}}}
    runs = study_runs(s)
    sr, base = runs["superres"], runs["reference"]  # the reference: base with no overrides here
    assert sr.config["conditioning"] == {"name": "lowres", "params": {"factor": 2, "upsample": "nearest"}}
    assert sr.groups == () and not sr.progress and sr.config["train"]["total_kimg"] == 3
    assert {k: v for k, v in sr.config.items() if k not in ("conditioning", "train")} == \
        {k: v for k, v in base.config.items() if k != "train"}
    config_from_dict(sr.config)  # a complete, valid run config


def test_chain_timesteps_match_the_sampler():
    from timestep_lab.generate.sampling import respaced_timesteps
    from timestep_lab.processes.timeranges import chain_timesteps

    for T in (10, 100, 1000):
        for steps in (None, 1, 2, 3, 7, 20, 99, 100, 250):
            for spacing in ("uniform", "quadratic"):
                assert chain_timesteps(T, steps, spacing) == respaced_timesteps(T, steps, spacing).tolist()


def test_scale_range_maps_paper_ranges_to_T():
    assert scale_range(1, 1000, 1000) == (0, 999)
    assert scale_range(1, 10, 1000) == (0, 9)
    assert scale_range(500, 1000, 1000) == (499, 999)
    assert scale_range(1, 10, 100) == (0, 0)
    assert scale_range(100, 500, 100) == (10, 49)


def _write_run(root, rid, *, status=None, fid=None, log_loss=0.5, shift=None, guidance=None):
    import json

    d = root / "runs" / rid
    d.mkdir(parents=True)
    (d / "train_log.jsonl").write_text(json.dumps({"nimg": 1000, "loss": log_loss, "wall_time_s": 1.0,
                                                    "sec_per_step": 0.1}) + "\n")
    if fid is not None:
        rec = {"metric": "fid", "value": fid, "tool": "torch-fidelity", "tool_version": "0.4.0",
               "feature_extractor": "digits-cnn", "feature_weights_sha256": "ab", "label": "FID (digits-CNN features)",
               "num_generated": 10, "num_reference": 20, "sampler": "ddim", "steps": 5, "eta": 0.0, "ema": True,
               "seed_range": [0, 9], "reference_file": "ref.npz", "reference_sha256": "cd", "clip_x0": False,
               **({} if shift is None else {"shift": shift}),
               **({} if guidance is None else {"guidance_scale": guidance})}
        (d / "metrics.json").write_text(json.dumps({"status": status or "ok", "nimg": 1000, "records": [rec]}))


def test_collect_keeps_the_protocol_and_tells_failed_from_unscored(tmp_path):
    import json

    import pandas as pd

    from timestep_lab.workflow.collect import collect

    axes = {"sampler": "uniform", "weighting": "none", "prediction": "eps", "batch_size": 64, "schedule": "linear",
            "seed": 0}
    runs = {"a": {"axes": axes, "groups": ["g"]}, "b": {"axes": {**axes, "seed": 1}, "groups": ["g"]},
            "ft": {"axes": axes, "groups": []}, "lost": {"axes": {**axes, "seed": 2}, "groups": ["g"]}}
    _write_run(tmp_path, "a", fid=10.0)
    _write_run(tmp_path, "b", fid=float("nan"), status="diverged")
    _write_run(tmp_path, "ft")  # a fine-tune: trained, never scored
    _write_run(tmp_path, "lost")  # in a group but its metrics never came
    collect(runs, str(tmp_path), str(tmp_path / "m.csv"), str(tmp_path / "r.csv"), str(tmp_path / "s.json"))
    status = pd.read_csv(tmp_path / "r.csv").set_index("run")["status"].to_dict()
    assert status == {"a": "ok", "b": "diverged", "ft": "unscored", "lost": "missing"}
    assert json.loads((tmp_path / "s.json").read_text())["failed_runs"] == ["b", "lost"]
    m = pd.read_csv(tmp_path / "m.csv")
    row = m[m["run"] == "a"].iloc[0]
    assert (row["method"], row["steps"], row["seeds"], row["reference_sha256"], row["feature_weights_sha256"]) == \
        ("ddim", 5, "0-9", "cd", "ab")
    summary = json.loads((tmp_path / "s.json").read_text())
    assert summary["fid"]["g"]["uniform+none+eps+64+linear"] == {"mean": 10.0, "std": 0.0, "n": 1}


def test_collect_takes_the_sample_shift_column_from_the_score_record(tmp_path):
    """metrics.csv's sample_shift is the shift the record says the samples were drawn on; a record
    written before records kept it leaves the run table's column (the run's own sample.shift)."""
    import pandas as pd

    from timestep_lab.workflow.collect import collect

    axes = {"sampler": "uniform", "weighting": "none", "prediction": "v", "batch_size": 64, "schedule": "linear",
            "seed": 0}
    runs = {"new": {"axes": axes, "groups": ["g"], "columns": {"sample_shift": 1.0}},
            "old": {"axes": {**axes, "seed": 1}, "groups": ["g"], "columns": {"sample_shift": 3.0}}}
    _write_run(tmp_path, "new", fid=10.0, shift=3)
    _write_run(tmp_path, "old", fid=11.0)
    collect(runs, str(tmp_path), str(tmp_path / "m.csv"), str(tmp_path / "r.csv"), str(tmp_path / "s.json"))
    m = pd.read_csv(tmp_path / "m.csv").set_index("run")
    assert m.loc["new", "sample_shift"] == 3.0 and m.loc["old", "sample_shift"] == 3.0
    assert not m.loc["new", "clip_x0"]
    assert pd.read_csv(tmp_path / "r.csv").set_index("run").loc["new", "sample_shift"] == 1.0


def test_collect_keeps_the_guidance_scale_of_the_score_record(tmp_path):
    """metrics.csv's guidance_scale is the classifier-free guidance the samples were drawn with;
    empty for a record from before it was kept."""
    import pandas as pd

    from timestep_lab.workflow.collect import collect

    axes = {"sampler": "uniform", "weighting": "none", "prediction": "eps", "batch_size": 64, "schedule": "linear",
            "seed": 0}
    runs = {"guided": {"axes": axes, "groups": ["g"]}, "old": {"axes": {**axes, "seed": 1}, "groups": ["g"]}}
    _write_run(tmp_path, "guided", fid=10.0, guidance=1.5)
    _write_run(tmp_path, "old", fid=11.0)
    collect(runs, str(tmp_path), str(tmp_path / "m.csv"), str(tmp_path / "r.csv"), str(tmp_path / "s.json"))
    m = pd.read_csv(tmp_path / "m.csv").set_index("run")
    assert m.loc["guided", "guidance_scale"] == 1.5 and pd.isna(m.loc["old", "guidance_scale"])


def test_the_sampling_shift_is_an_arms_setting_never_the_evaluations():
    """sample.shift in an arm's overrides gives the arm its own id and sample_shift column; the
    evaluation's sampler settings setting a shift is one error naming the key."""
    from timestep_lab.workflow import arm_columns

    s = study(g={"list": [{"seed": 0}, {"seed": 0, "overrides": {"sample.shift": 3.0}}]})
    runs = study_runs(s)
    shifts = sorted(arm_columns(r.config, r.init_from)["sample_shift"] for rid, r in runs.items() if "g" in r.groups)
    assert shifts == [1.0, 3.0]
    for where, evaluation in (("evaluation.sample.shift", {"sample": {"method": "ddim", "shift": 3.0}}),
                              ("evaluation.sample_by_kind.flow.shift", {"sample_by_kind": {"flow": {"shift": 2}}})):
        bad = {**s, "evaluation": {**(s.get("evaluation") or {}), **evaluation}}
        with pytest.raises(ConfigError, match=where.replace(".", r"\.")):
            study_runs(bad)


def test_runs_from_a_diffusers_reference_train_the_diffusers_unet():
    s = study(batch_size={"grid": {"batch_size": [16, 64]}})
    s["base"]["model"] = {"channels": 128, "channel_mult": [1, 2, 2, 2], "dropout": 0.1}
    s["analyses"] = {"slots": {"finetune": [3]}, "batch_size": {"small": 16}}
    s["reference"] = {"pretrained": "data/pretrained/ddpm-cifar10-32", "format": "diffusers"}
    runs = study_runs(s)
    ft = runs["finetune_slot3"]
    # replaced, not merged: the base's UNet fields do not describe the folder's network
    assert ft.config["model"] == {"name": "diffusers_unet2d", "pretrained": "data/pretrained/ddpm-cifar10-32",
                                  "pretrained_format": "diffusers"}
    assert ft.config["timesteps"] == {"name": "slots", "params": {"active": [3]}}
    config_from_dict(ft.config)  # a valid RunConfig
    # runs that do not start from the reference keep the configured UNet
    assert runs["toward_zero_from-uniform_none_eps_b16_linear_s0"].config["model"]["channels"] == 128
    assert runs["reference"].config["model"]["channels"] == 128
    # a guided-diffusion reference loads into our UNet: nothing changes
    s["reference"] = {"pretrained": "data/pretrained/256x256_diffusion_uncond.pt", "format": "guided_diffusion"}
    assert study_runs(s)["finetune_slot3"].config["model"]["channels"] == 128


def test_run_length_has_one_spelling():
    s = study(c={"list": [{"seed": 0, "overrides": {"train.total_kimg": 3}}]}, batch_size={"grid": {"batch_size": [16]}})
    s["analyses"] = {"slots": {"finetune": [3], "overrides": {"train.total_kimg": 2}},
                     "batch_size": {"small": 16, "overrides": {"train.total_kimg": 1}}}
    runs = study_runs(s)
    assert runs["uniform_none_eps_b64_linear_s0_kimg3"].config["train"]["total_kimg"] == 3
    assert runs["finetune_slot3"].config["train"]["total_kimg"] == 2
    assert runs["toward_zero_from-uniform_none_eps_b16_linear_s0"].config["train"]["total_kimg"] == 1
    retired = {
        "analyses.slots.finetune_kimg": lambda s: s["analyses"]["slots"].update(finetune_kimg=2),
        "analyses.batch_size.toward_zero_kimg": lambda s: s["analyses"]["batch_size"].update(toward_zero_kimg=1),
        r"groups.c.list\[0\].total_kimg": lambda s: s["groups"]["c"]["list"][0].update(total_kimg=3),
        "reference.overrides.train: use dotted": lambda s: s.update(reference={"overrides": {"train": {"total_kimg": 2}}}),
    }
    for key, change in retired.items():
        bad = study(c={"list": [{"seed": 0}]}, batch_size={"grid": {"batch_size": [16]}})
        bad["analyses"] = {"slots": {"finetune": [3]}, "batch_size": {"small": 16}}
        change(bad)
        with pytest.raises(ConfigError, match=key + ".*train.total_kimg"):
            study_runs(bad)


def test_the_fid_sample_count_has_one_spelling_in_a_study():
    """``analyses.consistency.num_samples`` was never read (the analysis compares the runs' scored
    samples): one error line names it and the setting that counts, before the schema check."""
    from timestep_lab.workflow import contribution_sample_count, fid_sample_count, scoring_sample

    s = study(c={"list": [{"seed": 0}]})
    s["analyses"] = {"consistency": {"num_samples": 64}}
    with pytest.raises(ConfigError, match=r"analyses\.consistency\.num_samples .*evaluation\.num_samples"):
        study_runs(s)
    ev = {"num_samples": 359, "progress_num_samples": 200, "sample": {"method": "ddim", "steps": 20},
          "sample_by_kind": {"flow": {"method": "heun", "steps": 10}}}
    assert fid_sample_count(ev) == 359 and fid_sample_count(ev, progress=True) == 200
    assert scoring_sample(ev, {"diffusion": {"kind": "flow"}}, progress=True) == {"num_samples": 200, "method": "heun",
                                                                                  "steps": 10}
    assert contribution_sample_count({"analyses": {"timestep_contribution": {"num_samples": 64}}}) == 64
    assert contribution_sample_count({}) == 500


def test_dag_build_imports_no_torch_pandas_or_scipy():
    import subprocess
    import sys

    r = subprocess.run([sys.executable, "-X", "importtime", "-c", "import timestep_lab.config, timestep_lab.workflow"],
                       capture_output=True, text=True, check=True)
    heavy = {ln.rsplit("|", 1)[-1].strip() for ln in r.stderr.splitlines()} & {"torch", "pandas", "scipy"}
    assert not heavy


def test_snakemake_lint_is_clean():
    import os
    import shutil
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    exe = shutil.which("snakemake", path=os.pathsep.join([str(Path(sys.executable).parent), os.environ["PATH"]]))
    if exe is None:
        pytest.skip("snakemake is not installed")
    r = subprocess.run([exe, "--lint"], cwd=root, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and "Congratulations" in r.stdout + r.stderr, r.stdout + r.stderr


def test_cluster_profile_groups_only_cpu_rules_that_exist():
    """The cluster profile's job groups bundle small CPU-only rules; a GPU rule in a group would
    make Snakemake sum the GPUs of the group's parallel jobs (and run them all on the first)."""
    import re
    from pathlib import Path

    import yaml

    root = Path(__file__).resolve().parent.parent
    text = (root / "workflow" / "profiles" / "cluster" / "config.yaml").read_text()
    profile = yaml.safe_load(text)
    from timestep_lab.groups import gpu_rules as recorded

    assert "GPU_RULES = gpu_rules()" in text  # the profile asks the study groups' records
    gpu_rules = set(recorded())
    rule_text = "".join(p.read_text() for p in (root / "workflow" / "rules").glob("*.smk"))
    rules = set(re.findall(r"^rule (\w+):", rule_text, re.M))
    # the records name exactly the rules that request a GPU (train: train_resources, the rest gpu_resources)
    blocks = {rule: body for f in (root / "workflow" / "rules").glob("*.smk")
              for rule, body in re.findall(r"^rule (\w+):\n(.*?)(?=^rule |\Z)", f.read_text(), re.M | re.S)}
    asking = {r for r, body in blocks.items() if "gpu_resources()" in body or "train_resources()" in body}
    assert gpu_rules == asking, (gpu_rules ^ asking)
    grouped = {entry.split("=")[0]: entry.split("=")[1] for entry in profile["groups"]}
    assert "train" in gpu_rules and "sample_score" in gpu_rules
    assert grouped and set(grouped) <= rules, set(grouped) - rules
    assert not set(grouped) & gpu_rules, set(grouped) & gpu_rules
    components = dict(entry.split("=") for entry in profile["group-components"])
    assert set(components) == set(grouped.values())
    assert all(int(n) >= 2 for n in components.values())


def test_local_profile_leaves_cores_to_a_global_profile():
    """profiles/default sets `cores: all` for local runs only: Snakemake layers it over
    `--profile cluster` and caps every cluster job's threads at its `cores` (a 2-core login
    node gave the paper configs' 8-thread jobs 2). tests/test_dag.py dry-runs the real thing."""
    from timestep_lab.workflow.snakefile import local_cores

    assert local_cores([], {}) == "all"
    assert local_cores(["--configfile", "config/smoke.yaml", "--executor", "local", "-n"], {}) == "all"
    assert local_cores(["--profile", "none"], {"SNAKEMAKE_PROFILE": "none"}) == "all"
    for argv in (["--profile", "cluster"], ["--profile=cluster"], ["--configfile", "x.yaml", "--profile", "site"],
                 ["--executor", "slurm"], ["-e", "slurm"], ["--executor=googlebatch"]):
        assert local_cores(argv, {}) is None, argv
    assert local_cores([], {"SNAKEMAKE_PROFILE": "cluster"}) is None


def test_local_profile_schedules_greedily():
    """Snakemake's default ILP scheduler solves an LP at every scheduling round: ~95 CPU-s of the
    default study's snakemake process for ~380 one-core jobs with nothing to optimise (the
    profile's comment). A profile without the key would bring it back."""
    from pathlib import Path

    import yaml

    profile = Path(__file__).resolve().parent.parent / "workflow" / "profiles" / "default" / "config.yaml"
    assert yaml.safe_load(profile.read_text())["scheduler"] == "greedy"


def test_arm_id_drops_only_the_seed_component():
    from timestep_lab.workflow import arm_id

    assert arm_id("uniform_none_eps_b128_linear_s3", 3) == "uniform_none_eps_b128_linear"
    assert arm_id("uniform_none_eps_b128_linear_s1_ch24", 1) == "uniform_none_eps_b128_linear_ch24"
    assert arm_id("toward_zero_from-uniform_none_eps_b16_linear_s0", 0) == "toward_zero_from-uniform_none_eps_b16_linear"
    assert arm_id("reference", 0) == "reference"


@pytest.mark.parametrize("config", ["config.yaml", "digits-full.yaml", "mnist.yaml", "cifar10.yaml", "celebahq.yaml",
                                    "imagenet.yaml"])
def test_arms_are_told_apart_by_their_columns_alone(config):
    """Within every group of every shipped study, the run axes (seed aside) and the arm columns
    (workflow.ARM_COLUMNS) name exactly one arm: claims select arms by these values, so two arms
    with the same values would be one arm to them, and one arm with two would be split."""
    from pathlib import Path

    from timestep_lab.config import load_yaml
    from timestep_lab.workflow import AXES, arm_columns, arm_id, base_columns

    study_cfg = load_yaml(Path(__file__).resolve().parents[1] / "config" / config)
    runs = study_runs(study_cfg, source=config)
    base = base_columns(study_cfg)
    model = study_cfg["base"]["model"]  # a UNet's channels; a DiT's explicit hidden width, else none (celebahq, imagenet)
    assert base["channels"] == (model.get("channels") or (model.get("params") or {}).get("hidden") or None)
    assert base["total_kimg"] == study_cfg["base"]["train"]["total_kimg"] and "seed" not in base
    for group in sorted({g for r in runs.values() for g in r.groups}):
        arms: dict[tuple, set] = {}
        for rid, run in runs.items():
            if group in run.groups:
                cols = {**{a: run.axes[a] for a in AXES if a != "seed"}, **arm_columns(run.config, run.init_from)}
                arms.setdefault(tuple(sorted((k, repr(v)) for k, v in cols.items())), set()).add(arm_id(rid, run.axes["seed"]))
        assert all(len(ids) == 1 for ids in arms.values()), (group, [ids for ids in arms.values() if len(ids) > 1])
        named = [next(iter(ids)) for ids in arms.values()]
        assert len(named) == len(set(named)), (group, named)


def test_arm_columns_of_the_default_study():
    from pathlib import Path

    from timestep_lab.config import load_yaml
    from timestep_lab.workflow import arm_columns

    study_cfg = load_yaml(Path(__file__).resolve().parents[1] / "config" / "config.yaml")
    runs = study_runs(study_cfg, source="config.yaml")
    cols = {rid: arm_columns(r.config, r.init_from) for rid, r in runs.items()}
    consistency = [rid for rid, r in runs.items() if "consistency" in r.groups]
    kinds = sorted({(cols[r]["optim_schedule"], cols[r]["lr_compensated"], cols[r]["channels"]) for r in consistency})
    assert kinds == [("constant", False, 16), ("constant", False, 24), ("momentum_decay", False, 16),
                     ("momentum_decay", True, 16)]
    small = "uniform_none_eps_b16_linear_s0"
    assert cols[f"toward_zero_from-{small}"]["init_from"] == small == cols[f"uniform_from-{small}"]["init_from"]
    assert cols[small]["init_from"] == "none"
    assert {cols[r]["total_kimg"] for r, run in runs.items() if "flow_matching" in run.groups} == {6}


@pytest.mark.parametrize("name", ["config", "smoke", "mnist", "digits-full", "cifar10", "celebahq", "imagenet"])
def test_the_collect_command_rebuilds_the_run_table_the_dag_has(name):
    """The collect job gets the study as one JSON word (workflow/rules/evaluate.smk) and rebuilds
    the run table from it: the same run ids, axes, groups and columns as the workflow's own table
    (run ids slug overrides in their written order, so the word keeps the config's key order)."""
    import json
    from pathlib import Path

    from snakemake.utils import validate

    from timestep_lab.config import load_yaml
    from timestep_lab.workflow import run_table

    root = Path(__file__).resolve().parent.parent
    cfg = load_yaml(root / "config" / f"{name}.yaml")
    validate(cfg, str(root / "workflow" / "schemas" / "config.schema.yaml"), set_default=True)
    word = json.dumps(cfg)  # what the rule passes
    assert run_table(study_runs(json.loads(word))) == run_table(study_runs(cfg))
