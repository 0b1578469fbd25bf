"""Per-rule study cost from Snakemake benchmark files (timestep_lab.cost.measured, benchmarks/study_cost.py)."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from timestep_lab.cost.measured import format_cost, read_benchmark, study_cost

ROOT = Path(__file__).resolve().parents[1]
HEADER = "s\th:m:s\tmax_rss\tmax_vms\tmax_uss\tmax_pss\tio_in\tio_out\tmean_load\tcpu_time\n"


def _bench(path: Path, *rows: tuple) -> None:
    """A benchmark file in Snakemake's own format: header, then (s, max_rss, cpu_time) rows."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(HEADER + "".join(f"{s}\t0:00:0{int(s) % 10}\t{rss}\t900.0\t80.0\t81.0\t0.1\t0.2\t50.0\t{cpu}\n"
                                     for s, rss, cpu in rows))


def _study(tmp_path: Path) -> Path:
    res = tmp_path / "results" / "toy"
    _bench(res / "benchmarks" / "train" / "a.tsv", (10.0, 300.0, 9.5))
    _bench(res / "benchmarks" / "train" / "b.tsv", (12.0, 320.0, 11.5))
    _bench(res / "benchmarks" / "evaluate" / "a.tsv", (4.0, 500.0, 3.0), (6.0, 480.0, 5.0))  # two repeats: mean
    _bench(res / "benchmarks" / "collect" / "all.tsv", (0.2, "NA", "NA"))  # too short to sample
    return res


def _logs(tmp_path: Path) -> Path:
    """Job logs as the CLI leaves them: train/a ends with its usage line (exact CPU), train/b
    failed before printing one, run_config is a local rule."""
    logs = tmp_path / "logs" / "toy"
    (logs / "train").mkdir(parents=True)
    (logs / "train" / "a.log").write_text("12:00:00 INFO timestep_lab.train: done\ntimestep_lab usage: cpu_s=40.250 max_rss_mb=350.5\n")
    (logs / "train" / "b.log").write_text("error: something\n")
    return logs


def test_exact_cpu_from_the_job_log_wins_over_the_sampled_one(tmp_path):
    res = _study(tmp_path)
    _bench(res / "benchmarks" / "run_config" / "a.tsv", (0.1, 900.0, 250.0))  # snakemake's own process
    costs = study_cost(res, _logs(tmp_path), local={"run_config"})
    train = costs["train"]
    # a: 40.25 exact (the benchmark sampled 9.5); b: no usage line -> the sampled 11.5
    assert (train.cpu_s, train.exact_jobs, train.max_rss_mb) == (51.75, 1, 350.5)
    assert costs["run_config"].cpu_s == 0 and costs["run_config"].wall_s == 0.1  # local: no CPU of its own
    text = format_cost(costs)
    assert "CPU-s exact (the job's own usage line) for 1 of 5 jobs" in text


def test_the_cli_ends_a_successful_command_with_its_usage_line(tmp_path):
    from timestep_lab.cost.measured import read_usage

    log = tmp_path / "job.log"
    with open(log, "w") as fh:
        r = subprocess.run([sys.executable, "-m", "timestep_lab", "slots", "--help"], stdout=fh, stderr=fh, timeout=120)
    assert r.returncode == 0 and read_usage(log) is None  # --help exits through argparse: no work, no line
    with open(log, "w") as fh:
        r = subprocess.run([sys.executable, "-m", "timestep_lab", "prepare", "digits", "--split", "test", "--out",
                            str(tmp_path / "digits-test")], stdout=fh, stderr=fh, timeout=120)
    assert r.returncode == 0, log.read_text()
    cpu, rss, start = read_usage(log)
    assert 0 < cpu < 120 and rss > 10 and start is None  # a fresh process (no server in this environment)


