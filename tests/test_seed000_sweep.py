"""Seed 000's grid search end to end: `plansweep sweep` writes Parquet, `plansweep plot`
draws seed 000's figures from it, and the numbers make sense against the seed's setup.

The seed-000 problem: an MLP of 64 layers, 8192 wide, batch 8192, on 16 GPUs
linked all-to-all at 200 Gb/s; data, horizontal and pipeline degrees (powers of two) and
micro-batch counts. Here with the degrees allowed to use fewer GPUs (--partial-gpus) so the
isolated-scaling figures (one degree varied, the others 1) come from the same run, and ZeRO 0/1
(the seed's simulator has no memory limit; ours does, and pure data parallelism of 4.3e9
parameters fits an 80 GB GPU only with the optimizer state sharded).
"""

from __future__ import annotations

import os
import subprocess
import sys

import matplotlib.image as mpimg
import numpy as np
import pandas as pd
import pytest

import costmodel

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
POW2 = "1,2,4,8,16"
MICROBATCHES = (1, 2, 4, 8, 16, 32)
SEED000_SWEEP = (
    "sweep", "--model", "seed000-mlp", "--cluster", "seed000-16", "--dp", POW2, "--tp", POW2, "--pp", POW2,
    "--microbatches", ",".join(map(str, MICROBATCHES)), "--global-batch", "8192", "--schedule", "gpipe",
    "--recompute", "none", "--sequence-parallel", "false", "--zero-stage", "0,1", "--partial-gpus", "--light-ends", "0",
    "--keep", "all", "--no-progress", "--framework", "generic",  # generic runs the seed's GPipe grid
)
FIGURES = ("throughput_vs_degrees", "grid_search", "data_parallelism", "horizontal_parallelism",
           "pipeline_parallelism")
LAYERS, WIDTH, BATCH = 64, 8192, 8192
# Megatron's 18 bytes per parameter (16-bit weight, fp32 gradient, fp32 master + Adam moments).
BYTES_PER_PARAM = 18


