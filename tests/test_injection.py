"""Study-config values never run as shell code, never become options, never become wildcards
(issues: shell injection in the Snakemake rules; hardening round 2).

Names (the study, split names, catalogue labels, run ids, tags, the GPU model) are matched whole
by the schema (jsonschema's ``$`` also matches before a final newline: the patterns end in
``$(?!\\n)``), so a trailing newline, a quote or a leading '-' is refused before any job runs,
with the key in the one error line. Paths (data.source, reference.pretrained,
evaluation.weights) may hold quotes, ``$(...)``, spaces, unicode or a leading '-', but no control
character and no brace (Snakemake would read ``{...}`` as a wildcard): every rule pastes them
shell-quoted (``{...:q}``) in the ``--flag=value`` form.

``test_every_rule_renders_hostile_paths_as_literal_option_values`` renders every job's shell
command of two hostile studies (the rules found in the DAG, checked against
``snakemake --list-rules``), runs each in bash against a stub ``python``/``torchrun`` that
records its argv, and parses that argv with the real command-line parser.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import re
import shlex
import subprocess
from pathlib import Path

import pytest
import yaml
from worktree import ROOT, copy_worktree, run, study_env

HOSTILE = ["x' ; touch PWNED ; echo '", "/m$(touch PWNED).pt", 'a"; touch PWNED; echo "b', "`touch PWNED`"]


_SMOKE = yaml.safe_load((ROOT / "config" / "smoke.yaml").read_text())


def _study(change) -> dict:
    cfg = copy.deepcopy(_SMOKE)
    cfg["study"] = "inj"
    change(cfg)
    return cfg


def _pwned(*roots: Path) -> list[Path]:
    return [p for r in roots for p in r.rglob("PWNED")] + [p for p in Path.cwd().glob("PWNED")]


# ------------------------------------------------------------------------------- the schema

NAME_KEYS = {
    "study": lambda c, v: c.update(study=v),
    "data.train_split": lambda c, v: c["data"].update(train_split=v),
    "data.test_split": lambda c, v: c["data"].update(test_split=v),
    "resources.gpu_model": lambda c, v: c["resources"].update(gpu_model=v),
    "samplers": lambda c, v: c["samplers"].update({v: {"name": "uniform"}}),
    "groups.consistency.list.0.tag": lambda c, v: c["groups"]["consistency"]["list"][0].update(tag=v),
    "groups.consistency.list.0.id": lambda c, v: c["groups"]["consistency"]["list"][0].update(id=v),
    "groups.sampler_comparison.grid.sampler.0": lambda c, v: c["groups"]["sampler_comparison"]["grid"].update(
        sampler=[v]),
}
BAD_NAMES = [HOSTILE[0], "smoke\n", "smoke\n; touch PWNED", "-x", "--help", "..", "a/b", "a b", "a{b}", ""]
PATH_KEYS = {
    "data.source": lambda c, v: c["data"].update(source=v),
    "reference.pretrained": lambda c, v: c["reference"].update(pretrained=v),
    "evaluation.weights": lambda c, v: c["evaluation"].update(extractor="inception-v3", weights=v),
}
BAD_PATHS = ["/d/{split}", "/d/{x}.pt", "a\x00b", "a\nb", "model.pt\n", "a\tb", "a\rb", "a\x1bb", "a\x7fb", "a\x85b"]
GOOD_PATHS = [*HOSTILE, "--help", "-x", "folder with space/file.pt", "ünï cödé/ф.pt", "/" + "a" * 5000,
              "it's \"quoted\" \\ back"]


@pytest.fixture(scope="module")
def schema_cached():
    """Snakemake's validate parses the schema's YAML on every call (0.2 s): parse it once."""
    import snakemake.utils as su

    load, cache = su._load_configfile, {}

    def cached(source, filetype="Config"):
        key = (str(source), filetype)
        if key not in cache:
            cache[key] = load(source, filetype=filetype)
        return copy.deepcopy(cache[key])

    su._load_configfile = cached
    yield
    su._load_configfile = load


def _schema_error(cfg: dict) -> str | None:
    """The one-line summary of the schema's verdict on ``cfg`` (None: valid), as common.smk prints it."""
    from snakemake.utils import validate

    from timestep_lab.workflow import schema_error_summary

    try:
        validate(cfg, str(ROOT / "workflow" / "schemas" / "config.schema.yaml"), set_default=True)
    except Exception as exc:  # noqa: BLE001 - snakemake's WorkflowError around jsonschema's error
        return schema_error_summary(str(exc))
    return None