def test_costs_sum_per_rule_and_take_the_mean_of_repeats(tmp_path):
    costs = study_cost(_study(tmp_path))
    assert list(costs) == ["train", "evaluate", "collect"]  # by CPU, largest first
    train, ev, col = costs["train"], costs["evaluate"], costs["collect"]
    assert (train.jobs, train.cpu_s, train.wall_s, train.max_rss_mb) == (2, 21.0, 22.0, 320.0)
    assert (ev.jobs, ev.cpu_s, ev.wall_s, ev.max_rss_mb) == (1, 4.0, 5.0, 490.0)
    assert (col.jobs, col.cpu_s, col.wall_s) == (1, 0.0, 0.2)
    assert math.isnan(read_benchmark(_study(tmp_path) / "benchmarks" / "collect" / "all.tsv")["cpu_time"])


def test_table_total_and_startup_share(tmp_path):
    text = format_cost(study_cost(_study(tmp_path)), startup_cpu_s=2.5, local={"collect"})
    total = next(line for line in text.splitlines() if line.startswith("total"))
    assert total.split()[1:4] == ["4", "25.0", "27.2"]
    # 3 jobs start a process (collect runs inside snakemake): 3 x 2.5 = 7.5 of 25 CPU-s
    assert "3 job processes started fresh x 2.50 CPU-s" in text and "= 8 CPU-s, 30% of the study's CPU" in text


def test_jobs_started_elsewhere_pay_no_startup_and_a_serving_process_is_its_own_row(tmp_path):
    """A local run with warm start: train/a ran in a worker forked from the server (start=warm), so
    of the 3 process jobs only 2 pay a start; the server's own CPU (its named usage lines in a log
    directly under logs/<study>/, one per snakemake run) is a row of its own, named by the lines,
    and part of the start-up share. The accounting knows neither the name nor the log's."""
    from timestep_lab.cost.measured import read_usage

    res, logs = _study(tmp_path), _logs(tmp_path)
    (logs / "train" / "a.log").write_text("done\ntimestep_lab usage: cpu_s=10.000 max_rss_mb=350.5 start=warm\n")
    (logs / "warm_start.log").write_text("ready in 5.1 s, pid 7\nexit 0 after 3.0 s: train --config x\n"
                                         "timestep_lab warm-start server usage: cpu_s=5.500\n"
                                         "ready in 5.0 s, pid 9\ntimestep_lab warm-start server usage: cpu_s=4.500\n")
    (logs / "other.log").write_text("timestep_lab usage: cpu_s=99.000 max_rss_mb=1.0\n")  # a job's line: no row
    assert read_usage(logs / "train" / "a.log") == (10.0, 350.5, "warm")
    costs = study_cost(res, logs)
    server = costs["(warm-start server)"]
    assert (server.jobs, server.cpu_s) == (2, 10.0) and len(costs) == 4
    assert costs["train"].prestarted_jobs == 1 and costs["train"].cpu_s == 10.0 + 11.5
    text = format_cost(costs, startup_cpu_s=2.5, local={"collect"})
    # 2 fresh starts x 2.5 + the servers' 10.0 = 15 CPU-s of a total 21.5 + 4 + 10 = 35.5
    assert "2 job processes started fresh x 2.50 CPU-s" in text and "+ (warm-start server) 10.0 CPU-s (1 jobs started by another" in text
    assert "= 15 CPU-s, 42% of the study's CPU" in text


def test_missing_or_malformed_benchmarks_are_named(tmp_path):
    with pytest.raises(FileNotFoundError, match="benchmarks"):
        study_cost(tmp_path)
    bad = tmp_path / "benchmarks" / "train" / "x.tsv"
    bad.parent.mkdir(parents=True)
    bad.write_text("")
    with pytest.raises(ValueError, match="x.tsv"):
        study_cost(tmp_path)


def test_every_job_is_one_cli_command():
    """No rule runs Python inside Snakemake (a ``run:`` block): every job is a ``python -m
    timestep_lab`` command that can be rerun by hand from its log line and ends its log with its
    exact CPU (its usage line), so the measured cost needs no list of local rules."""
    import re

    for smk in sorted((ROOT / "workflow" / "rules").glob("*.smk")):
        assert not re.search(r"^\s+run:\s*$", smk.read_text(), re.M), f"{smk.name} has a run: block"


