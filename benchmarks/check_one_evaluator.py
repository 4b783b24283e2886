"""Results of this checkout against another (the commit before a refactor), case by case.

    PYTHONPATH=. python benchmarks/check_one_evaluator.py --ref /work/ref

Each checkout computes every case in its own process (``--dump FILE``, PYTHONPATH set to that
checkout) and writes every metric column to an .npz; the two files are then compared column
by column: float columns equal or within a relative 1e-12 (inf and NaN in the same places),
integer and bool columns (reason codes, feasibility, micro-batches) equal.

Cases (closed forms and pipeline="simulate" for each):
  bench        `plansweep bench`'s rows (costmodel._bench_rows.bench_table), 1,000,000 closed form,
               the first 100,000 simulated
  exact        search.exact_space for GPT-3 175B on h100x1024, its valid points (Space.rows)
  placed       20,000 random placements on a100x64+h100x64 with stages split across the pools
  plain        the same without splits (bench_hetero.py --speed's draw)
  <preset>     tests.test_reference.random_table (4,000 rows uniform, 4,000 uneven with
               per-stage recompute) for llama3-70b on dgx-a100-1024, megatron-530b on
               selene-3072, seed000-mlp on seed000-16
  one-pool     the uniform and uneven preset rows as single-pool placements (as_placements)
  stages       the per-stage breakdowns (stage_breakdown) of 200 rows, on the
               stages that exist (``active``; the values past pp are presentation)
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time

import numpy as np

PRESETS = (("llama3-70b", "dgx-a100-1024"), ("megatron-530b", "selene-3072"), ("seed000-mlp", "seed000-16"))
MODES = ("closed_form", "simulate")


def _placements(model, hc, rows, split):
    from search import HeteroSpace

    extra = {"dp2": None} if split else {}
    space = HeteroSpace.from_options(model, hc, global_batch=1536, pp=(4, 8), dp=(1, 2, 4, 8, 16), tp=(1, 2, 4, 8),
                                     microbatches=(16, 32, 64, 128), recompute=("none", "selective", "full"),
                                     schedule=("1f1b", "interleaved", "zb-h1"), vpp=(1, 2), **extra)
    d = np.random.default_rng(0).integers(0, space.radices, size=(rows, len(space.dims)))
    return space.table(d)


def as_placements(table, layers):
    """The rows as single-pool placements, in this tree or in one with a separate HeteroTable."""
    try:
        from costmodel import HeteroTable
    except ImportError:
        return table.as_placements(layers)
    return HeteroTable.from_homogeneous(table, layers)


def dump(path: str) -> None:
    """Compute every case with the checkout on sys.path and save it to ``path``."""
    try:
        from costmodel._bench_rows import bench_table
    except ImportError:  # a checkout from before the bench rows moved below the command line
        from cli._cmd_bench import bench_table
    from costmodel import cluster_preset, evaluate, hetero_preset, model_preset
    from costmodel._evaluate import stage_breakdown
    from search import exact_space
    from tests.test_reference import random_table

    out: dict[str, np.ndarray] = {}
    times: dict[str, float] = {}

    def put(case, metrics):
        for k, v in metrics.items():
            out[f"{case}/{k}"] = np.asarray(v)

    def run(case, fn, *args, **kwargs):
        t0 = time.perf_counter()
        put(case, fn(*args, **kwargs))
        times[case] = time.perf_counter() - t0

    gpt, h1024 = model_preset("gpt3-175b"), cluster_preset("h100x1024")
    bench = bench_table(1_000_000)
    run("bench/closed_form", evaluate, gpt, h1024, bench)
    run("bench/simulate", evaluate, gpt, h1024, bench.take(slice(0, 100_000)), pipeline="simulate")
    space = exact_space(gpt, h1024)
    _, exact = space.rows(0, space.size)
    for mode in MODES:
        run(f"exact/{mode}", evaluate, gpt, h1024, exact, pipeline=mode)
    hc = hetero_preset("a100x64+h100x64")
    for name, split in (("placed", True), ("plain", False)):
        t = _placements(gpt, hc, 20_000, split)
        for mode in MODES:
            run(f"{name}/{mode}", evaluate, gpt, hc, t, pipeline=mode)
    for name, cl in PRESETS:
        model, cluster = model_preset(name), cluster_preset(cl)
        for uneven in (False, True):
            table = random_table(model, np.random.default_rng(7 + uneven), 4000, uneven)
            key = f"{name}-{'uneven' if uneven else 'uniform'}"
            ok = np.flatnonzero(table["global_batch"] % (table["dp"] * table["micro_batch"]) == 0)
            one = as_placements(table.take(ok), model.layers)
            for mode in MODES:
                run(f"{key}/{mode}", evaluate, model, cluster, table, pipeline=mode)
                run(f"{key}-one-pool/{mode}", evaluate, model, cluster, one, pipeline=mode)
            run(f"{key}-stages", stage_breakdown, model, cluster, table.take(slice(0, 200)))
    t = _placements(gpt, hc, 200, True)
    run("placed-stages", stage_breakdown, gpt, hc, t)
    np.savez_compressed(path, **out)
    for case, s in times.items():
        print(f"{case:40s} {s:8.3f} s", file=sys.stderr)


def compare(a_path: str, b_path: str) -> int:
    """Print one line per case and return the number of differing columns."""
    a, b = np.load(a_path), np.load(b_path)
    bad = 0
    keys_a, keys_b = set(a.files), set(b.files)
    for k in sorted(keys_a - keys_b):  # a column the new checkout lost
        print(f"MISSING in new: {k}")
        bad += 1
    added = sorted(keys_b - keys_a)  # columns the new checkout adds (a stage breakdown's, say): not compared
    if added:
        print(f"added in new ({len(added)} columns): " + ", ".join(added[:6]) + (" ..." if len(added) > 6 else ""))
    cases: dict[str, list[str]] = {}
    for k in sorted(keys_a & keys_b):
        cases.setdefault(k.split("/")[0] + ("/" + k.split("/")[1] if k.count("/") > 1 else ""), []).append(k)
    for case, keys in cases.items():
        worst, n_rows, diffs = 0.0, 0, []
        act = case + "/active"  # a stage breakdown: compare the stages that exist (padding is presentation)
        mask = a[act] & b[act] if act in keys else None
        for k in keys:
            x, y = a[k], b[k]
            if mask is not None and x.shape == mask.shape and k != act:
                x, y = x[mask], y[mask]
            n_rows = max(n_rows, len(x) if x.ndim else 1)
            if x.shape != y.shape or x.dtype.kind != y.dtype.kind:
                diffs.append(f"{k} shape/dtype {x.shape} {x.dtype} vs {y.shape} {y.dtype}")
                continue
            if x.dtype.kind == "f":
                same_special = np.array_equal(np.isnan(x), np.isnan(y)) and np.array_equal(np.isinf(x), np.isinf(y)) \
                    and np.array_equal(x[np.isinf(x)], y[np.isinf(y)])
                fin = np.isfinite(x) & np.isfinite(y)
                with np.errstate(divide="ignore", invalid="ignore"):
                    rel = np.abs(x[fin] - y[fin]) / np.maximum(np.abs(x[fin]), np.abs(y[fin]))
                rel = np.where(x[fin] == y[fin], 0.0, rel)
                r = float(rel.max()) if rel.size else 0.0
                worst = max(worst, r)
                if not same_special or r > 1e-12:
                    diffs.append(f"{k} max rel {r:.3g}, inf/nan equal {same_special}")
            elif not np.array_equal(x, y):
                diffs.append(f"{k}: {int(np.sum(x != y))} entries differ")
        status = "same" if not diffs else "DIFFERENT"
        print(f"{case:40s} {n_rows:>9,} rows {len(keys):>3} columns  max rel {worst:.2e}  {status}")
        for d in diffs:
            print("    " + d)
        bad += len(diffs)
    return bad


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ref", help="the other checkout (e.g. /work/ref)")
    ap.add_argument("--new", help="the checkout to compare (default: the one holding this script)")
    ap.add_argument("--dump", help="internal: compute the cases with the checkout on PYTHONPATH into this file")
    args = ap.parse_args()
    if args.dump:
        dump(args.dump)
        return
    if not args.ref:
        ap.error("--ref is required")
    here = os.path.abspath(args.new) if args.new else os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    with tempfile.TemporaryDirectory() as tmp:
        files = []
        for label, root in (("ref", os.path.abspath(args.ref)), ("new", here)):
            f = os.path.join(tmp, f"{label}.npz")
            env = {**os.environ, "PYTHONPATH": root}
            print(f"computing with {label} = {root}", file=sys.stderr)
            subprocess.run([sys.executable, os.path.abspath(__file__), "--dump", f], env=env, cwd=root, check=True)
            files.append(f)
        bad = compare(*files)
    print("all cases the same" if bad == 0 else f"{bad} columns differ")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
