#!/usr/bin/env bash
# Everything that needs a GPU, in the order a GPU session should run it (each step's log goes
# to $OUT, default ./gpu_out).
# Usage: bash benchmarks/gpu_session.sh [first|tests|cli|wmt|kernels|step|profile|ncu|wgmma|multi30k|lesson|goals|all]
#
# Every step proves before the next one times: a step that fails (a test, a route whose output
# differs from the two-pass kernels', a limit reached) ends the session with exit status 1 and the
# tail of its log, and nothing after it runs. benchmarks/kernels.py checks each attention route's
# output and gradients against the two-pass mma.sync kernels at the size it times, before timing it.
#
# `first` is the run for a GPU session of 10 minutes (about 6 minutes of steps, each with its own
# limit, so that a slow compile cannot eat the rest): the wgmma descriptor, turn-taking and
# graph-replay tests (the last read Multi30k from MULTI30K_DIR, and skip without it), the wgmma
# and one-pass backward reference tests, attention in bf16 at 1024 and 4096 keys beside PyTorch's
# SDPA, then the bf16 base step replayed from a CUDA graph (--cuda-graphs) against PyTorch, in a
# process of its own.
#
# `goals` measures what the speed goals are about, and nothing else: `train --preset wmt14-base`'s
# update against the base step at the same tokens (TF32, on a synthetic WMT-shaped corpus), the kernels' sections for
# attention, the cross-entropy, the fused elementwise kernels and the products, then the base
# step in the four precisions, PyTorch beside each, the projections' products and bias one by one,
# and the TF32 step once more with attention on the fused path, auto's alternative (about 4
# minutes on an H100, measured in parts).
#
# `ncu` profiles the tensor-core attention kernels (bf16, T 4096) and the cross-entropy's two with Nsight
# Compute, every section, into ncu_attention.log and ncu_cross_entropy.log (not part of `all`).
#
# `wgmma` is for a compute capability 9.0 GPU (H100, H200): the GPU tests of the warpgroup products,
# of the tensor-core attention (mma.sync and wgmma) and of its one-pass backward, then kernels.py's
# attention section in bf16 and fp16 (the flash kernels on mma.sync and on wgmma, each with the
# backward in two passes and in one, PyTorch's SDPA and each of its backends), then attention_tiles.py
# (mma.sync and wgmma, two passes or one, tile settings side by side at 512-4096 keys), then Nsight
# Compute over the wgmma kernels (two passes, then the one-pass backward's kernels) (not part of
# `all`; not yet timed on a GPU: give each step a LIMIT_*, and WORKERS to compile in parallel).
#
# Settings (environment), for a session shorter than the whole run:
#   DATA          the Multi30k folder (default ../shared/data/multi30k; where only the checkout is copied to
#                 the GPU machine, copy the files into the git-ignored data/multi30k and set DATA=data/multi30k
#                 and MULTI30K_DIR=$PWD/data/multi30k: the wmt step and the tests read them)
#   MINUTES       multi30k-gpu's training budget in minutes (default: the preset's)
#   WORKERS       pytest-xdist workers for the GPU tests (default: none, one process)
#   TESTS_K       a pytest -k expression choosing among the GPU tests (default: all of them)
#   KERNELS_ONLY  the sections of benchmarks/kernels.py to run, e.g. "products,cross_entropy" (default: all)
#   TRAIN_ARGS    further `train` flags for multi30k-gpu, e.g. "--tf32 true" or "--precision bf16"
#   NCU_LENGTH    the sequence length of the attention that `ncu` profiles (default 4096)
#   LIMIT_<STEP>  seconds after which that step is stopped (TESTS, CLI, WMT, KERNELS, STEP, PROFILE, NCU, TRAIN,
#                 EVAL, LESSON, TILES; default: no limit), so that a session with a fixed budget still
#                 gets to its later steps
set -u
OUT=${OUT:-gpu_out}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
what=${1:-all}
export PYTHONPATH="$(pwd)${PYTHONPATH:+:$PYTHONPATH}"   # the checkout's packages, installed or not
py=${PYTHON:-python}
data=${DATA:-../shared/data/multi30k}
# run NAME LIMIT_SECONDS COMMAND...: the step's exit status is printed (124 when it was stopped) and returned
run() {
  local name=$1 limit=$2; shift 2
  echo "== $name (limit ${limit}s, 0: none)"
  timeout -k 10 "$limit" "$@"
  local rc=$?
  echo "rc=$rc"
  return $rc
}
# stop NAME RC [LOG]: say which step failed (and the end of its log), then end the session
stop() {
  echo "stopping: '$1' failed (rc=$2); the steps after it were not run" >&2
  [[ -n ${3:-} && -f ${3:-} ]] && tail -25 "$3" >&2
  exit 1
}
# step NAME LIMIT LOG COMMAND...: run, the output in LOG; a step that fails ends the session (stop):
# what comes after it is not timed on a GPU that erred
step() { local name=$1 limit=$2 log=$3; shift 3; ( run "$name" "$limit" "$@" ) > "$log" 2>&1 || stop "$name" "$?" "$log"; }

