#!/usr/bin/env bash
# Everything that needs a GPU, in the order a GPU session should run it (each step's log goes
# to $OUT, default ./gpu_out). Usage: bash benchmarks/gpu_session.sh [tests|kernels|step|multi30k|lesson|all]
set -u
OUT=${OUT:-gpu_out}
mkdir -p "$OUT"
what=${1:-all}
py=${PYTHON:-python}
run() { echo "== $1"; shift; "$@"; echo "rc=$?"; }

if [[ $what == tests || $what == all ]]; then
  run "GPU tests" $py -m pytest -q -m gpu -p no:cacheprovider tests 2>&1 | tee "$OUT/gpu_tests.log" | tail -30
fi
if [[ $what == kernels || $what == all ]]; then
  run "kernels vs PyTorch" $py benchmarks/kernels.py --out "$OUT/kernels.json" > "$OUT/kernels.log" 2>&1
  tail -5 "$OUT/kernels.log"
fi
if [[ $what == step || $what == all ]]; then
  (cd benchmarks && run "base step vs PyTorch" $py base_step_vs_torch.py --device cuda --batch 400 --length 64 \
      --steps 10 --warmup 3 --precisions fp32,tf32,fp16,bf16 --out "../$OUT/base_step.json" > "../$OUT/base_step.log" 2>&1)
  tail -5 "$OUT/base_step.log"
fi
if [[ $what == multi30k || $what == all ]]; then
  run "multi30k-gpu" $py -m transformer train --preset multi30k-gpu --device cuda --run-dir "$OUT/multi30k-gpu" \
      --data-dir ../shared/data/multi30k --no-progress > "$OUT/multi30k_train.log" 2>&1
  run "multi30k-gpu evaluate" $py -m transformer evaluate --run-dir "$OUT/multi30k-gpu" --device cuda \
      --data-dir ../shared/data/multi30k > "$OUT/multi30k_eval.log" 2>&1
  tail -5 "$OUT/multi30k_eval.log"
fi
if [[ $what == lesson || $what == all ]]; then
  (cd lessons && LESSON_OUT="../$OUT/lessons" run "lesson 23" $py 23_gpu_backend.py > "../$OUT/lesson23.log" 2>&1)
  tail -12 "$OUT/lesson23.log"
fi