def test_every_pattern_of_the_schema_matches_whole():
    """Every ``pattern`` in the schema is the name or the path pattern, and neither lets a final
    newline through (jsonschema uses ``re.search``, whose ``$`` matches before a final newline)."""
    from timestep_lab.workflow.snakefile import NAME_PATTERN, PATH_PATTERN

    schema = yaml.safe_load((ROOT / "workflow" / "schemas" / "config.schema.yaml").read_text())
    found = []

    def walk(node):
        if isinstance(node, dict):
            found.extend([node["pattern"]] if isinstance(node.get("pattern"), str) else [])
            for v in node.values():
                walk(v)
        elif isinstance(node, list):
            for v in node:
                walk(v)

    walk(schema)
    assert set(found) == {NAME_PATTERN, PATH_PATTERN}, set(found)
    for pattern in found:
        assert re.search(pattern, "ok") and not re.search(pattern, "ok\n") and not re.search(pattern, "ok\n\n")


@pytest.mark.parametrize("key", list(NAME_KEYS))
def test_names_are_matched_whole_and_refused_naming_the_key(key, schema_cached):
    for value in BAD_NAMES:
        err = _schema_error(_study(lambda c: NAME_KEYS[key](c, value)))
        assert err is not None and err.startswith(f"{key}:"), (value, err)
        assert "\n" not in err
    assert _schema_error(_study(lambda c: NAME_KEYS[key](c, "ok_name.v2-1"))) is None


@pytest.mark.parametrize("key", list(PATH_KEYS))
def test_paths_refuse_control_characters_and_braces_naming_the_key(key, schema_cached):
    for value in BAD_PATHS:
        err = _schema_error(_study(lambda c: PATH_KEYS[key](c, value)))
        assert err is not None and err.startswith(f"{key}:") and "\n" not in err, (value, err)
        assert ("brace" in err) and ("control character" in err), err  # says what is refused, not a regex
    for value in GOOD_PATHS:
        assert _schema_error(_study(lambda c: PATH_KEYS[key](c, value))) is None, value


def _dry_error(root: Path, cfg_name: str) -> tuple[int, list[str], str]:
    r = run(["snakemake", "--configfile", cfg_name, "--cores", "1", "-n"], root, study_env(), timeout=120)
    return r.returncode, [ln for ln in r.stdout.splitlines() if ln.startswith("error:")], r.stdout


@pytest.mark.workflow
def test_bad_values_and_a_bad_config_name_fail_before_any_job_with_one_error_line(tmp_path):
    """End to end through snakemake: a study name ending in a newline, a NUL in a path (was
    "Logfile not found" and no error line), braces in the --configfile name (a wildcard), a
    top-level key given twice (the second silently won: issue 38), a consistency group with one
    model to compare (failed only after all the training; a study without the group plans none of
    its analysis) and an impossible ``budget:`` (issue 40)."""
    root = copy_worktree(tmp_path / "repo")
    cases = {"newline.yaml": ("study", _study(lambda c: c.update(study="inj\n"))),
             "nul.yaml": ("data.source", _study(lambda c: c["data"].update(source="/d/a\x00b"))),
             "c{split}.yaml": ("c{split}.yaml", _study(lambda c: None)),
             "twice.yaml": ("key 'groups' appears twice",
                            yaml.safe_dump(_study(lambda c: None)) + "groups: {consistency: {list: [{seed: 0}]}}\n"),
             "onemodel.yaml": ("groups.consistency", _study(lambda c: c["groups"]["consistency"].update(list=[{"seed": 0}]))),
             "budget.yaml": ("budget.amount must be > 0", _study(lambda c: c.update(budget={"amount": -1})))}
    for name, (named, cfg) in cases.items():
        (root / name).write_text(cfg if isinstance(cfg, str) else yaml.safe_dump(cfg))
        rc, errors, out = _dry_error(root, name)
        assert rc != 0 and len(errors) == 1 and named in errors[0], out[-3000:]
        assert "Traceback" not in out
    assert not _pwned(root, tmp_path)


