"""The jobs Snakemake plans for a study: the DAG the estimate prices, built by Snakemake itself.

:func:`study_dag` runs Snakemake's own DAG build (its Python API, ``forceall``: every job of the
default target, whatever has already run; no lock, no job run, offline) on a study config in a
child process, and returns every job with its rule, wildcards, benchmark name and input files,
the study config as the workflow loaded and validated it (schema defaults filled in by
``workflow/rules/common.smk``) and the run configs of the workflow's run table (what the
``run_config`` jobs write to ``results/<study>/runs/<run>/run.yaml``: their ``config`` param). A child process, because the
workflow pins the process's arithmetic variables and exits on a bad config: here that exit is one
:class:`ConfigError` with the workflow's own ``error:`` line.

The build takes 2-4 CPU-s (the workflow checks the run configs, importing torch, unless
``.snakemake/`` records them as checked). Knows Snakemake's API; knows nothing of costs.

    python -m timestep_lab.cost.estimate.dag SNAKEFILE STUDY.yaml   # the DAG as JSON (the child)
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from timestep_lab.config import ConfigError

__all__ = ["Job", "StudyDag", "study_dag"]


@dataclass(frozen=True)
class Job:
    """One planned job: ``name`` is its benchmark file's stem (the rule's name for a job without one,
    e.g. ``all``), ``runs`` the run ids whose files it reads or writes (``results/<study>/runs/<run>/``),
    ``args`` the ``--key=value`` words of its params (its command's options, e.g. the profile bank)."""

    rule: str
    name: str
    wildcards: dict[str, str]
    runs: tuple[str, ...]
    local: bool
    args: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class StudyDag:
    source: str
    config: dict[str, Any]  # the study as the workflow validated it (defaults filled in)
    runs: dict[str, dict[str, Any]]  # run id -> its run.yaml (the run_config job's config param)
    jobs: tuple[Job, ...]

    def rule_jobs(self, rule: str) -> list[Job]:
        return [j for j in self.jobs if j.rule == rule]

    def rules(self) -> list[str]:
        """The rules of the DAG, in the order of their first job (Snakemake's topological order)."""
        return list(dict.fromkeys(j.rule for j in self.jobs))


def study_dag(config: str | Path, snakefile: str | Path = "Snakefile", python: str = sys.executable) -> StudyDag:
    """The DAG of ``config`` planned by ``snakefile`` (run from the Snakefile's folder, as the
    workflow is); :class:`ConfigError` with the workflow's error line on a bad study."""
    config, snakefile = Path(config), Path(snakefile).resolve()
    if not config.is_file():
        raise ConfigError(f"{config}: no such study config")
    if not snakefile.is_file():
        raise ConfigError(f"{snakefile}: no Snakefile (run the estimate from the project's folder)")
    cfg = config.resolve()
    try:
        cfg = cfg.relative_to(snakefile.parent)  # as the workflow names it: CONFIG_SOURCE
    except ValueError:
        pass
    proc = subprocess.run([python, "-m", __name__, str(snakefile), str(cfg)], cwd=snakefile.parent,
                          capture_output=True, text=True)
    if proc.returncode != 0:
        errors = [ln for ln in proc.stderr.splitlines() if ln.startswith("error:")]
        line = errors[-1][len("error:"):].strip() if errors else (proc.stderr.strip().splitlines() or ["?"])[-1]
        raise ConfigError(line if str(config) in line or str(cfg) in line else f"{config}: {line}")
    data = json.loads(proc.stdout)
    jobs = tuple(Job(j["rule"], j["name"], j["wildcards"], tuple(j["runs"]), j["local"], j["args"]) for j in data["jobs"])
    return StudyDag(str(config), data["config"], data["runs"], jobs)


def _build(snakefile: Path, config: Path) -> dict:
    """The child: build the DAG with Snakemake's API and describe it (JSON-ready)."""
    from snakemake.api import SnakemakeApi
    from snakemake.settings.types import ConfigSettings, DAGSettings, OutputSettings, ResourceSettings

    with SnakemakeApi(OutputSettings(quiet={"all"})) as api:
        wf_api = api.workflow(resource_settings=ResourceSettings(),
                              config_settings=ConfigSettings(configfiles=[config]),
                              snakefile=snakefile, workdir=Path.cwd())
        wf_api.dag(DAGSettings(forceall=True))
        wf = wf_api._workflow  # printdag's steps (snakemake.api.DAGApi.printdag), keeping the jobs
        wf._prepare_dag(forceall=True, ignore_incomplete=True, lock_warn_only=True, nolock=True)
        wf._build_dag()
        study = wf.config["study"]
        run_path = re.compile(rf"^results/{re.escape(study)}/runs/([^/]+)/")
        jobs = []
        # every run's run.yaml (the run_config job's config param), a pretrained reference's too (no
        # run_config job: it is read, not trained): the workflow's own run table
        runs = {rid: run.config for rid, run in wf.globals["RUNS"].items()}
        ordered = [j for level in wf.dag.toposorted() for j in sorted(level, key=lambda j: (j.rule.name, str(j.benchmark)))]
        for job in ordered:
            files = [str(f) for f in (*job.input, *job.output)]
            used = {m.group(1) for m in map(run_path.match, files) if m}
            jobs.append({"rule": job.rule.name, "name": Path(str(job.benchmark)).stem if job.benchmark else job.rule.name,
                         "wildcards": dict(job.wildcards), "runs": sorted(used), "args": _args(job.params),
                         "local": job.rule.name in wf._localrules or bool(job.rule.norun)})
        return {"config": wf.config, "runs": runs, "jobs": jobs}


def _args(params) -> dict[str, str]:
    """``--key=value`` words among a job's params (lists of words: common.smk's option lists)."""
    out = {}
    for value in params:
        for word in value if isinstance(value, list) else [value]:
            if isinstance(word, str) and word.startswith("--") and "=" in word:
                key, _, val = word[2:].partition("=")
                out[key] = val
    return out


def _main(argv: list[str]) -> int:
    try:
        data = _build(Path(argv[0]), Path(argv[1]))
    except SystemExit as exc:  # the workflow's own error line (common.smk)
        print(exc.code if isinstance(exc.code, str) else f"error: {argv[1]}: the workflow refused it", file=sys.stderr)
        return 1
    except Exception as exc:  # noqa: BLE001 - Snakemake's WorkflowError and friends: one line
        print(f"error: {argv[1]}: {' '.join(str(exc).split())[:500]}", file=sys.stderr)
        return 1
    json.dump(data, sys.stdout, default=str)
    return 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
