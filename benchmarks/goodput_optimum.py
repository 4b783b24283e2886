"""Does the best plan by goodput differ from the best by raw throughput?

    PYTHONPATH=. python benchmarks/goodput_optimum.py [--space default|exact] [--union]

GPT-3 175B on h100x1024, global batch 1536, the space of `plansweep rank --space ...` (default: the
derived space, whose plans may leave GPUs idle), every row priced by the closed forms, then the
best 256 by each objective re-priced with the exact pipeline simulator (as `plansweep rank` does).
Per failure model: the best plan by throughput and by goodput (costmodel.plan_goodput), and, for
the repair time of a failed node, the shortest one at which the goodput optimum leaves the
throughput optimum (bisection on repair_h: below it idle spare nodes are not worth their GPUs).
"""

from __future__ import annotations

import argparse
import dataclasses

from cli._space_args import SPACE_DIMS, SPACES, space_from_args
from costmodel import FailureModel, cluster_preset, evaluate, model_preset, plan_goodput
from search._refine import REFINE_TOP, refine

# Published failure rates and storage (costmodel._goodput cites them): Llama 3 405B's (the
# default), Kokolis et al. 2024's 1,024-GPU job MTTF of 7.9 h (7.9 x 1024 = 8,090 GPU-hours), and
# each with storage 10x slower than Llama 3's Tectonic.
SLOW = {"write_Bps_per_gpu": 2e11 / 16384, "read_Bps_per_gpu": 7e11 / 16384}
MODELS = {
    "Llama 3 (50,700 GPU-h)": FailureModel(),
    "Kokolis 1,024-GPU MTTF (8,090 GPU-h)": FailureModel(gpu_mtbf_h=8090.0),
    "Llama 3, storage / 10": FailureModel(**SLOW),
    "Kokolis, storage / 10": FailureModel(gpu_mtbf_h=8090.0, **SLOW),
}


def best(model, cluster, table, metrics, objective, failure):
    idx, exact = refine(model, cluster, table, metrics, REFINE_TOP, objective=objective, failure=failure)
    return int(idx[0]), exact.take([0])


def describe(table, i, metrics, g) -> str:
    r = table.row(i)
    return (f"dp {r['dp']} tp {r['tp']} pp {r['pp']} cp {r['cp']} ZeRO-{r['zero_stage']} {r['schedule']} "
            f"mb {r['micro_batch']}: {metrics['tokens_per_s'][0]:,.0f} tok/s, "
            f"goodput {g['goodput_tokens_per_s'][0]:,.0f} "
            f"({100 * g['goodput_ratio'][0]:.2f}%), {g['nodes_used'][0]:.0f} nodes, {g['spare_nodes'][0]:.0f} spare")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--space", default="default", choices=SPACES[:2])
    ap.add_argument("--union", action="store_true")
    args = ap.parse_args()
    union = {"space_micro_batch": "1,2,3,4,6,8,12,16", "space_schedule": "gpipe,1f1b,interleaved,zb-h1,zb-h2",
             "space_vpp": "1,2,3,4,6"} if args.union else {}
    model, cluster = model_preset("gpt3-175b"), cluster_preset("h100x1024")
    flags = argparse.Namespace(space=args.space, global_batch="1536", partial_gpus=False, all_gpus=False,
                               **{"space_" + d: None for d in SPACE_DIMS} | union)
    space = space_from_args(flags, model, cluster)  # `plansweep rank --space ... --global-batch 1536`
    table = space.rows(0, space.size)[1]
    metrics = evaluate(model, cluster, table)
    what = args.space + (" + the exact space choices" if args.union else "")
    print(f"{what} space: {len(table):,} rows, {int(metrics['feasible'].sum()):,} feasible, "
          f"{int((table.num_gpus < cluster.num_gpus).sum()):,} leave GPUs idle")
    i_thr, m_thr = best(model, cluster, table, metrics, "tokens_per_s", None)
    for name, f in MODELS.items():
        i_g, m_g = best(model, cluster, table, metrics, "goodput", f)
        sub = table.take([i_thr])
        print(f"\n{name}:")
        print("  best by throughput: " + describe(table, i_thr, m_thr, plan_goodput(m_thr, sub, cluster, f)))
        print("  best by goodput:    " + describe(table, i_g, m_g, plan_goodput(m_g, table.take([i_g]), cluster, f)))
        # the shortest repair time at which the goodput optimum moves (closed forms + refine)
        lo, hi = 0.0, 48.0

        def moved(h, f=f):
            return best(model, cluster, table, metrics, "goodput", dataclasses.replace(f, repair_h=h))[0] != i_thr

        if not moved(hi):
            print(f"  the optimum stays for every repair time up to {hi} h")
            continue
        for _ in range(12):
            mid = (lo + hi) / 2
            lo, hi = (lo, mid) if moved(mid) else (mid, hi)
        print(f"  the goodput optimum leaves the throughput optimum for repair times above {hi:.2f} h")


if __name__ == "__main__":
    main()
