"""Does the model put published plans in their measured order? Every pair of runs of one problem, two plans.

    PYTHONPATH=. python3 benchmarks/rank_pairs.py [FILE.csv] [--framework NAME]

A problem is one model (every model column of the file: layers, hidden, ffn, heads, kv heads, sequence length,
vocabulary, activation, and the expert columns where the file has them) on one GPU type and count. For every pair of
runs of a problem, oriented so that the first is the faster measured (tokens/s, from the time `plansweep validate`
derives from what the source published):
    measured ratio   T_measured(a) / T_measured(b) >= 1
    predicted ratio  T_predicted(a) / T_predicted(b); in order when > 1 (a predicted tie is not in order)
    ratio error      predicted ratio / measured ratio - 1
    tied             the two plans' error bands overlap (costmodel._bands: what `plansweep rank` marks with ~)
A pair whose plan columns (framework profile, degrees, batch, schedule settings, precision) are all equal differs only
in what the cost model does not see (async TP, a software release): it is listed, and counted apart in the summary.
"""

from __future__ import annotations

import argparse
import csv
import itertools
from pathlib import Path

import numpy as np

from costmodel._bands import shipped_bands
from costmodel._validate import read_runs, regime_codes, validate

CSV = Path(__file__).resolve().parents[1] / "tests/data/validation/published_runs.csv"
MODEL = ("layers", "hidden", "ffn_hidden", "heads", "kv_heads", "seq_len", "vocab", "activation", "experts",
         "experts_per_token", "shared_experts", "expert_ffn_hidden", "dense_layers", "moe_layer_freq")
PLAN = ("framework", "tp", "pp", "dp", "cp", "ep", "etp", "vpp", "global_batch", "micro_batch", "recompute",
        "sequence_parallel", "zero_stage", "distributed_optimizer", "precision")


def throughputs(runs, rows) -> tuple[np.ndarray, np.ndarray]:
    """(measured, predicted) tokens/s of each run: tokens of an iteration over validate's times."""
    tokens = np.array([r.fixed["global_batch"] * r.model.seq_len for r in runs], dtype=float)
    return (tokens / np.array([x["measured_iteration_time_s"] for x in rows]),
            tokens / np.array([x["predicted_iteration_time_s"] for x in rows]))


def band_sides(runs) -> tuple[np.ndarray, np.ndarray]:
    """((n,), (n,)) the shipped band's low and high log sides of each run's regime."""
    b, at = shipped_bands(), regime_codes(runs)
    return b.half_low[at], b.half_high[at]


def pairs(cells: list[dict]) -> list[tuple[int, int]]:
    """Every pair (i, j), i < j, of rows of one problem (MODEL columns, gpu, num_gpus)."""
    key = lambda c: tuple(c.get(k, "") for k in ("gpu", "num_gpus", *MODEL))  # noqa: E731
    groups: dict[tuple, list[int]] = {}
    for i, c in enumerate(cells):
        groups.setdefault(key(c), []).append(i)
    return [p for idx in groups.values() for p in itertools.combinations(idx, 2)]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("file", nargs="?", default=str(CSV))
    ap.add_argument("--framework", help="the profile of rows whose framework cell is empty")
    args = ap.parse_args()
    cells = list(csv.DictReader(open(args.file, newline="")))
    runs = read_runs(args.file, framework=args.framework)
    rows = validate(runs)["rows"]
    meas, pred = throughputs(runs, rows)
    h_low, h_high = band_sides(runs)
    print("| faster measured (a) | slower (b) | GPUs | plans differ in | measured a/b | predicted a/b | ratio error "
          "| in order | tied |")
    print("| --- | --- | ---: | --- | ---: | ---: | ---: | :---: | :---: |")
    out = []
    for i, j in pairs(cells):
        a, b = (i, j) if meas[i] >= meas[j] else (j, i)
        differ = [k for k in PLAN if cells[a].get(k, "") != cells[b].get(k, "")]
        m, p = meas[a] / meas[b], pred[a] / pred[b]
        lo, hi = (a, b) if pred[a] >= pred[b] else (b, a)  # predicted faster, slower
        tied = pred[hi] * np.exp(h_high[hi]) >= pred[lo] * np.exp(-h_low[lo])
        out.append((bool(p > 1 or (m == 1 and p == 1)), p / m - 1, bool(differ), bool(tied)))
        what = ", ".join(f"{k} {cells[a].get(k) or '-'}/{cells[b].get(k) or '-'}" for k in differ) or "nothing priced"
        print(f"| {cells[a]['name']} | {cells[b]['name']} | {cells[a]['num_gpus']} | {what} | {m:.3f} | {p:.3f} | "
              f"{100 * (p / m - 1):+.1f}% | {'yes' if out[-1][0] else 'no'} | {'yes' if tied else 'no'} |")
    if not out:
        print("no two runs of one problem")
        return
    order, err, priced, tied = (np.array(x) for x in zip(*out, strict=True))
    for label, sel in (("all pairs", np.ones_like(order)), ("plans differing in a priced column", priced)):
        if sel.any():
            print(f"{label}: {sel.sum()}; in the measured order {order[sel].sum()}/{sel.sum()} "
                  f"({100 * order[sel].mean():.1f}%); median |ratio error| {100 * np.median(np.abs(err[sel])):.1f}%, "
                  f"median signed {100 * np.median(err[sel]):+.1f}%, largest {100 * np.abs(err[sel]).max():.1f}%; "
                  f"tied within the bands {tied[sel].sum()}, out of order and not tied "
                  f"{np.sum(sel & ~order & ~tied)}")


if __name__ == "__main__":
    main()
