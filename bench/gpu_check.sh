#!/usr/bin/env bash
# GPU acceptance check: one command, no arguments, from anywhere in the repository, on a
# machine with one or more NVIDIA GPUs. Each check has its own deadline. On one H200 all 16
# passed in 412 s (2026-12-04, bench/results/gpu_check-h200-2026-12-04.log; BENCHMARKS.md).
#
#   bench/gpu_check.sh            # GPU_CHECK_DIR=DIR to choose where it writes (default runs/)
#   GPU_CHECK_BUDGET_S=450 bench/gpu_check.sh   # end within 450 s: later checks are cut short
#                                               # or skipped, and the summary still prints
#
# It profiles vit-digits, bert-synth and bert-base on CUDA (and in bf16 where `--precision`
# exists), previews bert-base on this node's GPUs, trains vit-digits over NCCL on up to two
# local GPUs, checks its first steps against a CPU run of the same seed, kills a rank
# mid-run and resumes, exports and reloads the model, trains bert-synth (bf16 where it can),
# runs the CUDA tests of tests/test_device.py, and prints per phase the measured against the
# predicted step time and each stage's peak memory against the plan's. Every command's output
# goes to DIR/gpu_check.log; the summary is printed and appended there. Exit 0 when every
# check passes, 1 with the failed checks named, 2 (one line) on a host without CUDA.
set -uo pipefail
set -m # each check runs in a process group of its own: a deadline stops all of it
cd "$(dirname "$0")/.."
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"

if ! python -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
    echo "pipeplan: error: bench/gpu_check.sh needs a CUDA device; torch sees none here" >&2
    exit 2
fi

OUT=${GPU_CHECK_DIR:-runs/gpu-check-$(date -u +%Y%m%d-%H%M%S)}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
LOG="$OUT/gpu_check.log"
RUNS="$OUT/runs"
GPUS=$(python -c 'import torch; print(torch.cuda.device_count())')
NPROC=$((GPUS >= 2 ? 2 : 1)) # ranks of the NCCL runs: two GPUs when there are two
PRECISIONS="fp32"
# bf16 too once both `profile` and `run` take --precision (a field of their requests).
if python -c 'import sys; from pipeplan.formats import RunConfig; from pipeplan.inputs import ProfileRequest; sys.exit(not all("precision" in m.model_fields for m in (RunConfig, ProfileRequest)))'; then
    PRECISIONS="fp32 bf16"
fi
PASSED=()
FAILED=()
STARTED=$SECONDS
# A lease of device time is short: with a budget, each check's deadline is cut to what is left
# (less 20 s for the summary), and a check with under 15 s left is skipped and named as such.
BUDGET=${GPU_CHECK_BUDGET_S:-0}

pipeplan() { python -c 'import sys, cli; sys.exit(cli.main())' "$@"; }

# The check running now (its process group): a TERM, INT or HUP to this script (an outer
# `timeout`) ends it too. Without this, a device session's `timeout 540 bench/gpu_check.sh |
# tee LOG` ended the script alone: the check, in a process group of its own, held the pipe
# open, and the session's whole command ran past its limit with nothing back (2026-12-04).
CURRENT=""
trap 'if [ -n "$CURRENT" ]; then kill -TERM -- "-$CURRENT" 2>/dev/null; sleep 2; kill -KILL -- "-$CURRENT" 2>/dev/null; fi; exit 143' TERM INT HUP

# within SECONDS COMMAND…: the command (a function too) in a background job; past the
# deadline its whole process group gets SIGTERM, then SIGKILL, and the status is 124.
within() {
    local limit=$1 tenths=0
    shift
    "$@" &
    local job=$!
    CURRENT=$job
    while kill -0 "$job" 2>/dev/null; do
        if [ "$tenths" -ge $((limit * 10)) ]; then
            kill -TERM -- "-$job" 2>/dev/null
            sleep 5
            kill -KILL -- "-$job" 2>/dev/null
            wait "$job"
            CURRENT=""
            return 124
        fi
        sleep 0.1
        tenths=$((tenths + 1))
    done
    CURRENT=""
    wait "$job"
}