def cli(*argv: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": ROOT, "MPLBACKEND": "Agg"}
    env.pop("RAY_ADDRESS", None)
    return subprocess.run([sys.executable, "-m", "cli", *argv], capture_output=True, text=True, env=env,
                          cwd=ROOT, timeout=600)


def _nontrivial_png(path) -> None:
    img = mpimg.imread(path)
    assert img.shape[0] > 300 and img.shape[1] > 500
    assert np.unique((img[..., :3].reshape(-1, 3) * 255).astype(np.uint8), axis=0).shape[0] > 50


@pytest.fixture(scope="module")
def seed_run(tmp_path_factory):
    run = tmp_path_factory.mktemp("seed000") / "run"
    out = cli(*SEED000_SWEEP, "--in-process", "--out", str(run))
    assert out.returncode == 0, out.stderr[-2000:]
    return run, pd.read_parquet(run / "results")


def test_seed000_grid_is_the_seeds(seed_run):
    _, df = seed_run
    # Degrees 2^a, 2^b, 2^c with a + b + c <= 4 (at most 16 GPUs): C(4 + 3, 3) = 35 triples,
    # times 6 micro-batch counts and 2 ZeRO stages.
    assert len(df) == 35 * 6 * 2
    full = df[df.dp * df.tp * df.pp == 16]
    # The seed's 15 (d, h, p) factorisations of 16 (a + b + c = 4: C(6, 2) = 15).
    assert len(full[["dp", "tp", "pp"]].drop_duplicates()) == 15
    assert set(df.global_batch) == {BATCH} and set(df.microbatches) == set(MICROBATCHES)
    assert (df.dp * df.micro_batch * df.microbatches == BATCH).all()


def test_seed000_memory_makes_sense(seed_run):
    _, df = seed_run
    params = LAYERS * WIDTH * WIDTH  # 64 weight matrices of 8192 x 8192, no bias
    hbm = costmodel.cluster_preset("seed000-16").gpu.hbm_bytes  # A100 80GB: 81,920 MiB = 80 GiB
    assert hbm == 81920 * 2**20
    # One GPU holding everything: 18 B/param = 72 GiB, plus at least one 16-bit 8192-wide input
    # per layer for each of the 8192 samples (8 GiB), plus the 2 GB the framework keeps outside
    # the model > 80 GiB: infeasible, out of memory.
    assert BYTES_PER_PARAM * params + LAYERS * BATCH * WIDTH * 2 + 2e9 > hbm
    single = df[(df.dp == 1) & (df.tp == 1) & (df.pp == 1)]
    assert len(single) == 12 and not single.feasible.any() and set(single.reason) == {"out_of_memory"}
    assert set(df.reason[~df.feasible]) == {"out_of_memory"}  # nothing else is wrong with the grid


def test_seed000_winner_makes_sense(seed_run):
    _, df = seed_run
    ok = df[df.feasible]
    best = ok.sort_values("samples_per_s", ascending=False).iloc[0]
    # Links of 25 GB/s: data parallelism all-reduces 8.6 GB of 16-bit gradients per step and
    # tensor parallelism all-reduces activations in every layer, while a pipeline hands on only
    # one b x 8192 activation per micro-batch and stage. So the deepest pipeline, with the most
    # micro-batches (smallest GPipe bubble, (p - 1) / (m + p - 1)), wins.
    assert (best.dp, best.tp, best.pp, best.microbatches) == (1, 1, 16, 32)
    assert best.pp_comm_s < 0.1 * best.step_time_s
    # Upper bound: 16 GPUs at the best GEMM efficiency, GPipe's m / (m + p - 1) busy fraction.
    gpu = costmodel.cluster_preset("seed000-16").gpu
    flops_per_sample = 6 * LAYERS * WIDTH * WIDTH  # forward 2, backward 4 per weight and sample
    peak = gpu.peak_flops[costmodel.PRECISIONS.index("bf16")] * gpu.gemm_eff_max
    m, p = 32, 16
    assert best.samples_per_s <= 16 * peak / flops_per_sample * m / (m + p - 1)
    # The same throughput is in samples/s and tokens/s (an MLP sample is one token).
    assert best.tokens_per_s == best.samples_per_s
    # Isolated pipeline scaling (the seed's pipeline_parallelism figure, 8 micro-batches):
    # p m / (m + p - 1) grows with p, and the hand-offs are small: throughput rises with p.
    iso = ok[(ok.dp == 1) & (ok.tp == 1) & (ok.microbatches == 8)].groupby("pp").samples_per_s.max()
    assert list(iso.index) == [2, 4, 8, 16] and np.all(np.diff(iso.to_numpy()) > 0)


def test_plot_draws_seed000_figures_from_the_sweep(seed_run, tmp_path):
    run, _ = seed_run
    out = cli("plot", str(run), "--out", str(tmp_path / "fig"))
    assert out.returncode == 0, out.stderr
    for name in FIGURES:
        path = tmp_path / "fig" / f"{name}.png"
        assert f"wrote {path}" in out.stdout
        _nontrivial_png(path)
    assert "not drawn" not in out.stdout
    show = cli("show", str(run), "--top", "1")
    assert show.returncode == 0 and "420 rows" in show.stdout


@pytest.mark.slow
def test_seed000_sweep_on_ray_equals_in_process(seed_run, tmp_path):
    run, df = seed_run
    out = cli(*SEED000_SWEEP, "--workers", "2", "--out", str(tmp_path / "ray"))
    assert out.returncode == 0, out.stderr[-2000:]
    ray_df = pd.read_parquet(tmp_path / "ray" / "results")
    a = df.sort_values("grid_index").reset_index(drop=True)
    b = ray_df.sort_values("grid_index").reset_index(drop=True)
    assert a.grid_index.tolist() == b.grid_index.tolist()
    np.testing.assert_array_equal(a.samples_per_s.to_numpy(), b.samples_per_s.to_numpy())
    # (the figures are drawn from these rows: test_plot_draws_seed000_figures_from_the_sweep)
