"""Spaces derived from the model and the cluster: balanced and lighter-ends
pipeline stages, pipeline degrees from the layer count, dp the largest that fits (idle GPUs),
ZeRO 0-3, and every preset model with feasible plans on every preset cluster that holds it."""

from __future__ import annotations

import numpy as np
import pytest

from costmodel import MODEL_PRESETS, StrategyTable, cluster_preset, evaluate, model_preset
from costmodel._memory import memory_screen
from search import Space, default_space
from search._space import balanced_stages, pipeline_degrees

PRESET_CLUSTERS = ("dgx-h100-1024", "dgx-a100-1024", "selene-3072", "seed000-16")
# Bytes of model state per parameter in the cost model's accounting (costmodel._dtypes:
# WEIGHT_BYTES 2 + GRAD_BYTES 4 + OPTIM_BYTES 12, mixed-precision Adam), and the HBM per GPU the
# runtime keeps (costmodel._memory_terms.RESERVED_BYTES).
STATE_BYTES_PER_PARAM = 2 + 4 + 12
RESERVED_BYTES = 2.0e9


def test_balanced_stages_hand_counts():
    # Llama 3 405B: 126 layers on 16 stages: 126 = 16 x 8 - 2, the two ends one layer lighter.
    assert balanced_stages(126, [16], [0])[0].tolist() == [7] + [8] * 14 + [7]
    # Megatron 530B: 105 = 35 x 3.
    assert balanced_stages(105, [35], [0])[0].tolist() == [3] * 35
    # Ends two layers lighter: 105 + 2 = 107 = 35 x 3 + 2; the two extra layers on the last two
    # interior stages, then one off each end: 2, 3 x 31, 4, 4, 2.
    assert balanced_stages(105, [35], [1])[0].tolist() == [2] + [3] * 31 + [4, 4] + [2]
    # e = 2 on 96 layers, 8 stages: 100 = 8 x 12 + 4; the 4 extra layers on the interior stages
    # from the back (6, 5, 4, 3): 12 12 12 13 13 13 13 12, then 2 off each end.
    assert balanced_stages(96, [8], [2])[0].tolist() == [10, 12, 12, 13, 13, 13, 13, 10]
    # One stage holds every layer whatever e; zero past pp.
    assert balanced_stages(126, [1, 2], [2, 0]).tolist() == [[126, 0], [63, 63]]


@pytest.mark.parametrize("layers", [32, 80, 96, 105, 126])
def test_balanced_stages_sum_to_the_layers(layers):
    for p in pipeline_degrees(layers):
        for e in (0, 1, 2):
            sl = balanced_stages(layers, [p], [e])[0]
            assert sl.sum() == layers and np.all(sl[p:] == 0)
            inner = sl[1:p - 1]
            assert inner.size == 0 or inner.max() - inner.min() <= 1  # interior balanced


def test_pipeline_degrees_from_the_layer_count():
    # 105 layers, pp <= 52: divisors of 105 (1 3 5 7 15 21 35), of 107 and 109 (primes: 1), and
    # the powers of two (1 2 4 8 16 32).
    assert pipeline_degrees(105) == [1, 2, 3, 4, 5, 7, 8, 15, 16, 21, 32, 35]
    # 126 layers, pp <= 63: divisors of 126 (1 2 3 6 7 9 14 18 21 42 63), of 128 (powers of two
    # up to 32 here), of 130 (1 2 5 10 13 26).
    assert pipeline_degrees(126) == [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 13, 14, 16, 18, 21, 26, 32, 42, 63]


@pytest.mark.parametrize("model_name, cluster_name, batch, degrees, stages", [
    # Megatron-Turing NLG 530B: tp 8 x pp 35 = 280 GPUs a replica; 3072 // 280 = 10 fit, the
    # largest dp <= 10 dividing 1536 is 8: 2240 GPUs used, 832 idle.
    ("megatron-530b", "selene-3072", 1536, dict(dp=8, tp=8, pp=35), [3] * 35),
    # Llama 3 405B's 16 stages of 7 / 8 x 14 / 7 layers, tp 8: 1024 / 128 = 8 replicas.
    ("llama3-405b", "dgx-h100-1024", 2048, dict(dp=8, tp=8, pp=16), [7] + [8] * 14 + [7]),
])
def test_published_plans_are_points_of_the_default_space(model_name, cluster_name, batch, degrees, stages):
    model, cluster = model_preset(model_name), cluster_preset(cluster_name)
    space = default_space(model, cluster, batch)
    t = StrategyTable.from_columns(**degrees, global_batch=batch, micro_batch=1, schedule="1f1b", recompute="full",
                                   sequence_parallel=True, zero_stage=1, stage_layers=np.array([stages]))
    digits = space.digits_from_table(t)
    assert np.all(digits >= 0) and space.valid(digits)[0]
    back = space.table(digits)
    assert back["dp"][0] == degrees["dp"] and back.stage_layers[0, : degrees["pp"]].tolist() == stages
    assert evaluate(model, cluster, t)["feasible"][0]