if [[ $what == first ]]; then
  step "GPU tests: wgmma descriptors and layouts, blocks taking turns, updates replayed from graphs" "${LIMIT_TESTS:-90}" "$OUT/first_tests.log" \
      $py -m pytest -q -rfE -m gpu -p no:cacheprovider \
      -k "warpgroups_wgmma or wgmma_result or take_turns or turn_that_never or follow_updates_without_graphs" \
      tests/minitensor/cuda/test_kernels.py tests/transformer/test_graphed.py
  tail -3 "$OUT/first_tests.log"
  step "GPU tests: wgmma and one-pass backward against the reference" "${LIMIT_TESTS:-100}" "$OUT/first_references.log" \
      $py -m pytest -q -rfE -m gpu -p no:cacheprovider \
      -k "wgmma_flash_attention_matches or one_pass_backward_matches" tests/minitensor/cuda/test_kernels.py
  tail -3 "$OUT/first_references.log"
  step "attention in bf16 at 1024 and 4096 keys, beside SDPA" "${LIMIT_KERNELS:-80}" "$OUT/first_attention.log" \
      $py benchmarks/kernels.py --only attention --attention-dtypes bfloat16 --lengths 1024,4096 \
      --out "$OUT/kernels_first.json"
  tail -4 "$OUT/first_attention.log"
  step "the bf16 base step, replayed from a CUDA graph, against PyTorch" "${LIMIT_STEP:-80}" "$OUT/first_step.log" \
      env -C benchmarks $py base_step_vs_torch.py --device cuda --batch 400 --length 64 --steps 12 --warmup 5 \
      --precisions bf16 --cuda-graphs --out "$OUT/base_step_first.json"
  tail -4 "$OUT/first_step.log"
fi
if [[ $what == tests || $what == all ]]; then
  step "GPU tests" "${LIMIT_TESTS:-0}" "$OUT/gpu_tests.log" \
      $py -m pytest -q -rfE -m gpu -p no:cacheprovider ${WORKERS:+-n $WORKERS} ${TESTS_K:+-k "$TESTS_K"} tests \
  tail -30 "$OUT/gpu_tests.log"
