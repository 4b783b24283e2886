"""Grid enumeration speed: candidate grid rows per second through Space.rows(start, stop).

    taskset -c 0 python benchmarks/bench_grid.py [--chunk 65536] [--min-rows 20000000] [--json]

For the default space (plansweep rank's) and the exact space (the GPT-3 175B space of rank --space exact) on
GPT-3 175B / h100x1024, global batch 1536: walks the whole grid in ranges of --chunk grid
indices, again and again until --min-rows candidates have been enumerated, and reports
candidate rows per second (the range length over the time, the valid rows' StrategyTable
built included), valid rows per second, and in the same run the same ranges through the direct
check (Space.valid_direct on every candidate's digits, no lookup table) for the ratio. The lookup
table's one-off build time is reported apart. Pin to one core (taskset -c 0) for the per-core
figure.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import sys
import time

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from costmodel import cluster_preset, model_preset  # noqa: E402
from search import default_space, exact_space, partition_space  # noqa: E402
from search._moves import proposer  # noqa: E402


def _walk(space, chunk: int, min_rows: int, fn) -> tuple[float, int, int]:
    """Seconds, candidates and valid rows for repeated passes over the grid in chunks."""
    cand = valid = 0
    t0 = time.perf_counter()
    while cand < min_rows:
        for lo in range(0, space.size, chunk):
            hi = min(lo + chunk, space.size)
            valid += fn(lo, hi)
            cand += hi - lo
    return time.perf_counter() - t0, cand, valid


def measure(chunk: int = 65536, min_rows: int = 20_000_000, direct_rows: int = 2_000_000) -> list[dict]:
    model, cluster = model_preset("gpt3-175b"), cluster_preset("h100x1024")
    out = []
    for name, make in (("default", default_space), ("exact", exact_space)):
        space = make(model, cluster, 1536)
        t0 = time.perf_counter()
        space.valid_count()  # builds the lookup table once
        setup_s = time.perf_counter() - t0
        s_lut, c_lut, v_lut = _walk(space, chunk, min_rows, lambda a, b, s=space: len(s.rows(a, b)[0]))

        def direct(a, b, s=space):
            idx = np.arange(a, b, dtype=np.int64)
            keep = idx[s.valid_direct(s.digits_of(idx))]
            return len(s.table(s.digits_of(keep)))

        s_dir, c_dir, _ = _walk(space, chunk, direct_rows, direct)
        out.append({
            "space": name, "size": space.size, "valid": v_lut * space.size // c_lut, "chunk": chunk,
            "candidates": c_lut, "seconds": s_lut, "candidates_per_s": c_lut / s_lut,
            "valid_rows_per_s": v_lut / s_lut, "direct_candidates_per_s": c_dir / s_dir,
            "ratio": (c_lut / s_lut) / (c_dir / s_dir), "lookup_build_s": setup_s,
        })
    # Space.valid on random local moves (MCMC's search._moves), the check MCMC makes: the exact space
    # (lookup table) and the partition space (far beyond a grid; computed from the constraints).
    for name, make in (("exact", exact_space), ("partition", partition_space)):
        space = make(model, cluster, 1536)
        rng = np.random.default_rng(0)
        prop = proposer(space)(space.random_digits(rng, 65536), rng)
        space.valid(prop[:10])
        reps = 5
        t0 = time.perf_counter()
        for _ in range(reps):
            ok = space.valid(prop)
        dt = time.perf_counter() - t0
        out.append({"space": name, "moves": True, "size": space.size, "valid_fraction_of_moves": float(ok.mean()),
                    "valid_checks_per_s": reps * len(prop) / dt})
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--chunk", type=int, default=65536)
    ap.add_argument("--min-rows", type=int, default=20_000_000)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    res = measure(args.chunk, args.min_rows)
    if args.json:
        print(json.dumps(res, default=str))
        return 0
    for r in res:
        if r.get("moves"):
            print(f"{r['space']} moves: size {r['size']:.3e}; "
                  f"Space.valid on proposals {r['valid_checks_per_s']:,.0f}/s "
                  f"({100 * r['valid_fraction_of_moves']:.1f}% of moves valid)")
            continue
        print(f"{r['space']}: {r['size']:,} points, {r['valid']:,} valid; {r['candidates']:,} candidates in "
              f"{r['seconds']:.2f} s = {r['candidates_per_s']:,.0f} candidates/s "
              f"({r['valid_rows_per_s']:,.0f} valid rows/s); direct check {r['direct_candidates_per_s']:,.0f}/s "
              f"({r['ratio']:.1f}x); lookup table built in {r['lookup_build_s'] * 1e3:.0f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
