"""Routed-token imbalance under dropless routing, read from published forced / dropless pairs.

    PYTHONPATH=. python3 benchmarks/moe_dropless_imbalance.py

Megatron-Core's `--moe-router-force-load-balancing` replaces the router's logits with normal random
ones before the top-k (Megatron-LM 1e057005, the ModelZoo rows' code, megatron/core/transformer/moe/
router.py: `if self.config.moe_router_force_load_balancing: logits = apply_random_logits(logits)`;
the same at core_v0.16.0, 3bec9aa), so every expert-parallel rank receives the mean share of the
token copies; without it (dropless: the router's own choice; the source's Qwen3-235B runs load a
checkpoint and a dataset, runtime_configs/benchmarking/runtime.conf PRETRAIN 0, the model yaml's
`--load` and `--data-path`) the ranks receive what the router picks, and every rank waits for the
busiest one at the all-to-alls. The cost model prices the busiest rank's share over the mean as the
model's `capacity_factor` (costmodel._experts.routed_copies: its expert GEMMs, all-to-all bytes,
permutation and sort bytes and routed activations at that multiple; 1.0: balanced).

The Megatron-MoE-ModelZoo (yanring/Megatron-MoE-ModelZoo, best_practice/qwen3/readme.md at
e865051, H100 "Long Context" table) publishes Qwen3-235B-A22B on 256 H100 at one layout (TP 4,
EP 8, PP 8, VPP 4, DeepEP, bf16, recompute `layernorm moe`, GBS 256) at four sequence lengths, each
with forced balance and dropless. Each pair is priced here as `plansweep validate` prices the
128k row of tests/data/validation/published_runs.csv (`zoo-qwen3-235b-h100-256gpu-cp8-s131072`,
the forced 128k run), with only the sequence length, cp and dp changed (dp = 8 / cp), and the
busiest rank's share is solved for (bisection on `capacity_factor`) so that the predicted dropless /
forced step ratio equals the published TFLOP/s ratio (the two runs of a pair do the same FLOPs).
Printed: per length, each forced row's error balanced, the published ratio and the implied
share; then the validation rows of the same table at 4,096 tokens, priced balanced (as they ran:
the launch lines committed with the table, examples/qwen3/run_235b.sh at 31c5686, force balance on
every layout) and, for comparison, at the mean implied share.

The implied share is one model's router on the source's data, read through the model's split of the
step (which prices the forced runs 16-18% slow). No validation row carries it (tests/data/validation/
README.md, "Routing").

Mixtral: the same source publishes one pair for Mixtral 8x22B (best_practice/Mixtral/run_mixtral_8x22B.sh at b09773a,
unchanged at e865051 as best_practice/mixtral/): on 128 H100 at the model's runtime.conf layout (TP 2, PP 8, EP 8,
VPP 7, MBS 1, GBS 256, 4,096 tokens, alltoall dispatcher, bf16), "Dropless training, stable performance should be
around 445TFLOPS" and "Dropless training with forced balancing, performance should be around 465 TFLOPS". The dropless
command passes no routing flag; PRETRAIN 0 loads the model's checkpoint (cluster_configs/benchmarking/template.conf:
LOAD_PATH from the model's checkpoint path; the yaml's `--finetune --load`), so the trained router routes Slimpajama.
The forced run is priced as the Mixtral 8x7B row of the validation set is (megatron-core, the row's cluster), with the
8x22B shapes and that layout; its implied share is printed, with the range the published figures' rounding to 5
TFLOP/s allows, and the Mixtral 8x7B row (`mcore-moe-mixtral-8x7b-h100-64gpu`) balanced and at that share. That row
ran dropless by the router's choice: Megatron-LM's MoE README at 0b981f9c53 (MCore v0.8) names it "Dropless", and
the forced-balance option did not exist before 022bcb5afe (2025-05-24, "add force-load-balancing for MoE router").
No pair of Mixtral 8x7B itself is published, so the row carries the 8x22B pair's share, rounded to 1.07: the same
rule as the Qwen3 rows (the share a published forced / dropless pair of the row's model family implies under
Megatron-Core, the row's own model where published), read from the pair and not fitted to the row.
"""

from __future__ import annotations

import csv
import dataclasses
import tempfile
from pathlib import Path

from costmodel._validate import predict, read_runs

CSV = Path(__file__).resolve().parents[1] / "tests/data/validation/published_runs.csv"
FORCED_ROW = "zoo-qwen3-235b-h100-256gpu-cp8-s131072"
# (sequence length, cp, forced TFLOP/s, dropless TFLOP/s): the Long Context table at e865051
PAIRS = ((16384, 1, 295, 237), (32768, 2, 335, 277), (65536, 4, 368, 320), (131072, 8, 389, 357))
# the table's rows at 4,096 tokens (all forced: run_235b.sh at 31c5686), for comparison
ROWS_4K = ("zoo-qwen3-235b-h100-256gpu-deepep-tp4-pp8", "zoo-qwen3-235b-h100-256gpu-a2a-ep8-pp32",
           "zoo-qwen3-235b-h100-256gpu-deepep-ep32",
           "zoo-qwen3-235b-h100-256gpu-deepep-ep32-1f1b-overlap")