def test_dp_is_the_largest_that_fits():
    model, cluster = model_preset("megatron-530b"), cluster_preset("selene-3072")
    space = Space.from_options(model, cluster, global_batch=1536, schedule=["1f1b"], recompute=["full"],
                               sequence_parallel=[True], zero_stage=[1], vpp=[1])
    _, t = space.rows(0, space.size)
    assert len(t) > 0
    G, B = 3072, 1536
    assert np.any(t.num_gpus < G)  # idle GPUs where no whole replica more fits
    for dp, tp, pp, cp, b in set(zip(t["dp"], t["tp"], t["pp"], t["cp"], t["micro_batch"], strict=True)):
        per = tp * pp * cp
        assert dp * per <= G and B % (dp * b) == 0
        # no larger dp fits and divides the batch (checked one by one, not by the space's arithmetic)
        assert not any(B % (d * b) == 0 for d in range(dp + 1, G // per + 1))


def test_zero_stages_with_pipelines_follow_the_cost_model():
    """ZeRO-1 (distributed optimizer) with any pp; ZeRO-2/3 where costmodel's feasibility prices
    them (pp 1 at COST_MODEL_VERSION 3)."""
    model, cluster = model_preset("llama3-70b"), cluster_preset("dgx-h100-1024")
    _, t = default_space(model, cluster, 1024).rows(0, 10**9)
    z, pp = t["zero_stage"], t["pp"]
    assert np.any((z == 1) & (pp > 1)) and np.any((z == 3) & (pp == 1)) and np.any((z == 2) & (pp == 1))
    assert not np.any((z >= 2) & (pp > 1))


def _state_bytes(model) -> float:
    params = model.layers * model.layer_params() + model.embedding_params() + model.head_params()
    return STATE_BYTES_PER_PARAM * params


def test_every_preset_model_has_feasible_plans_on_every_preset_cluster_that_holds_it():
    """"Big enough": the cluster's HBM, less the runtime's reserve, holds the model state (weights,
    gradients, Adam) once with a tenth to spare (for activations and buffers). The memory screen finds the
    points that fit (it equals evaluate's verdict, see
    test_search_screen.py) and a few of them are evaluated to confirm."""
    checked = 0
    for name in MODEL_PRESETS:
        model = model_preset(name)
        if model.is_moe:  # the evaluators refuse MoE models until expert layers are priced
            continue
        for cname in PRESET_CLUSTERS:
            cluster = cluster_preset(cname)
            if 1.1 * _state_bytes(model) > cluster.num_gpus * (cluster.gpu.hbm_bytes - RESERVED_BYTES):
                continue
            space = default_space(model, cluster, 1536)
            idx = space.valid_indices(0, space.size)
            # every 64th valid point first (a feasible plan is rarely that rare), the whole space where none fits
            fits = np.zeros(0, dtype=np.int64)
            for step in (64, 1):
                sub = space.table(space.digits_of(idx[::step]))
                _, reason = memory_screen(model, cluster, sub)
                if (fits := np.flatnonzero(reason == 0)).size:
                    break
            t = sub
            assert fits.size, f"{name} on {cname}: no feasible plan among {len(idx):,} valid"
            m = evaluate(model, cluster, t.take(fits[:: max(fits.size // 8, 1)]))
            assert np.all(m["feasible"]), f"{name} on {cname}"
            checked += 1
    # The 11 dense presets on the 3 clusters of 1024-3072 GPUs (>= 1024 x 83.9 GB = 86 TB; the 1T model's
    # state is 18 TB); on seed000-16 (16 A100s of 81,920 MiB less 2 GB: 1.34 TB usable) the MLP (4.3e9
    # params: 77 GB), llama3-8b (145 GB), megatron-22b (397 GB) and qwen3-32b (32.8e9 x 18 B = 590 GB), not
    # llama3-70b (70.6e9 x 18 B = 1.27 TB, 1.40 TB with the tenth) nor qwen2.5-72b (1.31 TB, 1.44 TB).
    assert checked == 11 * 3 + 4