# check NAME SECONDS COMMAND…: run it under a deadline, output to the log, verdict kept.
check() {
    local name=$1 limit=$2 start=$SECONDS code=0 why left
    shift 2
    if [ "$BUDGET" -gt 0 ]; then
        left=$((BUDGET - (SECONDS - STARTED) - 20))
        if [ "$left" -lt 15 ]; then
            FAILED+=("$name: skipped: GPU_CHECK_BUDGET_S=$BUDGET spent")
            echo "$name: skipped (budget spent)"
            return
        fi
        [ "$left" -lt "$limit" ] && limit=$left
    fi
    printf '\n== %s: %s\n' "$name" "$*" >>"$LOG"
    within "$limit" "$@" >>"$LOG" 2>&1 || code=$?
    if [ "$code" = 0 ]; then
        PASSED+=("$name ($((SECONDS - start)) s)")
    else
        why=$(grep -v '^[[:space:]]*$' "$LOG" | tail -n 1 | cut -c1-160)
        [ "$code" = 124 ] && why="over its ${limit} s deadline"
        FAILED+=("$name: exit $code: $why")
    fi
    echo "$name: $([ "$code" = 0 ] && echo ok || echo FAILED) in $((SECONDS - start)) s"
}

precision_flag() { [ "$1" = fp32 ] && [ "$PRECISIONS" = fp32 ] || echo "--precision $1"; }

{
    echo "pipeplan GPU check, $(date -u +%FT%TZ), $GPUS GPU(s): $(python -c 'import torch; print(torch.cuda.get_device_name(0))')"
    python -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, "nccl", torch.cuda.nccl.version())'
    echo "precisions: $PRECISIONS; NCCL runs on $NPROC rank(s); output in $OUT"
} | tee "$LOG" # a fresh log: the summary reads this run's sections alone

# 1. Profiles on CUDA: one layer at a time on the GPU; links over NCCL with two GPUs. The
# training runs need fp32's three and bert-synth's in the last precision; the other bf16
# profiles come last (9.), so that a short budget spends itself on training first.
LINKS=()
[ "$NPROC" -ge 2 ] && LINKS=(--nproc "$NPROC")
# shellcheck disable=SC2046
profile_vit() {
    check "profile vit-digits $1" 120 pipeplan profile vit-digits --device cuda \
        --micro-batch-sizes 1,2,4,8,16 "${LINKS[@]}" $(precision_flag "$1") \
        --out "$OUT/vit-digits@cuda-$1.json"
}
# shellcheck disable=SC2046
profile_bert_synth() {
    check "profile bert-synth $1" 120 pipeplan profile bert-synth --device cuda \
        --micro-batch-sizes 1,2,4,8 $(precision_flag "$1") \
        --out "$OUT/bert-synth@cuda-$1.json"
}
# shellcheck disable=SC2046
profile_bert_base() {
    check "profile bert-base $1" 180 pipeplan profile bert-base --device cuda \
        --micro-batch-sizes 1,2,4,8 --repeats 3 $(precision_flag "$1") \
        --out "$OUT/bert-base@cuda-$1.json"
}
profile_vit fp32
profile_bert_synth fp32
profile_bert_base fp32
[ "${PRECISIONS##* }" != fp32 ] && profile_bert_synth "${PRECISIONS##* }"

# 2. Preview bert-base on this node's GPUs, each with its whole memory.
check "preview bert-base" 120 pipeplan preview --profile "$OUT/bert-base@cuda-fp32.json" \
    --nodes 1 --devices-per-node "$GPUS" --global-batch 64 --samples 20000 --epochs 4

# 3. vit-digits over NCCL, fp32, no dropout (comparable with the CPU), a layout change at the
# second epoch and a checkpoint every 40 steps; the CPU run of the same seed for its first steps.
VIT=(--model vit-digits --data digits --global-batch 16 --epochs 4 --freeze 0,3
    --checkpoint-every 40 --dropout 0 --seed 0 --runs-dir "$RUNS")
FIRST=(--model vit-digits --data digits --global-batch 16 --epochs 1 --max-steps-per-epoch 3
    --dropout 0 --seed 0 --runs-dir "$RUNS")
check "train vit-digits fp32 on $NPROC GPU(s)" 180 pipeplan run --nproc "$NPROC" --device cuda \
    --profile "$OUT/vit-digits@cuda-fp32.json" --name vit-fp32 "${VIT[@]}"
check "first 3 steps on GPU" 120 pipeplan run --nproc "$NPROC" --device cuda \
    --profile "$OUT/vit-digits@cuda-fp32.json" --name first-gpu "${FIRST[@]}"
check "first 3 steps on CPU" 120 pipeplan run --nproc "$NPROC" --device cpu --name first-cpu \
    "${FIRST[@]}"
