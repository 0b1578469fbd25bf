import pytest

from timestep_lab.components import check_config
from timestep_lab.config import ConfigError, RunConfig, dump_config, load_config


def write(tmp_path, text, name="run.yaml"):
    p = tmp_path / name
    p.write_text(text)
    return p


def test_defaults_and_deltas(tmp_path):
    p = write(tmp_path, "train:\n  batch_size: 64\n  total_kimg: 2\noptim:\n  lr: 1e-3\n")
    cfg = load_config(p)
    assert cfg.train.batch_size == 64 and cfg.train.total_kimg == 2.0
    assert cfg.optim.lr == 1e-3  # YAML 1.1 would read "1e-3" as a string
    assert cfg.model == RunConfig().model


def test_overrides_parse_yaml_values(tmp_path):
    p = write(tmp_path, "train:\n  batch_size: 64\n")
    cfg = load_config(p, ["train.batch_size=16", "model.channel_mult=[1,2,4]", "timesteps.params.k=3",
                          "timesteps.name=speed", "sample.steps=null"])
    assert cfg.train.batch_size == 16
    assert cfg.model.channel_mult == (1, 2, 4)
    assert cfg.timesteps.name == "speed" and cfg.timesteps.params == {"k": 3}
    assert cfg.sample.steps is None


def test_unknown_key_names_key_and_file(tmp_path):
    p = write(tmp_path, "train:\n  batchsize: 64\n")
    with pytest.raises(ConfigError) as exc:
        load_config(p)
    msg = str(exc.value)
    assert str(p) in msg and "train.batchsize" in msg and "did you mean 'train.batch_size'" in msg


def test_wrong_type_names_key_and_file(tmp_path):
    p = write(tmp_path, "train:\n  batch_size: big\n")
    with pytest.raises(ConfigError, match=r"run\.yaml: train\.batch_size: expected int, got str 'big'"):
        load_config(p)
    p = write(tmp_path, "model:\n  channel_mult: 2\n")
    with pytest.raises(ConfigError, match="model.channel_mult: expected a list"):
        load_config(p)
    with pytest.raises(ConfigError, match=r"--set.*train\.seed: expected int"):
        load_config(write(tmp_path, "{}"), ["train.seed=1.5"])


def test_impossible_values(tmp_path):
    with pytest.raises(ConfigError, match="train.batch_size must be > 0, got 0"):
        load_config(write(tmp_path, "train:\n  batch_size: 0\n"))
    with pytest.raises(ConfigError, match="train.batch_size=96 must be a multiple of train.batch_gpu=64"):
        load_config(write(tmp_path, "train:\n  batch_size: 96\n  batch_gpu: 64\n"))
    with pytest.raises(ConfigError, match="sample.method must be ddpm, ddim, euler or heun"):
        load_config(write(tmp_path, "sample:\n  method: rk4\n"))


def test_registry_names_and_params_are_checked(tmp_path):
    cfg = load_config(write(tmp_path, "timesteps:\n  name: unifrom\n"))
    with pytest.raises(ConfigError, match="timesteps.name: unknown timestep sampler 'unifrom'.*did you mean 'uniform'"):
        check_config(cfg, "x.yaml")
    cfg = load_config(write(tmp_path, "weighting:\n  name: speed\n  params:\n    lam: 1.5\n"))
    with pytest.raises(ConfigError, match=r"x\.yaml: weighting\.params\.lam must be in \[0\.5, 1\.0\]"):
        check_config(cfg, "x.yaml")
    cfg = load_config(write(tmp_path, "weighting:\n  name: min_snr\n  params:\n    gama: 5\n"))
    with pytest.raises(ConfigError, match="unknown key 'weighting.params.gama'"):
        check_config(cfg, "x.yaml")


def test_missing_and_broken_files(tmp_path):
    with pytest.raises(ConfigError, match="nope.yaml: config file not found"):
        load_config(tmp_path / "nope.yaml")
    with pytest.raises(ConfigError, match="invalid YAML"):
        load_config(write(tmp_path, "train: [\n"))


def test_resolved_config_round_trips(tmp_path):
    cfg = load_config(None, ["model.attention_resolutions=[4]", "optim.betas=[0.8,0.99]"])
    dump_config(cfg, tmp_path / "resolved.yaml")
    assert load_config(tmp_path / "resolved.yaml") == cfg
