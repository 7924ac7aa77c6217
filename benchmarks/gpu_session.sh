#!/usr/bin/env bash
# Everything that needs a GPU, in the order a GPU session should run it (each step's log goes
# to $OUT, default ./gpu_out).
# Usage: bash benchmarks/gpu_session.sh [tests|cli|wmt|kernels|step|profile|ncu|wgmma|multi30k|lesson|goals|all]
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
# run NAME LIMIT_SECONDS COMMAND...: the step's exit status is printed, 124 when it was stopped
run() { local name=$1 limit=$2; shift 2; echo "== $name (limit ${limit}s, 0: none)"; timeout -k 10 "$limit" "$@"; echo "rc=$?"; }

if [[ $what == tests || $what == all ]]; then
  run "GPU tests" "${LIMIT_TESTS:-0}" $py -m pytest -q -rfE -m gpu -p no:cacheprovider ${WORKERS:+-n $WORKERS} ${TESTS_K:+-k "$TESTS_K"} tests \
      > "$OUT/gpu_tests.log" 2>&1
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
  run "wmt14-base trainer vs base step, TF32" "${LIMIT_WMT:-0}" $py benchmarks/wmt_update.py --device cuda --precision tf32 \
      --data-dir "$data" --out "$OUT/wmt_update.json" > "$OUT/wmt_update.log" 2>&1
  tail -3 "$OUT/wmt_update.log"
fi
if [[ $what == goals ]]; then
  KERNELS_ONLY=${KERNELS_ONLY:-attention,cross_entropy,fused,products}
fi
if [[ $what == kernels || $what == goals || $what == all ]]; then
  run "kernels vs PyTorch" "${LIMIT_KERNELS:-0}" $py benchmarks/kernels.py ${KERNELS_ONLY:+--only $KERNELS_ONLY} \
      --out "$OUT/kernels.json" > "$OUT/kernels.log" 2>&1
  tail -5 "$OUT/kernels.log"
fi
if [[ $what == step || $what == goals || $what == all ]]; then
  (cd benchmarks && run "base step vs PyTorch" "${LIMIT_STEP:-0}" $py base_step_vs_torch.py --device cuda --batch 400 \
      --length 64 --steps 12 --warmup 5 --precisions fp32,tf32,fp16,bf16 --out "$OUT/base_step.json" > "$OUT/base_step.log" 2>&1)
  tail -5 "$OUT/base_step.log"
fi
if [[ $what == goals ]]; then
  (cd benchmarks && run "projections' products and bias, one by one" "${LIMIT_STEP:-0}" $py projection_products.py \
      --out "$OUT/projection_products.json" > "$OUT/projection_products.log" 2>&1)
  grep "(now)" "$OUT/projection_products.log" | head -8
  (cd benchmarks && MINITENSOR_ATTENTION=fused run "base step vs PyTorch, TF32, fused attention" "${LIMIT_STEP:-0}" $py \
      base_step_vs_torch.py --device cuda --batch 400 --length 64 --steps 10 --warmup 3 --precisions tf32 \
      --out "$OUT/base_step_tf32_fused.json" > "$OUT/base_step_tf32_fused.log" 2>&1)
  tail -3 "$OUT/base_step_tf32_fused.log"
fi
if [[ $what == profile || $what == all ]]; then
  (cd benchmarks && run "step profile per precision" "${LIMIT_PROFILE:-0}" $py precision_profile.py --device cuda \
      --out "$OUT/precision_profile.json" > "$OUT/precision_profile.log" 2>&1)
  grep -A12 "^==" "$OUT/precision_profile.log" | head -45
fi
if [[ $what == ncu ]]; then
  ncu_bin=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda/bin/ncu 2>/dev/null | head -1)
  run "ncu: tensor-core attention" "${LIMIT_NCU:-0}" "$ncu_bin" --clock-control none --set full \
      -k regex:flash_attention_tc $py benchmarks/kernel_calls.py attention --length "${NCU_LENGTH:-4096}" \
      > "$OUT/ncu_attention.log" 2>&1
  grep -E "flash_attention_tc|Duration|Compute \(SM\) Throughput|Registers Per|Achieved Occupancy" \
      "$OUT/ncu_attention.log" | head -24
  run "ncu: cross-entropy" "${LIMIT_NCU:-0}" "$ncu_bin" --clock-control none --set full -k regex:cross_entropy \
      $py benchmarks/kernel_calls.py cross_entropy > "$OUT/ncu_cross_entropy.log" 2>&1
  grep -E "cross_entropy_|Duration|DRAM Throughput|Memory Throughput" "$OUT/ncu_cross_entropy.log" | head -12
