"""Published mixture-of-experts training runs against plansweep's prediction.

The MoE rows of tests/data/validation/published_runs.csv (their sources and transcription notes are there and in its
README), priced as `plansweep validate` prices them: each run's model preset, GPUs, layout, batch and precision as its
source gives them, under the profile of its dispatcher and overlap, no constant fitted to any row. Printed: the
published figure in the source's unit, the prediction in that unit, the error (predicted - published) / published in
that unit, and the predicted step's expert all-to-all, bubble and memory. BENCHMARKS.md, "Mixture of experts", records
the output.

    PYTHONPATH=. python3 benchmarks/moe_published.py [--json | --variants]

--variants: the DeepSeek-V3 rows again without node-limited routing and (the DeepSeek-V3 report's row) without fp8
dispatch, to show what each mechanism moves.
"""

from __future__ import annotations

import argparse
import dataclasses
import json

from validation_breakdown import CSV, parts

from costmodel._validate import read_runs

UNITS = {"measured_iteration_time_s": "s/step", "measured_tokens_per_s_per_gpu": "tokens/s/GPU",
         "measured_tflops_per_gpu": "TFLOP/s/GPU", "measured_mfu": "MFU", "measured_hfu": "HFU"}


def moe_runs():
    return [r for r in read_runs(CSV) if r.model.is_moe]


def variants() -> None:
    """The DeepSeek-V3 rows with and without node-limited routing and fp8 dispatch."""
    for run in moe_runs():
        if run.model.router_groups == 1:
            continue
        free = dataclasses.replace(run, model=dataclasses.replace(run.model, router_groups=1, router_group_topk=1))
        cases = [("no node limit", free), ("node limit", run)]
        if run.framework == "hai-llm":  # fp8 dispatch is hai-llm's; without it the profile is the DeepEP one
            bf16 = "megatron-core-deepep-a2a-overlap"
            cases = [("no node limit, 16-bit dispatch", dataclasses.replace(free, framework=bf16)),
                     ("node limit, 16-bit dispatch", dataclasses.replace(run, framework=bf16)),
                     ("no node limit, fp8 dispatch", free), ("node limit, fp8 dispatch", run)]
        for name, r in cases:
            res, p = parts(r)
            print(f"{run.name:44s} {name:32s} error {res['error_pct']:+6.1f}% of the step "
                  f"(ep a2a {p['ep_comm_s']:.2f} s of {res['predicted_iteration_time_s']:.2f} s)")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--variants", action="store_true")
    args = ap.parse_args()
    if args.variants:
        variants()
        return 0
    out = []
    for run in moe_runs():
        res, p = parts(run)
        pub, pred = res["measured_value"], res["predicted_value"]
        out.append({"run": run.name, "framework": run.framework, "unit": UNITS[run.measure], "published": pub,
                    "predicted": pred, "error": pred / pub - 1.0, "step_error_pct": res["error_pct"],
                    "memory_fits": res["memory_fits"], **p})
    if args.json:
        print(json.dumps(out, indent=1))
        return 0
    for r in out:
        print(f"{r['run']:44s} {r['unit']:<12} published {r['published']:8.1f}  predicted {r['predicted']:8.1f}  "
              f"error {100 * r['error']:+6.1f}%  ({r['mem_total_bytes'] / 1e9:.0f} GB"
              + ("" if r["memory_fits"] else ", out of memory") + f"; ep a2a {r['ep_comm_s']:.2f} s, bubble "
              f"{r['bubble_s']:.2f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
