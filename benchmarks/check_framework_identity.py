"""Every framework profile's metric columns on the bench rows, against another checkout: bit for bit.

    PYTHONPATH=. python3 benchmarks/check_framework_identity.py --base BASE_TREE [--rows N]

For GPT-3 175B, Llama 3 70B and Mixtral 8x7B on h100x1024 (costmodel._bench_rows.bench_table: the MoE preset with
its ep column), each profile in costmodel.FRAMEWORKS is evaluated here and in BASE_TREE (a subprocess, PYTHONPATH
set to it); every metric column must hold the same bytes (the same values, NaN in the same places, zeros of the
same sign). Prints "all cases the same" or the columns that differ.
"""

from __future__ import annotations

import argparse
import os
import pickle
import subprocess
import sys
import tempfile

import numpy as np

MODELS = ("gpt3-175b", "llama3-70b", "mixtral-8x7b")

WORKER = r"""
import pickle, sys
import numpy as np
from costmodel import FRAMEWORKS, cluster_preset, evaluate, model_preset
from costmodel._bench_rows import bench_table
out = {}
cluster = cluster_preset("h100x1024")
for name in sys.argv[2].split(","):
    model = model_preset(name)
    table = bench_table(int(sys.argv[3]), experts=model.experts)
    for fw in FRAMEWORKS:
        met = evaluate(model, cluster, table, framework=fw)
        out[name, fw] = {c: np.asarray(v) for c, v in met.items()}
with open(sys.argv[1], "wb") as f:
    pickle.dump(out, f)
"""


def results(tree: str, rows: int) -> dict:
    with tempfile.NamedTemporaryFile(suffix=".pkl", delete=False) as f:
        path = f.name
    subprocess.run([sys.executable, "-c", WORKER, path, ",".join(MODELS), str(rows)], cwd=tree, check=True,
                   env={**os.environ, "PYTHONPATH": os.path.abspath(tree)})
    with open(path, "rb") as f:
        out = pickle.load(f)
    os.unlink(path)
    return out


def same_bytes(a: np.ndarray, b: np.ndarray) -> bool:
    """The same dtype, shape and bytes."""
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--base", required=True)
    ap.add_argument("--rows", type=int, default=50_000)
    args = ap.parse_args()
    base, tree = results(args.base, args.rows), results(".", args.rows)
    bad = []
    for case, cols in tree.items():
        ref = base[case]
        for c in sorted(set(cols) | set(ref)):
            if c not in cols or c not in ref:
                bad.append(f"{case}: column {c} only in one tree")
            elif not same_bytes(cols[c], ref[c]):
                a, b = cols[c], ref[c]
                n = (int(np.sum(a.view(np.uint8).reshape(len(a), -1) != b.view(np.uint8).reshape(len(b), -1), axis=1)
                            .astype(bool).sum()) if a.dtype == b.dtype and a.shape == b.shape else len(a))
                bad.append(f"{case}: {c} differs on {n} rows")
    print(f"{len(tree)} cases ({len(MODELS)} models x {len(tree) // len(MODELS)} profiles), {args.rows:,} rows each")
    print("\n".join(bad) if bad else "all cases the same")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