fi
if [[ $what == wgmma ]]; then
  # the decisive timings first (kernels.py, then the tile settings), the profiles last
  run "GPU tests: wgmma and the tensor-core attention" "${LIMIT_TESTS:-0}" $py -m pytest -q -rfE -m gpu \
      -p no:cacheprovider ${WORKERS:+-n $WORKERS} -k "${TESTS_K:-wgmma or warpgroup or tensor_core or one_pass or turns}" \
      tests/minitensor/cuda/test_kernels.py > "$OUT/wgmma_tests.log" 2>&1
  tail -12 "$OUT/wgmma_tests.log"
  run "kernels: attention in bf16 and fp16, mma.sync and wgmma, two passes and one" "${LIMIT_KERNELS:-0}" \
      $py benchmarks/kernels.py --only attention --attention-dtypes bfloat16,float16 \
      --out "$OUT/kernels_wgmma.json" > "$OUT/kernels_wgmma.log" 2>&1
  tail -5 "$OUT/kernels_wgmma.log"
  (cd benchmarks && run "attention tiles: mma.sync and wgmma, two passes and one" "${LIMIT_TILES:-0}" \
      $py attention_tiles.py --out "$OUT/attention_tiles.json" > "$OUT/attention_tiles.log" 2>&1)
  tail -4 "$OUT/attention_tiles.log"
  ncu_bin=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda/bin/ncu 2>/dev/null | head -1)
  run "ncu: the wgmma attention kernels" "${LIMIT_NCU:-0}" "$ncu_bin" --clock-control none --set full \
      -k regex:flash_attention_tc $py benchmarks/kernel_calls.py attention --wgmma --length "${NCU_LENGTH:-4096}" \
      > "$OUT/ncu_wgmma.log" 2>&1
  grep -E "flash_attention_tc|Duration|Compute \(SM\) Throughput|Registers Per|Achieved Occupancy" \
      "$OUT/ncu_wgmma.log" | head -24
  run "ncu: the one-pass backward on wgmma" "${LIMIT_NCU:-0}" "$ncu_bin" --clock-control none --set full \
      -k "regex:flash_attention_tc_(delta|backward)" $py benchmarks/kernel_calls.py attention --wgmma --one-pass \
      --length "${NCU_LENGTH:-4096}" > "$OUT/ncu_one_pass.log" 2>&1
  grep -E "flash_attention_tc|Duration|Compute \(SM\) Throughput|Registers Per|Achieved Occupancy" \
      "$OUT/ncu_one_pass.log" | head -16
fi
if [[ $what == multi30k || $what == all ]]; then
  run "multi30k-gpu" "${LIMIT_TRAIN:-0}" $py -m transformer train --preset multi30k-gpu --device cuda \
      --run-dir "$OUT/multi30k-gpu" --data-dir "$data" --no-progress ${MINUTES:+--max-minutes $MINUTES} ${TRAIN_ARGS:-} \
      > "$OUT/multi30k_train.log" 2>&1
  run "multi30k-gpu evaluate" "${LIMIT_EVAL:-0}" $py -m transformer evaluate --run-dir "$OUT/multi30k-gpu" --device cuda \
      --data-dir "$data" > "$OUT/multi30k_eval.log" 2>&1
  tail -5 "$OUT/multi30k_eval.log"
fi
if [[ $what == lesson || $what == all ]]; then
  (cd lessons && LESSON_OUT="$OUT/lessons" run "lesson 23" "${LIMIT_LESSON:-0}" $py 23_gpu_backend.py > "$OUT/lesson23.log" 2>&1)
  tail -12 "$OUT/lesson23.log"
fi
