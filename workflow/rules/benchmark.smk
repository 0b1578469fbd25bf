# How often Snakemake samples a benchmarked job (included first by the Snakefile).
# Snakemake samples a benchmarked job's process tree with psutil every 0.5 s for its first 30
# samples (memory_full_info reads /proc/PID/smaps of a torch process: ~20 ms each), in the
# snakemake process itself. Our jobs are short, so that polling cost ~0.5 CPU-s per job, 1.3 on
# a loaded machine (benchmarks/RESULTS.md, "Study cost"): more than some jobs' own work. Sample
# every 30 s from the start instead. The files keep the exact wall time `s`; CPU and peak RSS
# come exactly from each job's usage line (timestep_lab.cost.usage), which study_cost.py prefers.
# tests/test_cost.py runs a benchmarked job under this file and fails if the polling comes back
# (e.g. a Snakemake upgrade that renames the constant).
import snakemake.benchmark as _snakemake_benchmark

_snakemake_benchmark.BENCHMARK_INTERVAL_SHORT = _snakemake_benchmark.BENCHMARK_INTERVAL
