#!/usr/bin/env bash
# Piper's planner: plansweep's `search piper` against the original C++ (msr-fiddle/piper algo.cpp)
# on bert32a100 (8 GiB, 1920 micro-batches, 25 GiB/s), K devices in 8..2048.
#
#   benchmarks/piper_vs_cpp.sh PIPER_CHECKOUT [K ...]
#
# PIPER_CHECKOUT is a checkout of github.com/msr-fiddle/piper (not vendored here: MIT code we do
# not copy). Its algo.cpp is compiled (g++ -O3) with its main() replaced by a loop over K that
# times Graph(ins).runDP() with clock() (CPU seconds, as the paper's scalability() does) and
# prints the time per sample of the plan (getTPSForResult). plansweep is timed in-process
# (time.process_time around solve_piper, JSON reading excluded) and by /usr/bin/time for the
# whole command. Prints one table row per K.
set -euo pipefail
src=${1:?usage: $0 PIPER_CHECKOUT [K ...]}; shift
ks=${*:-8 32 128 512 2048}
here=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d)
cp -r "$src"/algo.cpp "$src"/nlohmann "$src"/inputs "$work"/
# Keep everything before main(), then our main.
sed -n '1,/^int main (int argc, char \*\*argv) {/p' "$src"/algo.cpp | sed '$d' > "$work"/bench.cpp
cat >> "$work"/bench.cpp <<EOF
int main (int argc, char **argv) {
    for (int i = 1; i < argc; ++i) {
        json j; ifstream f("inputs/bert32a100.json"); f >> j;
        Instance ins = j.get<Instance>();
        ins.maxDevices = atoi(argv[i]);
        ins.maxMemoryPerDevice = 8.0 * (1 << 30);
        ins.mbsInBatch = 1920;
        ins.bandwidth = 25.0 * (1LL << 30);
        clock_t start = clock();
        Graph g(ins);
        Result r = g.runDP();
        double s = (clock() - start) * 1.0 / CLOCKS_PER_SEC;
        cout << "cpp " << argv[i] << " " << s << " " << setprecision(9)
             << (r.stages.empty() ? -1.0 : g.getTPSForResult(r)) << " " << r.stages.size() << endl;
    }
}
EOF
(cd "$work" && g++ -O3 -o bench bench.cpp 2>/dev/null)
echo "| K | C++ runDP CPU s | C++ time/sample | C++ stages | plansweep, sum d <= N: CPU s | time/sample | stages | plansweep default: CPU s | time/sample | stages | whole command wall s |"
echo "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
for k in $ks; do
    read -r _ _ cs ctps cst < <(cd "$work" && ./bench "$k" 2>/dev/null | grep '^cpp')
    py=$(cd "$here" && OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 python3 - "$k" <<'PY'
import sys, time
from search import load_piper_graph, solve_piper
from search._piper_input import with_overrides
g = with_overrides(load_piper_graph("tests/data/piper-inputs/bert32a100.json"), devices=int(sys.argv[1]),
                   memory_bytes=8 * 2**30, microbatches=1920, bandwidth_Bps=25 * 2**30)
t = time.process_time(); plan = solve_piper(g); t = time.process_time() - t
# algo.cpp's objective also caps the sum of d at N (boundOnS = min(N, K)): the comparable plan.
t2 = time.process_time(); capped = solve_piper(g, max_sum_d=g.microbatches); t2 = time.process_time() - t2
print(f"{t:.3f} {plan.time_per_sample_s:.9f} {len(plan.stages)} {t2:.3f} {capped.time_per_sample_s:.9f} "
      f"{len(capped.stages)}")
PY
)
    read -r ps ptps pst ps2 ptps2 pst2 <<<"$py"
    wall=$( { /usr/bin/time -f %e python3 -m cli search piper "$here"/tests/data/piper-inputs/bert32a100.json --devices "$k" \
        --memory 8589934592 --microbatches 1920 --bandwidth 26843545600 --json >/dev/null; } 2>&1 | tail -1 )
    echo "| $k | $cs | $ctps | $cst | $ps2 | $ptps2 | $pst2 | $ps | $ptps | $pst | $wall |"
done
rm -rf "$work"
