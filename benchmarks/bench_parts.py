"""Parquet parts of run directories: how many, rows per part, bytes per row, and the time pandas
takes to open each run (``pandas.read_parquet(RUN_DIR + "/results")``, median of five).

    PYTHONPATH=. python3 benchmarks/bench_parts.py RUN_DIR [RUN_DIR ...]
"""

from __future__ import annotations

import argparse
import glob
import os
import statistics
import time

import pandas as pd
import pyarrow.parquet as pq


def measure(run: str, repeats: int = 5) -> dict:
    files = sorted(glob.glob(os.path.join(run, "results", "*", "*.parquet")))
    rows = [pq.read_metadata(f).num_rows for f in files]
    size = sum(os.path.getsize(f) for f in files)
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        n = len(pd.read_parquet(os.path.join(run, "results")))
        times.append(time.perf_counter() - t0)
    assert n == sum(rows), (n, sum(rows))
    return {"run": run, "parts": len(files), "rows": sum(rows), "part_rows": (min(rows), max(rows)),
            "bytes_per_row": size / max(sum(rows), 1), "open_s": statistics.median(times)}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("runs", nargs="+", metavar="RUN_DIR")
    for run in p.parse_args().runs:
        m = measure(run)
        print(f"{m['run']}: {m['parts']:,} parts, {m['rows']:,} rows ({m['part_rows'][0]:,}-{m['part_rows'][1]:,} "
              f"a part), {m['bytes_per_row']:.0f} bytes/row, pandas.read_parquet {m['open_s']:.2f} s")


if __name__ == "__main__":
    main()