def test_every_rule_declares_a_benchmark_file():
    """So benchmarks/study_cost.py sees every job (one file per rule and job under results/<study>/benchmarks/<rule>/)."""
    import re

    missing = []
    for smk in sorted((ROOT / "workflow" / "rules").glob("*.smk")):
        for name, body in re.findall(r"^(?:rule|use rule \w+ as) (\w+)(?: with)?:\n((?:[ \t]+.*\n|\n)+)", smk.read_text(), re.M):
            if ("shell:" in body or "run:" in body or "output:" in body) and "benchmark:" not in body:
                missing.append(f"{smk.name}: {name}")
            elif "benchmark:" in body and f'benchmarks/{name}/' not in body.replace("{BENCH}/", "benchmarks/"):
                missing.append(f"{smk.name}: {name} (benchmark not under benchmarks/{name}/)")
            elif "log:" in body and f'{{LOGS}}/{name}/' not in body:
                missing.append(f"{smk.name}: {name} (log not under logs/<study>/{name}/, where study_cost reads it)")
    assert not missing, missing


def test_study_cost_script_prints_the_table(tmp_path):
    res = _study(tmp_path)
    out = tmp_path / "cost.json"
    r = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "study_cost.py"), str(res), "--no-startup",
                        "--json", str(out)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines()[0].split()[:4] == ["rule", "jobs", "CPU-s", "wall-s"]
    assert [row["rule"] for row in json.loads(out.read_text())["rules"]] == ["train", "evaluate", "collect"]
    r = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "study_cost.py"), str(tmp_path / "nope")],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and r.stderr.startswith("error:") and "Traceback" not in r.stderr


def test_estimate_beside_measured_cost(tmp_path):
    from timestep_lab.cost.measured import estimate_vs_measured

    est = {"rules": [{"rule": "train", "jobs": 2, "gpu_hours": 0.01, "basis": "measured"},
                     {"rule": "report", "jobs": 8, "gpu_hours": None, "basis": ""}],
           "total": {"jobs": 10, "gpu_hours": 0.01}}
    rows = {r["rule"]: r for r in estimate_vs_measured(est, study_cost(_study(tmp_path)))}
    assert list(rows) == ["train", "report", "evaluate", "collect", "total"]
    assert (rows["train"]["est_jobs"], rows["train"]["jobs"], rows["train"]["cpu_s"]) == (2, 2, 21.0)
    assert rows["report"]["jobs"] is None and rows["evaluate"]["est_jobs"] is None
    assert (rows["total"]["est_jobs"], rows["total"]["jobs"], rows["total"]["cpu_s"]) == (10, 4, 25.0)
    assert rows["train"]["ratio"] is None  # a GPU estimate (no device: not "cpu") against a study with no GPU rule
    cpu = {r["rule"]: r for r in estimate_vs_measured({**est, "device": "cpu"}, study_cost(_study(tmp_path)))}
    assert cpu["train"]["ratio"] == pytest.approx(0.01 * 3600 / 21.0) and cpu["total"]["ratio"] == pytest.approx(36 / 25)
    gpu = {**est, "device": "h100", "rules": [{**est["rules"][0], "gpu": True}, est["rules"][1]],
           "budget": {"devices_per_job": 2}}
    rows = {r["rule"]: r for r in estimate_vs_measured(gpu, study_cost(_study(tmp_path)))}
    assert rows["train"]["ratio"] == pytest.approx(36 / (22.0 * 2))  # the GPU-seconds two-GPU jobs held