# AdamW moves a weight by up to lr (1e-3) a step whatever its gradient's size, so rounding
# differences (cuDNN's TF32 convolutions, another reduction order) can flip the direction of
# weights whose gradient is near zero: over 3 steps that stays below 1e-3 of the weights' norm.
check "GPU matches CPU after 3 steps" 60 python bench/gpu_check.py compare \
    "$RUNS/first-gpu/checkpoints/step-3/model.pt" "$RUNS/first-cpu/checkpoints/step-3/model.pt" \
    1e-3 "vit-digits, GPU vs CPU, 3 steps"

# 4. Kill a rank mid-run (after the checkpoint at step 40), resume, end near the uninterrupted
# run. Not bitwise: attention and convolution backward kernels on CUDA accumulate with atomics,
# so two uninterrupted GPU runs differ too; 1e-2 of the weights' norm after 300-odd steps.
kill_and_resume() {
    pipeplan run --nproc "$NPROC" --device cuda --profile "$OUT/vit-digits@cuda-fp32.json" \
        --name vit-killed "${VIT[@]}" &
    local launcher=$! steps=0 rank=$((NPROC - 1)) pid=""
    while kill -0 "$launcher" 2>/dev/null; do
        steps=$(grep -c '"kind": "step"' "$RUNS/vit-killed/run.jsonl" 2>/dev/null)
        [ "${steps:-0}" -ge 48 ] && break
        sleep 0.1
    done
    pid=$(sed -n 's/^--- rank '"$rank"', pid \([0-9]*\)$/\1/p' "$RUNS/vit-killed/logs/rank-$rank.log" | tail -n 1)
    if [ -z "$pid" ] || ! kill -9 "$pid" 2>/dev/null; then
        echo "the run ended before rank $rank could be killed (step ${steps:-0})"
        return 1
    fi
    echo "killed rank $rank (pid $pid) after step ${steps}"
    if wait "$launcher"; then
        echo "the launcher exited 0 though a rank was killed"
        return 1
    fi
    pipeplan run --resume "$RUNS/vit-killed" || return 1
    local last
    last=$(cat "$RUNS/vit-fp32/checkpoints/latest")
    python bench/gpu_check.py compare "$RUNS/vit-killed/checkpoints/$last/model.pt" \
        "$RUNS/vit-fp32/checkpoints/$last/model.pt" 1e-2 "killed and resumed vs uninterrupted"
}
check "kill a rank and resume" 240 kill_and_resume

# 5. Export the trained model and load it back as a user would.
export_and_reload() {
    pipeplan export "$RUNS/vit-fp32" --out "$OUT/vit-export" || return 1
    python bench/gpu_check.py reload "$OUT/vit-export" \
        "$RUNS/vit-fp32/checkpoints/$(cat "$RUNS/vit-fp32/checkpoints/latest")"
}
check "export and reload" 120 export_and_reload

# 6. bert-synth, in bf16 where the flag exists, on its own profile of that precision.
BERT_PRECISION=${PRECISIONS##* }
# shellcheck disable=SC2046
check "train bert-synth $BERT_PRECISION" 180 pipeplan run --nproc "$NPROC" --device cuda \
    --model bert-synth --epochs 2 --max-steps-per-epoch 20 --freeze 0,2 --seed 0 \
    --profile "$OUT/bert-synth@cuda-$BERT_PRECISION.json" $(precision_flag "$BERT_PRECISION") \
    --name "bert-$BERT_PRECISION" --runs-dir "$RUNS"

# 7. Measured against planned, per phase.
check "measured vs planned" 60 python bench/gpu_check.py summary "$RUNS/vit-fp32" \
    "$RUNS/bert-$BERT_PRECISION"

# 8. The CUDA tests (NCCL's device, stage placement, a model profiled layer by layer).
check "CUDA tests" 300 python -m pytest -q -p no:cacheprovider tests/test_device.py \
    -m "not multiprocess"

# 9. The other profiles of the other precisions.
for precision in $PRECISIONS; do
    [ "$precision" = fp32 ] && continue
    profile_vit "$precision"
    profile_bert_base "$precision"
done

{
    echo
    echo "== summary ($((SECONDS - STARTED)) s)"
    awk '/^== /{on = /^== measured vs planned/; next} on' "$LOG"
    for line in "${PASSED[@]}"; do echo "ok    $line"; done
    for line in "${FAILED[@]}"; do echo "FAIL  $line"; done
    echo "log: $LOG"
} | tee -a "$LOG.summary"
cat "$LOG.summary" >>"$LOG"
rm -f "$LOG.summary"
[ "${#FAILED[@]}" -eq 0 ]
