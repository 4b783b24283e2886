#!/usr/bin/env bash
# Piper's planner: plansweep's `search piper` against the original C++ (msr-fiddle/piper algo.cpp)
# on bert32a100 (8 GiB, 1920 micro-batches, 25 GiB/s), K devices in 8..2048.
#
#   [RUNS=5] [BEFORE=COMMIT] benchmarks/piper_vs_cpp.sh PIPER_CHECKOUT [K ...]
#
# PIPER_CHECKOUT is a checkout of github.com/msr-fiddle/piper (not vendored here: MIT code we do
# not copy). Its algo.cpp is compiled (g++ -O3) with its main() replaced by a loop over K that
# times Graph(ins).runDP() with clock() (CPU seconds, as the paper's scalability() does) and
# prints the time per sample of the plan (getTPSForResult). plansweep is timed in-process
# (time.process_time around solve_piper, JSON reading excluded) and by /usr/bin/time for the
# whole command. Both sides run RUNS times, each in a fresh process (one solve per process, so
# every time includes first-call costs), alternating; the table gives medians (a C++ run over
# 10 s is not repeated). BEFORE: also time that commit's solve_piper (git archive) alike.
# Prints one table row per K.
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
runs=${RUNS:-5}
old=""
if [ -n "${BEFORE:-}" ]; then
    old=$(mktemp -d)
    git -C "$here" archive "$BEFORE" | tar -x -C "$old"
fi
plansweep_solve() {  # DIR K CAP -> "cpu_s time_per_sample stages"
    (cd "$1" && OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 PYTHONPATH="$1" python3 - "$2" "$3" <<'PY'
import sys, time
from search import load_piper_graph, solve_piper
from search._piper_input import with_overrides
g = with_overrides(load_piper_graph("tests/data/piper-inputs/bert32a100.json"), devices=int(sys.argv[1]),
                   memory_bytes=8 * 2**30, microbatches=1920, bandwidth_Bps=25 * 2**30)
# algo.cpp's objective also caps the sum of d at N (boundOnS = min(N, K)): "N" is the comparable plan.
cap = g.microbatches if sys.argv[2] == "N" else None
t = time.process_time(); plan = solve_piper(g, max_sum_d=cap); t = time.process_time() - t
print(f"{t:.4f} {plan.time_per_sample_s:.9f} {len(plan.stages)}")
PY
    )
}
median() { python3 -c 'import statistics, sys; print(f"{statistics.median(float(x) for x in sys.argv[1:]):.4g}")' "$@"; }
head="| K | C++ runDP CPU s | C++ time/sample | C++ stages | plansweep, sum d <= N: CPU s | time/sample | stages"
[ -n "$old" ] && head="$head | before ($BEFORE), sum d <= N: CPU s"
echo "$head | plansweep default: CPU s | time/sample | stages | whole command wall s |"
cols=11; [ -n "$old" ] && cols=12
printf '|'; for _ in $(seq $cols); do printf ' ---: |'; done; echo
for k in $ks; do
    cpp=(); cap=(); base=(); dflt=(); wall=()
    for r in $(seq "$runs"); do
        if [ "$r" = 1 ] || python3 -c "import sys; sys.exit(float('${cpp[0]}') > 10)"; then
            read -r _ _ cs ctps cst < <(cd "$work" && ./bench "$k" 2>/dev/null | grep '^cpp')
            cpp+=("$cs")
        fi
        read -r ps ptps pst < <(plansweep_solve "$here" "$k" N); cap+=("$ps")
        [ -n "$old" ] && { read -r bs _ _ < <(plansweep_solve "$old" "$k" N); base+=("$bs"); }
        read -r ds dtps dst < <(plansweep_solve "$here" "$k" none); dflt+=("$ds")
        w=$( { cd "$here" && /usr/bin/time -f %e python3 -m cli search piper tests/data/piper-inputs/bert32a100.json \
            --devices "$k" --memory 8589934592 --microbatches 1920 --bandwidth 26843545600 --json >/dev/null; } 2>&1 | tail -1 )
        wall+=("$w")
    done
    row="| $k | $(median "${cpp[@]}") | $ctps | $cst | $(median "${cap[@]}") | $ptps | $pst"
    [ -n "$old" ] && row="$row | $(median "${base[@]}")"
    echo "$row | $(median "${dflt[@]}") | $dtps | $dst | $(median "${wall[@]}") |"
done
[ -n "$old" ] && rm -rf "$old"
rm -rf "$work"
