"""Leave-one-source-out: fit the efficiency constants without a source, price that source.

    cd benchmarks && PYTHONPATH=..:. python3 leave_one_source_out.py

For each source of tests/data/validation/published_runs.csv (grouped as in
benchmarks/validation_by_source.py): `plansweep calibrate`'s fit (costmodel._validate.calibrate:
gemm_eff_max, hbm_eff, link_eff per GPU type) on the rows of every other source, then the
held-out source's mean |error| under that fit, beside its error under the shipped constants.
A GPU type with no row outside the held-out source keeps its shipped constants. Only rows the
shipped model prices (a finite error) take part: calibrate's loss is infinite otherwise.
The last line is the mean over every row, each priced by the fit without its own source.
"""

from __future__ import annotations

import csv
import math

import numpy as np
from validation_by_source import CSV, GROUPS, group_of

from costmodel._validate import _with_eff, calibrate, predict, read_runs


def _errors(runs, fitted=None) -> np.ndarray:
    out = []
    for r in runs:
        eff = (fitted or {}).get(r.cluster.gpu.name)
        out.append(predict(_with_eff(r, eff) if eff is not None else r)["error_pct"])
    return np.array(out)


def main() -> None:
    sources = [r["source"] for r in csv.DictReader(CSV.open())]
    runs = read_runs(CSV)
    group = [group_of(s) for s in sources]
    base = _errors(runs)
    priced = np.isfinite(base)
    print("| held-out source | runs priced | shipped constants: mean abs error | fitted without it: mean abs error "
          "| constants fitted (GPU: gemm_eff_max, hbm_eff, link_eff) |")
    print("| --- | ---: | ---: | ---: | --- |")
    held_all, base_all = [], []
    for _, label in GROUPS:
        held = [i for i in range(len(runs)) if group[i] == label and priced[i]]
        train = [runs[i] for i in range(len(runs)) if group[i] != label and priced[i]]
        fitted = calibrate(train)
        e = _errors([runs[i] for i in held], fitted)
        held_all.append(e)
        base_all.append(base[held])
        gpus = sorted({runs[i].cluster.gpu.name for i in held})
        consts = "; ".join(f"{g}: " + (", ".join(f"{getattr(fitted[g], k):.3g}" for k in
                                                  ("gemm_eff_max", "hbm_eff", "link_eff"))
                                        if g in fitted else "shipped (no other source)") for g in gpus)
        print(f"| {label} | {len(held)} | {np.abs(base[held]).mean():.1f}% | {np.abs(e).mean():.1f}% | {consts} |")
    h, b = np.concatenate(held_all), np.concatenate(base_all)
    assert all(map(math.isfinite, h))
    print(f"| all (each row priced by the fit without its source) | {h.size} | {np.abs(b).mean():.1f}% | "
          f"{np.abs(h).mean():.1f}% | |")
    fitted = calibrate([r for r, ok in zip(runs, priced, strict=True) if ok])
    e = _errors([r for r, ok in zip(runs, priced, strict=True) if ok], fitted)
    print(f"fitted on every source (in-sample): mean abs error {np.abs(e).mean():.1f}%; constants "
          + "; ".join(f"{g}: " + ", ".join(f"{k}={getattr(v, k):.3g}" for k in ("gemm_eff_max", "hbm_eff", "link_eff"))
                      for g, v in sorted(fitted.items())))


if __name__ == "__main__":
    main()