def test_index_shows_the_estimate_beside_the_measured_cost(tmp_path):
    from timestep_lab.reporting import render_index

    res = _study(tmp_path)
    (res / "summary.json").write_text(json.dumps({"runs": 2, "failed_runs": []}))
    est = res / "estimate.json"
    est.write_text(json.dumps({"device": "cpu", "device_name": "CPU core", "calibration": "calibrated on this machine (x)",
                               "rules": [{"rule": "train", "jobs": 2, "gpu_hours": 0.0061, "gpu_hours_low": 0.005,
                                          "gpu_hours_high": 0.007, "basis": "measured"}],
                               "total": {"jobs": 2, "gpu_hours": 0.0061}}))
    html = render_index(ROOT / "reports" / "index.html.j2", tmp_path / "index.html", study="toy",
                        summary=res / "summary.json", reports=[], config_source="config/toy.yaml",
                        estimate=est, results_dir=res).read_text()
    table = html.split('<table class="cost">', 1)[1].split("</table>", 1)[0]
    import re

    rows = [[re.sub(r"<[^>]+>", "", c).strip() for c in re.findall(r"<td[^>]*>(.*?)</td>", r, re.S)]
            for r in re.findall(r"<tr[^>]*>(.*?)</tr>", table, re.S)[1:]]
    # 0.0061 CPU-h = 21.96 CPU-s estimated against 21.0 measured
    assert rows[0] == ["train", "2", "22", "18-25.2", "measured", "2", "21.0", "22.0", "320", "1.05"]
    assert rows[-1][:1] == ["total"] and rows[-1][5:7] == ["4", "25.0"] and rows[-1][-1] == "0.88"
    assert "CPU-s (est.)" in html and "CPU core" in html and "calibrated on this machine (x)" in html


def test_snakemake_samples_a_benchmarked_job_only_at_its_start(tmp_path):
    """workflow/rules/benchmark.smk: Snakemake's psutil sampling of a job every 0.5 s (~0.5 CPU-s
    per job in the snakemake process) is off. A job that takes 300 MB after its start and lives
    3 s is sampled at start only (peak RSS in the file far below 300 MB); the wall time stays exact."""
    import os
    import shutil

    (tmp_path / "Snakefile").write_text(
        f'include: "{ROOT / "workflow" / "rules" / "benchmark.smk"}"\n\n'
        "rule a:\n"
        '    output: "out.txt"\n'
        '    benchmark: "bench.tsv"\n'
        "    shell: \"python -c 'import time; time.sleep(0.7); x = bytearray(300 << 20); time.sleep(2.5)'; touch {output}\"\n")
    exe = Path(sys.executable).parent / "snakemake"
    r = subprocess.run([str(exe) if exe.exists() else shutil.which("snakemake"), "--cores", "1", "-q"], cwd=tmp_path,
                       capture_output=True, text=True, timeout=300,
                       env={**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"})
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    header, row = (tmp_path / "bench.tsv").read_text().splitlines()[:2]
    record = dict(zip(header.split("\t"), row.split("\t")))
    assert float(record["s"]) >= 3.0  # wall time: exact whatever the sampling
    assert record["max_rss"] == "NA" or float(record["max_rss"]) < 200, record  # never sampled after the 300 MB


def test_a_successful_command_skips_the_teardown_and_its_usage_line_is_the_whole_cost(tmp_path):
    """After its usage line a command leaves without the interpreter's ~1 CPU-s teardown, so the
    line is (nearly) all the job cost: the process's CPU as its parent sees it exceeds it by little."""
    from worktree import children_cpu_s

    from timestep_lab.cost.usage import USAGE_LINE

    before = children_cpu_s()
    r = subprocess.run([sys.executable, "-m", "timestep_lab", "estimate", str(ROOT / "config" / "smoke.yaml"),
                        "--gpu", "cpu", "--json", "--snakefile", str(ROOT / "Snakefile")],
                       capture_output=True, text=True, timeout=300, cwd=tmp_path)
    seen = children_cpu_s() - before
    assert r.returncode == 0, r.stderr[-2000:]
    json.loads(r.stdout)  # stdout flushed whole before the fast exit
    reported = float(USAGE_LINE.search(r.stderr).group(1))
    assert reported <= seen + 0.05
    assert seen - reported < 0.4, (seen, reported)  # with the teardown: ~1 CPU-s more


def test_the_fast_exit_waits_for_a_running_thread(tmp_path):
    """exit_now falls back to a normal exit while another non-daemon thread still works."""
    out = tmp_path / "written.txt"
    code = ("import threading, time\n"
            "from timestep_lab.cost.usage import exit_now\n"
            f"t = threading.Thread(target=lambda: (time.sleep(1.0), open({str(out)!r}, 'w').write('done')))\n"
            "t.start()\n"
            "exit_now(0)\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert out.read_text() == "done"
