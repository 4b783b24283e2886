"""Are the error bands calibrated? Per regime: runs, sources, the band, its width, leave-one-source-out coverage.

    PYTHONPATH=. python3 benchmarks/band_calibration.py [FILE.csv] [--framework NAME]

Prices the measured runs of FILE (default tests/data/validation/published_runs.csv) as `plansweep validate` does,
computes the band table as `plansweep validate FILE --write-bands PATH` does (costmodel/_bands.py), and prints a
Markdown table: per regime that holds runs, its runs and sources, the band it uses (low / high in percent of the
predicted throughput), the band's width (high - low, in percent), each run's leave-one-source-out band (computed
without the runs of its source) as a median width, and the share of the regime's runs inside it. Then the same over
all runs, and two constructions not taken, for comparison: the bands centred on each regime's median residual, and
one band for every run (no regimes).
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path

import numpy as np

from costmodel._bands import FAMILIES, PARALLELISMS, leave_one_source_out, min_runs, resolve_bands
from costmodel._validate import band_table_of, read_runs, validate

CSV = Path(__file__).resolve().parents[1] / "tests/data/validation/published_runs.csv"


def arrays(table: dict):
    """The table's priced runs as arrays: log residual, family and parallelism codes, source."""
    runs = table["runs"]
    r = np.log1p(np.array([x["error_pct"] for x in runs]) / 100)
    fam = np.array([FAMILIES.index(x["family"]) for x in runs])
    par = np.array([PARALLELISMS.index(x["parallelism"]) for x in runs])
    return r, fam, par, np.array([x["source"] for x in runs], dtype=object)


def width_pct(h) -> np.ndarray:
    """A band's width, high - low, in percent of the prediction: 100 (e^h - e^-h)."""
    return 200 * np.sinh(np.asarray(h, dtype=float))


def median_centred_coverage(r, fam, par, src, level) -> float:
    """Leave-one-source-out coverage of bands centred on each regime's median residual (the same conformal rank on
    |r - median|; sparse regimes: their parallelism family's, else all runs')."""
    inside = []
    for s in np.unique(src):
        keep, held = src != s, np.flatnonzero(src == s)
        for i in held:
            for cell in ((fam == fam[i]) & (par == par[i]) & keep, (par == par[i]) & keep, keep):
                x = r[cell]
                k = math.ceil(round(level * (x.size + 1), 9))
                if k <= x.size:
                    c = np.median(x)
                    inside.append(abs(r[i] - c) <= np.sort(np.abs(x - c))[k - 1])
                    break
            else:
                inside.append(False)
    return float(np.mean(inside))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("file", nargs="?", default=str(CSV))
    ap.add_argument("--framework", help="the profile of rows whose framework cell is empty")
    args = ap.parse_args()
    runs = read_runs(args.file, framework=args.framework)
    table = band_table_of(args.file, runs, validate(runs))
    r, fam, par, src = arrays(table)
    level = table["level"]
    inside, loso_h = leave_one_source_out(r, fam, par, src, level)
    resolved = resolve_bands(r, fam, par, level)
    own_w = 100 * (np.exp(resolved.half_high) - np.exp(-resolved.half_low))[fam, par]  # each run's band, high - low
    print(f"{args.file}: {table['priced_runs']} priced runs from {len(set(src))} sources; conformal level "
          f"{level:.2f} (the least of 0.80, 0.85, 0.90, 0.95 reaching 80% leave-one-source-out); a regime needs "
          f"{min_runs(level)} runs for a band of its own\n")
    print("| regime | runs | sources | band (low / high) | width | leave-one-source-out: median width | inside |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    for c in table["regimes"]:
        if not c["runs"]:
            continue
        cell = (fam == FAMILIES.index(c["family"])) & (par == PARALLELISMS.index(c["parallelism"]))
        loso_w = width_pct(np.median(loso_h[cell])) if np.isfinite(loso_h[cell]).all() else math.inf
        note = "" if c["regime"] == f"{c['family']} x {c['parallelism']}" else f" ({c['regime'].split('(', 1)[1]}"
        print(f"| {c['family']} x {c['parallelism']}{note} | {c['runs']} | {c['sources']} | "
              f"{c['low_pct']:+.1f}% / {c['high_pct']:+.1f}% | {c['high_pct'] - c['low_pct']:.1f}% | "
              f"{loso_w:.1f}% | {100 * inside[cell].mean():.0f}% ({inside[cell].sum()}/{cell.sum()}) |")
    finite = np.isfinite(loso_h)
    print(f"| all runs | {r.size} | {len(set(src))} | | median {np.median(own_w):.1f}% | median "
          f"{np.median(width_pct(loso_h[finite])):.1f}% | {100 * inside.mean():.1f}% ({inside.sum()}/{r.size}) |")
    print("\nper source left out (its runs against the bands of the others):")
    for s in sorted(set(src)):
        held = src == s
        print(f"  {s}: {inside[held].sum()}/{held.sum()} inside")
    z = np.zeros_like(fam)
    print(f"\nnot taken, at level {level:.2f}: bands centred on each regime's median residual: "
          f"{100 * median_centred_coverage(r, fam, par, src, level):.1f}% inside; one band for every run "
          f"(no regimes): {100 * leave_one_source_out(r, z, z, src, level)[0].mean():.1f}% inside, width "
          f"{width_pct(resolve_bands(r, z, z, level).half_width[0, 0]):.1f}%")


if __name__ == "__main__":
    main()