MIXTRAL_ROW = "mcore-moe-mixtral-8x7b-h100-64gpu"
# run_mixtral_8x22B.sh at b09773a: (forced TFLOP/s, dropless TFLOP/s), each "around", to 5 TFLOP/s
MIXTRAL_8X22B_PAIR = (465, 445)
# runtime.conf's Mixtral-8x22B layout and the model yaml's shapes at b09773a (128 H100: NNODES 16)
MIXTRAL_8X22B_CELLS = dict(model="mixtral-8x22b", layers="56", hidden="6144", ffn_hidden="16384", heads="48",
                           kv_heads="8", vocab="32000", num_gpus="128", tp="2", pp="8", dp="8", vpp="7", ep="8",
                           global_batch="256", micro_batch="1", recompute="none", sequence_parallel="true",
                           stage_layers="", tflops_convention="causal_model_flops")


def _runs_of(rows: list[dict]):
    """read_runs of ``rows`` (dicts in the columns of published_runs.csv) through a temporary CSV."""
    with tempfile.NamedTemporaryFile("w", suffix=".csv", delete=False) as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0].keys()))
        w.writeheader()
        w.writerows(rows)
    try:
        return read_runs(f.name)
    finally:
        Path(f.name).unlink()


def mixtral_8x22b_forced_run():
    """The ModelZoo's forced Mixtral 8x22B run (read_runs' MeasuredRun), built from the Mixtral 8x7B validation row."""
    base = next(r for r in csv.DictReader(CSV.open()) if r["name"] == MIXTRAL_ROW)
    row = dict(base, name="zoo-mixtral-8x22b-h100-128gpu-forced", capacity_factor="",
               measured_tflops_per_gpu=str(MIXTRAL_8X22B_PAIR[0]), **MIXTRAL_8X22B_CELLS)
    return _runs_of([row])[0]


def pair_runs():
    """The forced run of each pair (read_runs' MeasuredRun), built from the 128k validation row."""
    rows = list(csv.DictReader(CSV.open()))
    base = next(r for r in rows if r["name"] == FORCED_ROW)
    out = []
    for seq, cp, forced, _ in PAIRS:
        r = dict(base, name=f"zoo-long-context-{seq}-forced", seq_len=str(seq), cp=str(cp), dp=str(8 // cp),
                 measured_tflops_per_gpu=str(forced), measured_iteration_time_s="")
        out.append(r)
    return _runs_of(out)


def at_share(run, share: float) -> dict:
    """predict() of the run with the busiest rank taking ``share`` x the mean copies."""
    return predict(dataclasses.replace(run, model=dataclasses.replace(run.model, capacity_factor=share)))


def implied_share(run, ratio: float, lo: float = 1.0, hi: float = 4.0) -> float:
    """The capacity_factor at which the predicted step is ``ratio`` x the balanced one (bisection)."""
    t1 = at_share(run, 1.0)["predicted_iteration_time_s"]
    for _ in range(40):
        mid = 0.5 * (lo + hi)
        if at_share(run, mid)["predicted_iteration_time_s"] < ratio * t1:
            lo = mid
        else:
            hi = mid
    return 0.5 * (lo + hi)


def main() -> None:
    print("| seq | cp | forced error balanced | published dropless / forced | implied busiest-rank share |")
    print("| ---: | ---: | ---: | ---: | ---: |")
    shares = []
    for run, (seq, cp, forced, dropless) in zip(pair_runs(), PAIRS, strict=True):
        ratio = forced / dropless  # step-time ratio: the same FLOPs at the two published rates
        share = implied_share(run, ratio)
        shares.append(share)
        print(f"| {seq} | {cp} | {at_share(run, 1.0)['error_pct']:+.1f}% | {ratio:.3f} | {share:.3f} |")
    mean = sum(shares) / len(shares)
    print(f"\nmean implied share {mean:.2f} (range {min(shares):.2f}-{max(shares):.2f})\n")
    print(f"| row | error balanced | error at share {mean:.2f} |")
    print("| --- | ---: | ---: |")
    for run in read_runs(CSV):
        if run.name in ROWS_4K:
            print(f"| {run.name} | {at_share(run, 1.0)['error_pct']:+.1f}% | {at_share(run, mean)['error_pct']:+.1f}% |")

    mixtral()


def mixtral() -> None:
    """The Mixtral 8x22B pair's implied share, the range of its rounding, and the Mixtral 8x7B row at that share."""
    run = mixtral_8x22b_forced_run()
    forced, dropless = MIXTRAL_8X22B_PAIR
    share = implied_share(run, forced / dropless)
    low = implied_share(run, (forced - 2.5) / (dropless + 2.5))
    high = implied_share(run, (forced + 2.5) / (dropless - 2.5))
    print(f"\nMixtral 8x22B, 128 H100, TP 2 PP 8 EP 8 VPP 7: forced error balanced"
          f" {at_share(run, 1.0)['error_pct']:+.1f}%; dropless / forced {forced / dropless:.3f}; implied share {share:.3f}"
          f" ({low:.3f}-{high:.3f} over the figures' rounding)")
    row = next(r for r in read_runs(CSV) if r.name == MIXTRAL_ROW)
    print(f"{MIXTRAL_ROW}: error balanced {at_share(row, 1.0)['error_pct']:+.1f}%, at share {share:.2f}"
          f" {at_share(row, share)['error_pct']:+.1f}% ({at_share(row, low)['error_pct']:+.1f}% to"
          f" {at_share(row, high)['error_pct']:+.1f}%), as priced (its capacity_factor cell"
          f" {row.model.capacity_factor:.2f}) {predict(row)['error_pct']:+.1f}%")


if __name__ == "__main__":
    main()