fi
if [[ $what == cli || $what == all ]]; then
  # the command line on the GPU as a user meets it: a run stopped by SIGTERM mid-update, resumed,
  # then translate, average and evaluate on cuda (each step's status and last lines in the log)
  cli_run() { echo "\$ $*"; timeout -k 10 "${LIMIT_CLI:-600}" $py -m transformer "$@"; echo "rc=$?"; }
  small=(--data-dir "$data" --limit 2000 --vocab-size 500 --d-model 64 --n-heads 4 --d-ff 128 --layers 2
         --max-tokens 2000 --warmup 50 --eval-every 1000 --bleu-sentences 0 --no-progress --device cuda)
  run_dir=$(mktemp -d)/run  # not under $OUT: its checkpoints need not travel back
  {
    $py -m transformer train --run-dir "$run_dir" "${small[@]}" --max-steps 100000 --save-every 20 & pid=$!
    for _ in $(seq 3000); do [[ -s "$run_dir/checkpoint_20.npz" ]] && break; sleep 0.2; done
    kill -TERM $pid; wait $pid; echo "train stopped by SIGTERM: rc=$? (130 expected)"
    cli_run train --run-dir "$run_dir" "${small[@]}" --resume --max-steps 80 --save-every 20
    cli_run train --run-dir "$run_dir" "${small[@]}" --resume --src-lang de --tgt-lang en  # refused: rc 2
    echo "A dog runs in the park." | cli_run translate --run-dir "$run_dir" --device cuda --beam 4
    cli_run average --run-dir "$run_dir" --last 3
    cli_run evaluate --run-dir "$run_dir" --device cuda --data-dir "$data" --limit 100 --average 3
  } > "$OUT/cli.log" 2>&1
  grep -E "^\\$|rc=|error:|stopped|BLEU" "$OUT/cli.log"
fi
if [[ $what == wmt || $what == goals || $what == all ]]; then
  step "wmt14-base trainer vs base step, TF32" "${LIMIT_WMT:-0}" "$OUT/wmt_update.log" \
      $py benchmarks/wmt_update.py --device cuda --precision tf32 \
      --data-dir "$data" --out "$OUT/wmt_update.json"
  tail -3 "$OUT/wmt_update.log"
fi
if [[ $what == goals ]]; then
  KERNELS_ONLY=${KERNELS_ONLY:-attention,cross_entropy,fused,products}
fi
if [[ $what == kernels || $what == goals || $what == all ]]; then
  step "kernels vs PyTorch" "${LIMIT_KERNELS:-0}" "$OUT/kernels.log" \
      $py benchmarks/kernels.py ${KERNELS_ONLY:+--only $KERNELS_ONLY} \
      --out "$OUT/kernels.json"
  tail -5 "$OUT/kernels.log"
fi
if [[ $what == step || $what == goals || $what == all ]]; then
  step "base step vs PyTorch" "${LIMIT_STEP:-0}" "$OUT/base_step.log" \
      env -C benchmarks $py base_step_vs_torch.py --device cuda --batch 400 \
      --length 64 --steps 12 --warmup 5 --precisions fp32,tf32,fp16,bf16 --out "$OUT/base_step.json"
  tail -5 "$OUT/base_step.log"
fi
if [[ $what == goals ]]; then
  step "projections' products and bias, one by one" "${LIMIT_STEP:-0}" "$OUT/projection_products.log" \
      env -C benchmarks $py projection_products.py \
      --out "$OUT/projection_products.json"
  grep "(now)" "$OUT/projection_products.log" | head -8
  step "base step vs PyTorch, TF32, fused attention" "${LIMIT_STEP:-0}" "$OUT/base_step_tf32_fused.log" \
      env -C benchmarks MINITENSOR_ATTENTION=fused $py \
      base_step_vs_torch.py --device cuda --batch 400 --length 64 --steps 10 --warmup 3 --precisions tf32 \
      --out "$OUT/base_step_tf32_fused.json"
  tail -3 "$OUT/base_step_tf32_fused.log"
fi
if [[ $what == profile || $what == all ]]; then
  step "step profile per precision" "${LIMIT_PROFILE:-0}" "$OUT/precision_profile.log" \
      env -C benchmarks $py precision_profile.py --device cuda \
      --out "$OUT/precision_profile.json"
  grep -A12 "^==" "$OUT/precision_profile.log" | head -45
fi
if [[ $what == ncu ]]; then
  ncu_bin=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda/bin/ncu 2>/dev/null | head -1)
  step "ncu: tensor-core attention" "${LIMIT_NCU:-0}" "$OUT/ncu_attention.log" \
      "$ncu_bin" --clock-control none --set full \
      -k regex:flash_attention_tc $py benchmarks/kernel_calls.py attention --length "${NCU_LENGTH:-4096}" \
  grep -E "flash_attention_tc|Duration|Compute \(SM\) Throughput|Registers Per|Achieved Occupancy" \
      "$OUT/ncu_attention.log" | head -24
  step "ncu: cross-entropy" "${LIMIT_NCU:-0}" "$OUT/ncu_cross_entropy.log" \
      "$ncu_bin" --clock-control none --set full -k regex:cross_entropy \
      $py benchmarks/kernel_calls.py cross_entropy
  grep -E "cross_entropy_|Duration|DRAM Throughput|Memory Throughput" "$OUT/ncu_cross_entropy.log" | head -12
