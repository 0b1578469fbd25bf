#!/usr/bin/env bash
# Every GPU measurement of issue 15 in ONE command, for a lent GPU machine (held <= 30 min):
#
#   bash benchmarks/gpu_suite.sh                 # on the GPU machine, from the repo root; ~15-20 min on an H100
#   bash benchmarks/gpu_suite.sh --dry-run       # on a CPU: tiny sizes, checks that every step starts
#   FAST=1 bash benchmarks/gpu_suite.sh          # one <= 10-minute device call: fewer rounds, tighter limits
#
# Writes to $OUT (default ./gpu-suite-out), at most 4 files so the device tool brings all back:
#   summary.md          a section for benchmarks/RESULTS.md (images/s, ratios, MFU, FID-50K time, smoke)
#   estimate_rows.txt   rows to paste into src/timestep_lab/cost/estimate/throughput.py MEASURED
#   suite.log           everything the steps printed
#   suite.tar.gz        each step's JSON and log
#
# Steps (each under its own time limit; a failing step is logged and the suite goes on):
#   1 train_variants.py  CIFAR-10 UNet step, batch 128: fp32 reference loop, ours fp32 / bf16 / bf16+channels_last
#                        / bf16+compile / bf16+compile+channels_last, diffusers UNet2DModel peer; MFU; top kernels
#   2 sampler_overhead.py  adaptive vs uniform step time in the real train() loop, CIFAR-10 UNet
#   3 sample_throughput.py  DDIM-50 and DDPM at batch 1000, bf16 (DDPM runs $DDPM_STEPS steps, default 250:
#                        a reverse step costs the same at any step count; DDPM_STEPS=1000 for the literal run)
#   4 fid50k_time.py     one FID-50K = DDPM-1000 sampling + 2 Inception feature passes (random weights: no network)
#   5 the smoke study end to end with resources.device: cuda (needs snakemake, torch-fidelity, clean-fid,
#                        papermill, jupytext, nbconvert on the machine: carry them as wheels in .whl/, see
#                        /work/.library/device/README.md; without them the step is skipped and says so)
# The GPU machine has no network: no CIFAR-10 and no Inception weights are needed by any step.
set -u
DRY=0
[ "${1:-}" = "--dry-run" ] && DRY=1
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
OUT=${OUT:-$ROOT/gpu-suite-out}
PY=${PYTHON:-python3}
WORK=$(mktemp -d "${TMPDIR:-/tmp}/gpu-suite.XXXXXX")
mkdir -p "$OUT"
LOG=$OUT/suite.log
: > "$LOG"
if [ -d .whl ] && ls .whl/*.whl > /dev/null 2>&1; then  # wheels carried to a machine without network
    $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
        >> "$LOG" 2>&1 && export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
    export JUPYTER_PATH=/tmp/site/share/jupyter  # nbconvert's templates: a --target install puts them there
fi
export PYTHONPATH=$ROOT/src${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
if ! command -v python > /dev/null 2>&1; then  # the workflow's shell commands call `python -m timestep_lab`
    mkdir -p "$WORK/bin" && ln -s "$(command -v "$PY")" "$WORK/bin/python" && export PATH=$WORK/bin:$PATH
fi

if [ $DRY = 1 ]; then
    DEV=cpu; MODEL=digits; Q=--quick; N=8; DDPM_STEPS=4; LIM=300
else
    DEV=cuda; MODEL=cifar10; Q=; N=1000; DDPM_STEPS=${DDPM_STEPS:-250}; LIM=540
fi
# per-step limits (s) and sizes; FAST=1 fits the whole suite in one 10-minute device call (a lease of
# 15 minutes of device time, start included): 3 rounds, one compiled DDPM variant, no NCHW compile
L_TRAIN=$LIM; L_OVER=$((LIM / 2)); L_DDIM=$((LIM / 2)); L_DDPM=$((LIM / 2)); L_FID=120; L_SMOKE=$LIM
TV_ARGS=(); SO_ARGS=()
if [ "${FAST:-0}" = 1 ] && [ $DRY = 0 ]; then
    # measured on an H200 (benchmarks/RESULTS.md): train_variants 167 s, sampler_overhead 63 s, DDIM-50 17 s,
    # DDPM-100 28 s, fid50k 9 s, the smoke study 84 s; the plain fp32 sampling loop takes ~0.15 s per call at
    # batch 1,000, hence batch 500
    L_TRAIN=210; L_OVER=90; L_DDIM=60; L_DDPM=60; L_FID=40; L_SMOKE=150
    TV_ARGS=(--rounds 3 --warmup 3 --variants reference-fp32 ours-fp32 ours-bf16 ours-bf16-cl ours-bf16-compile-cl
             flow-bf16-cl flow-bf16-compile-cl diffusers-fp32 diffusers-bf16)
    SO_ARGS=(--rounds 2 --steps 40)
    N=500; DDPM_STEPS=${DDPM_STEPS:-100}; DDIM_ROUNDS=1
fi

step() {  # step NAME LIMIT_S COMMAND...: run, log, record the exit status
    local name=$1 limit=$2
    shift 2
    echo "=== $name: $*" | tee -a "$LOG"
    local t0=$SECONDS
    timeout "$limit" "$@" > "$WORK/$name.log" 2>&1
    local rc=$?
    cat "$WORK/$name.log" >> "$LOG"
    echo "=== $name: exit $rc after $((SECONDS - t0)) s" | tee -a "$LOG"
    echo "$name $rc $((SECONDS - t0))" >> "$WORK/status.txt"
    tar -czf "$OUT/suite.tar.gz" -C "$WORK" --exclude=bin . 2>> "$LOG"  # what is done so far comes back even if cut
}

{ date; nvidia-smi 2>&1 | head -15; $PY -c "import torch; print('torch', torch.__version__, 'cuda', torch.cuda.is_available())"; } \
    >> "$LOG" 2>&1

step train_variants "$L_TRAIN" $PY benchmarks/train_variants.py --device $DEV --model $MODEL $Q "${TV_ARGS[@]}" \
    --json "$WORK/train_variants.json"
step sampler_overhead "$L_OVER" $PY benchmarks/sampler_overhead.py --device $DEV --model $MODEL $Q "${SO_ARGS[@]}" \
    --samplers uniform adaptive --json "$WORK/sampler_overhead.json"
step sample_ddim50 "$L_DDIM" $PY benchmarks/sample_throughput.py --device $DEV --model $MODEL $Q --n $N --steps 50 \
    --methods ddim --rounds "${DDIM_ROUNDS:-3}" --json "$WORK/sample_ddim50.json"
step sample_ddpm "$L_DDPM" $PY benchmarks/sample_throughput.py --device $DEV --model $MODEL $Q --n $N \
    --steps "$DDPM_STEPS" --methods ddpm --rounds 1 --json "$WORK/sample_ddpm.json"
step fid50k "$L_FID" $PY benchmarks/fid50k_time.py --device $DEV $Q --sample-json "$WORK/sample_ddpm.json" --steps 1000 \
    --json "$WORK/fid50k.json"

# 5: the smoke study on the GPU (the cluster profile's path, less SLURM)
if $PY -c "import snakemake, torch_fidelity, cleanfid, papermill, jupytext, nbconvert" >> "$LOG" 2>&1; then
    $PY - "$WORK/smoke-cuda.yaml" <<'EOF'
import sys, yaml
cfg = yaml.safe_load(open("config/smoke.yaml"))
cfg["study"] = "smoke-cuda"
cfg["resources"].update(device="cuda", gpus=1)
cfg["base"]["train"]["device"] = "cuda"
yaml.safe_dump(cfg, open(sys.argv[1], "w"), sort_keys=False)
EOF
    if [ $DRY = 1 ]; then
        step smoke 120 $PY -m snakemake -n --cores 2 --configfile "$WORK/smoke-cuda.yaml" --replace-workflow-config
    else
        step smoke "$L_SMOKE" $PY -m snakemake --cores 16 --configfile "$WORK/smoke-cuda.yaml" --replace-workflow-config
    fi
    n=$(ls reports/smoke-cuda/*.html 2>/dev/null | wc -l)
    grep -q "^smoke 0 " "$WORK/status.txt" && s="ok" || s="FAILED (see suite.log)"
    echo "$s; $n report HTML files in reports/smoke-cuda (index + 8 expected on a full run)" > "$WORK/smoke.txt"
else
    echo "skipped: snakemake/torch-fidelity/clean-fid/papermill/jupytext/nbconvert not importable (carry wheels)" \
        | tee "$WORK/smoke.txt" >> "$LOG"
fi

$PY benchmarks/gpu_summary.py "$WORK" --md "$OUT/summary.md" --rows "$OUT/estimate_rows.txt" >> "$LOG" 2>&1
cat "$WORK/status.txt" >> "$LOG"
tar -czf "$OUT/suite.tar.gz" -C "$WORK" . 2>> "$LOG"
cat "$OUT/summary.md"
echo "# status (step, exit, seconds):"; cat "$WORK/status.txt"
! grep -qv " 0 " "$WORK/status.txt"
