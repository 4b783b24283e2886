"""The bench rows: a fixed random draw of strategies for GPT-3 175B on h100x1024 (or an MoE preset,
with an ep column), the rows `plansweep bench` times and the benchmarks compare trees on."""

from __future__ import annotations

import numpy as np

from costmodel._strategy import StrategyTable

BENCH_SPACE = (
    "GPT-3 175B on h100x1024, rows drawn uniformly from: dp in {1,2,4,8,16,32}, tp in {1,2,4,8}, "
    "pp in {1,2,4,8,16,32}, cp in {1,2}, micro_batch in {1,2,4,8}, global_batch 1536, "
    "schedule/vpp in {gpipe,1f1b,zb-h1,zb-h2}/1 and interleaved/{2,3,4}, recompute x3, sequence_parallel x2, "
    "zero_stage 0-3, precision bf16/fp8, overlap_dp x2; every output column"
)


def bench_table(n: int, seed: int = 0, experts: int = 1) -> StrategyTable:
    """The bench rows; for an MoE model of ``experts`` experts an ep column too, drawn from its
    divisors up to 64 (drawn after every other column, so the dense rows are the same rows)."""
    rng = np.random.default_rng(seed)
    inter = rng.random(n) < 0.4
    table = StrategyTable.from_columns(
        dp=rng.choice([1, 2, 4, 8, 16, 32], n), tp=rng.choice([1, 2, 4, 8], n), pp=rng.choice([1, 2, 4, 8, 16, 32], n),
        cp=rng.choice([1, 2], n), micro_batch=rng.choice([1, 2, 4, 8], n), global_batch=1536,
        schedule=np.where(inter, 2, rng.choice([0, 1, 3, 4], n)), vpp=np.where(inter, rng.choice([2, 3, 4], n), 1),
        recompute=rng.integers(0, 3, n), sequence_parallel=rng.random(n) < 0.5, zero_stage=rng.integers(0, 4, n),
        precision=rng.choice([0, 2], n), overlap_dp=rng.random(n) < 0.5)
    if experts == 1:
        return table
    ep = rng.choice([e for e in (1, 2, 4, 8, 16, 32, 64) if experts % e == 0], n)
    return StrategyTable({**table.columns, "ep": ep.astype(np.int64)})