fi
if [[ $what == wgmma ]]; then
  # the decisive timings first (kernels.py, then the tile settings), the profiles last
  step "GPU tests: wgmma and the tensor-core attention" "${LIMIT_TESTS:-0}" "$OUT/wgmma_tests.log" \
      $py -m pytest -q -rfE -m gpu \
      -p no:cacheprovider ${WORKERS:+-n $WORKERS} -k "${TESTS_K:-wgmma or warpgroup or tensor_core or one_pass or turns}" \
      tests/minitensor/cuda/test_kernels.py
  tail -12 "$OUT/wgmma_tests.log"
  step "kernels: attention in bf16 and fp16, mma.sync and wgmma, two passes and one" "${LIMIT_KERNELS:-0}" "$OUT/kernels_wgmma.log" \
      \
      $py benchmarks/kernels.py --only attention --attention-dtypes bfloat16,float16 \
      --out "$OUT/kernels_wgmma.json"
  tail -5 "$OUT/kernels_wgmma.log"
  step "attention tiles: mma.sync and wgmma, two passes and one" "${LIMIT_TILES:-0}" "$OUT/attention_tiles.log" \
      env -C benchmarks \
      $py attention_tiles.py --out "$OUT/attention_tiles.json"
  tail -4 "$OUT/attention_tiles.log"
  ncu_bin=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda/bin/ncu 2>/dev/null | head -1)
  step "ncu: the wgmma attention kernels" "${LIMIT_NCU:-0}" "$OUT/ncu_wgmma.log" \
      "$ncu_bin" --clock-control none --set full \
      -k regex:flash_attention_tc $py benchmarks/kernel_calls.py attention --wgmma --length "${NCU_LENGTH:-4096}" \
  grep -E "flash_attention_tc|Duration|Compute \(SM\) Throughput|Registers Per|Achieved Occupancy" \
      "$OUT/ncu_wgmma.log" | head -24
  step "ncu: the one-pass backward on wgmma" "${LIMIT_NCU:-0}" "$OUT/ncu_one_pass.log" \
      "$ncu_bin" --clock-control none --set full \
      -k "regex:flash_attention_tc_(delta|backward)" $py benchmarks/kernel_calls.py attention --wgmma --one-pass \
      --length "${NCU_LENGTH:-4096}"
  grep -E "flash_attention_tc|Duration|Compute \(SM\) Throughput|Registers Per|Achieved Occupancy" \
      "$OUT/ncu_one_pass.log" | head -16
fi
if [[ $what == multi30k || $what == all ]]; then
  step "multi30k-gpu" "${LIMIT_TRAIN:-0}" "$OUT/multi30k_train.log" \
      $py -m transformer train --preset multi30k-gpu --device cuda \
      --run-dir "$OUT/multi30k-gpu" --data-dir "$data" --no-progress ${MINUTES:+--max-minutes $MINUTES} ${TRAIN_ARGS:-} \
  step "multi30k-gpu evaluate" "${LIMIT_EVAL:-0}" "$OUT/multi30k_eval.log" \
      $py -m transformer evaluate --run-dir "$OUT/multi30k-gpu" --device cuda \
      --data-dir "$data"
  tail -5 "$OUT/multi30k_eval.log"
fi
if [[ $what == lesson || $what == all ]]; then
  step "lesson 23" "${LIMIT_LESSON:-0}" "$OUT/lesson23.log" \
      env -C lessons LESSON_OUT="$OUT/lessons" $py 23_gpu_backend.py
  tail -12 "$OUT/lesson23.log"
fi