# ------------------------------------------------------------------------------- every rule, rendered

STUDIES = {
    # digits: the digits-CNN rules, a pretrained reference and a hostile data source
    "digits": (["cfg $(touch PWNED) 'q' `x`.yaml", lambda c: (
        c.update(study="inj.a_1-2"),
        c["data"].update(source="--help"),
        c["reference"].update(pretrained="/m $(touch PWNED) `touch PWNED` ';touch PWNED;' \"q\" é.pt"))]),
    # inception: hostile Inception weights and source, and torchrun as the training launcher
    "inception": (["-cfg.yaml", lambda c: (
        c["resources"].update(device="cuda", gpus=2),
        c["data"].update(source="x' ; touch PWNED ; echo '"),
        c["evaluation"].update(extractor="inception-v3", weights="-w/x' ; touch PWNED ; echo ' ü"),
        c["reference"].update(pretrained="--model=evil.pt"))]),
}


def _render(root: Path, cfg_name: str) -> dict[str, list[str]]:
    """{rule: [its jobs' shell commands]} of a forced dry run of every target (None: no shell)."""
    r = run(["snakemake", "--configfile", cfg_name, "--cores", "2", "-n", "-p", "--forceall", "all", "experiments",
             "dvc_export", "data"], root, study_env(), timeout=600)
    assert r.returncode == 0, r.stdout[-4000:]
    rules: dict[str, list[str]] = {}
    rule, lines = None, r.stdout.splitlines()
    for i, line in enumerate(lines):
        m = re.match(r"^(?:local)?rule (\w+):$", line)
        if m:
            rule = m.group(1)
            rules.setdefault(rule, [])
        elif line.startswith("Shell command: ") and rule:
            cmd = [line[len("Shell command: "):]]
            for nxt in lines[i + 1:] if cmd != ["None"] else []:  # a command with a newline in it goes on
                if not nxt.strip() or nxt.startswith(("[", "Job stats:")) or re.match(r"^(local)?rule \w+:$", nxt):
                    break
                cmd.append(nxt)
            if cmd != ["None"]:
                rules[rule].append("\n".join(cmd))
            rule = None
    return rules


_STUB = """#!/bin/bash
f=$(mktemp "$ARGV_DIR/call.XXXXXX")
printf '%s\\0' "$(basename "$0")" "$@" > "$f"
"""


