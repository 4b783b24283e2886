#!/usr/bin/env bash
# The one command for a one-GPU machine without network access (an H100 / H200 with 16 cores), about 7.5 minutes
# (under 9.5 at every timeout), each part under its own timeout (280 + 30 + 75 + 45 + 225 s, and the wheels'
# install), everything written to $OUT (8 files, the most that come back):
#   1. the layer sweep (benchmarks/gpu_modern_layers.py --budget-s 250, killed at 280 s): layers_measured.csv,
#      env.txt, layers.log; then the cost model against it (benchmarks/compare_modern_layers.py, killed at 30 s):
#      compare.txt; then an MoE layer's host time a kernel launch (benchmarks/gpu_moe_host.py --budget-s 50, killed
#      at 75 s): moe_host_measured.csv, its log appended to layers.log; then the fp8 GEMMs of the GPT-3 175B and
#      Llama 3 70B layers and the squares with and without fast accumulation, side by side (benchmarks/gpu_gemm_sweep.py
#      --fast-accum both, killed at 45 s): gemm_fp8_accum.csv, its log appended to layers.log;
#   2. the study's worker scaling on the machine's cores (benchmarks/bench_study_workers.sh 1e8 16,8,4, killed at
#      225 s: its in-process base and as many worker counts as fit): workers.log; it needs Ray, installed from .whl/
#      where present with torchao (that machine has neither and cannot download them; pip's words in
#      machine.txt), torchao making part 1's fp8 rows run through its Float8Linear (--fp8 torchao);
#   3. the machine: machine.txt (GPU, driver, torch, cores, load).
#
# Before, on a machine that can download (once; *.whl is git-ignored):
#     bash benchmarks/gpu_machine_wheels.sh            # Ray, what it needs, torchao for CPython 3.12 into .whl/ (49 MB)
# Then on the GPU machine, from the root of a copy of this working tree with the ignored .whl/ copied along, under
# a 570 s limit, with OUT the folder whose files come back:
#     bash benchmarks/run_on_gpu.sh
# and afterwards, back here: PYTHONPATH=. python3 benchmarks/compare_modern_layers.py <files>/layers_measured.csv
# and PYTHONPATH=. python3 benchmarks/fp8_gemm_ceiling.py --accum-sweep <files>/gemm_fp8_accum.csv
# Without a GPU (a dry run of part 1 on the CPU): OUT=/tmp/out bash benchmarks/run_on_gpu.sh --tiny
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:?set OUT to the folder that comes back}"
mkdir -p "$OUT"
TINY=()
LAYER_BUDGET=250
if [ "${1:-}" = "--tiny" ]; then TINY=(--tiny); fi
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"

{
    date -u
    nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm,temperature.gpu,power.draw \
        --format=csv 2>&1 || true
    python3 -c "import torch, sys; print('python', sys.version.split()[0], 'torch', torch.__version__,
                'cuda', torch.version.cuda, 'cudnn', torch.backends.cudnn.version())" 2>&1
    echo "cores $(nproc)"; uptime
} > "$OUT/machine.txt"

if ls .whl/*.whl >/dev/null 2>&1 && ! python3 -c "import ray, torchao" 2>/dev/null; then  # Ray, torchao
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir .whl/*.whl >> "$OUT/machine.txt" 2>&1
fi
FP8=(--fp8 scaled_mm)
if python3 -c "import torchao.float8" 2>/dev/null; then FP8=(--fp8 torchao); fi  # the fp8 rows as torchao runs them

echo "== 1. layer sweep (budget ${LAYER_BUDGET} s, ${FP8[*]})"
timeout 280 python3 benchmarks/gpu_modern_layers.py --out "$OUT" --budget-s "$LAYER_BUDGET" "${FP8[@]}" "${TINY[@]}" \
    > "$OUT/layers.log" 2>&1
echo "gpu_modern_layers exit $?" | tee -a "$OUT/layers.log"
tail -3 "$OUT/layers.log"
if [ -s "$OUT/layers_measured.csv" ]; then
    timeout 30 python3 benchmarks/compare_modern_layers.py "$OUT/layers_measured.csv" > "$OUT/compare.txt" 2>&1
    echo "compare_modern_layers exit $?" >> "$OUT/compare.txt"
    sed -n '/^block /,$p' "$OUT/compare.txt"
fi
echo "== 1b. MoE host time a kernel"
timeout 75 python3 benchmarks/gpu_moe_host.py --out "$OUT" --budget-s 50 "${TINY[@]}" >> "$OUT/layers.log" 2>&1
echo "gpu_moe_host exit $?" | tee -a "$OUT/layers.log"
[ ${#TINY[@]} -gt 0 ] && exit 0

echo "== 1c. fp8 GEMMs with and without fast accumulation"
timeout 45 python3 benchmarks/gpu_gemm_sweep.py --dtype fp8 --fast-accum both --only gpt3,llama70,square \
    --out "$OUT/gemm_fp8_accum.csv" >> "$OUT/layers.log" 2>&1
echo "gpu_gemm_sweep exit $?" | tee -a "$OUT/layers.log"

echo "== 2. study worker scaling"
if python3 -c "import ray" 2>/dev/null; then
    timeout 225 bash benchmarks/bench_study_workers.sh 1e8 16,8,4 215 >> "$OUT/workers.log" 2>&1
    echo "bench_study_workers exit $? (124: stopped at its 225 s)" >> "$OUT/workers.log"
    timeout 20 ray stop --force > /dev/null 2>&1 || true  # a run cut short leaves no Ray daemons behind
else
    echo "no Ray on this machine and none in .whl/ (bash benchmarks/gpu_machine_wheels.sh makes it): skipped" \
        >> "$OUT/workers.log"
fi
grep -E '^\{' "$OUT/workers.log" | cut -c1-300
tail -1 "$OUT/workers.log"
uptime >> "$OUT/machine.txt"