def _run_in_bash(cmd: str, root: Path, env: dict[str, str], calls: Path) -> list[list[str]]:
    """Run one rendered command as Snakemake would (``set -euo pipefail``), against the stubs."""
    for target in [t for prev, t in zip(shlex.split(cmd), shlex.split(cmd)[1:]) if prev == ">"]:
        (root / target).parent.mkdir(parents=True, exist_ok=True)
    r = subprocess.run(["bash", "-c", "set -euo pipefail; " + cmd], cwd=root, env=env, capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0, (cmd, r.stderr)
    out = []
    for f in sorted(calls.iterdir()):
        out.append(f.read_bytes().decode().split("\0")[:-1])
        f.unlink()
    return out


def _subparsers() -> dict[str, argparse.ArgumentParser]:
    from timestep_lab.cli import build_parser

    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    return dict(sub.choices)


def _leaves(value):
    """The plain values in a parsed option: a list's items, a JSON object's (a study's or a run's
    config) leaves, at any depth."""
    if isinstance(value, dict):
        value = list(value.values())
    if isinstance(value, list):
        for v in value:
            yield from _leaves(v)
    else:
        yield value


def _check_option_form(argv: list[str], parser: argparse.ArgumentParser) -> None:
    """Every option that takes one value is ``--flag=value``; the values of a multi-value option
    (``--finetuned A B``) and positionals never start with '-' (else they would be options)."""
    actions = {s: a for a in parser._actions for s in a.option_strings}
    i = 0
    while i < len(argv):
        tok = argv[i]
        if tok == "--":  # positionals follow (estimate's study config may start with '-')
            return
        if tok.startswith("-"):
            flag = tok.split("=", 1)[0]
            act = actions[flag]
            if act.nargs == 0:
                assert "=" not in tok, tok
            elif act.nargs is None:
                assert "=" in tok, f"{flag} is not in the --flag=value form: {argv}"
            else:  # nargs '+', '*' or N: its values follow as words
                assert "=" not in tok, tok
                while i + 1 < len(argv) and not argv[i + 1].startswith("-"):
                    i += 1
        i += 1


@pytest.mark.workflow
@pytest.mark.slow
def test_every_rule_renders_hostile_paths_as_literal_option_values(tmp_path):
    root = copy_worktree(tmp_path / "repo")
    bin_dir, calls = tmp_path / "stub-bin", tmp_path / "calls"
    bin_dir.mkdir()
    calls.mkdir()
    for name in ("python", "torchrun"):
        (bin_dir / name).write_text(_STUB)
        (bin_dir / name).chmod(0o755)
    env = {**study_env(), "ARGV_DIR": str(calls)}
    env["PATH"] = os.pathsep.join([str(bin_dir), env["PATH"]])
    parsers = _subparsers()
    from timestep_lab.cli import build_parser

    seen_rules: set[str] = set()
    for study, (cfg_name, change) in STUDIES.items():
        cfg = _study(change)
        (root / cfg_name).write_text(yaml.safe_dump(cfg))
        hostile = {cfg_name, cfg["data"]["source"], cfg["reference"]["pretrained"], cfg["evaluation"]["weights"]} - {None}
        rendered = _render(root, "./" + cfg_name if cfg_name.startswith("-") else cfg_name)
        seen_rules |= set(rendered)
        parsed_values: set[str] = set()
        for rule, commands in rendered.items():
            for cmd in commands:
                argvs = _run_in_bash(cmd, root, env, calls)
                assert len(argvs) == 1, (rule, cmd, argvs)  # one command line ran, nothing else
                prog, *argv = argvs[0]
                if prog == "torchrun":
                    assert argv[:3] == ["--standalone", "--nproc_per_node=2", "-m"], argv
                    argv = argv[2:]
                assert prog in ("python", "torchrun") and argv[:2] == ["-m", "timestep_lab"], (rule, argv)
                command = argv[2]
                _check_option_form(argv[3:], parsers[command])
                ns = build_parser().parse_args(argv[2:])  # what the command would receive
                for value in vars(ns).values():
                    parsed_values.update(str(v) for v in _leaves(value))
        assert not _pwned(root, tmp_path), f"{study}: a value ran as a command"
        # every hostile path reached some command as one argument, verbatim (not a wildcard, not a flag)
        for value in hostile:
            if value != cfg_name:
                assert value in parsed_values or any(v.endswith("=" + value) for v in parsed_values), (study, value)
        assert cfg_name in parsed_values or "./" + cfg_name in parsed_values, study  # the estimate's study config
        for v in parsed_values:  # and nothing hostile arrived mangled
            if "PWNED" in v:
                assert v in hostile or v.split("=", 1)[-1] in hostile, v
    r = run(["snakemake", "--configfile", "./" + STUDIES["inception"][0], "--list-rules"], root, study_env(), timeout=120)
    assert r.returncode == 0, r.stdout
    listed = {ln.strip() for ln in r.stdout.splitlines() if re.fullmatch(r"\w+", ln)}  # names (docstrings indented)
    assert listed and listed <= seen_rules, f"rules never rendered: {sorted(listed - seen_rules)}"


def test_a_pretrained_model_in_a_folder_with_a_space_works(digits_dir, tmp_path):
    """The real `posterior` job on a checkpoint under "my models/": the path stays one argument."""
    from conftest import tiny_config

    from timestep_lab.train import train

    model = train(tiny_config(digits_dir, train={"total_kimg": 0.064}), tmp_path / "my models" / "ref",
                  progress=False).model_path
    root = copy_worktree(tmp_path / "repo")
    (root / "space.yaml").write_text(yaml.safe_dump(_study(lambda c: c["reference"].update(pretrained=str(model)))))
    r = run(["snakemake", "results/inj/analyses/posterior.json", "--configfile", "space.yaml", "--cores", "1"], root,
            study_env(), timeout=300)
    assert r.returncode == 0, r.stdout[-3000:]
    out = json.loads((root / "results" / "inj" / "analyses" / "posterior.json").read_text())
    assert out  # written by the real command from the model under "my models/"
    assert not _pwned(root, tmp_path)
