"""Context parallelism by all-gathered K and V (Framework.cp_all_gather; the llama3-fsdp profile, after the Llama 3
paper's Sec. 3.3.2): each layer's forward all-gathers the cp group's K and V, exposed; the backward gathers them again
and reduce-scatters their gradients, exposed. Against hand calculations."""

import dataclasses

import numpy as np
import pytest

from costmodel import StrategyTable, cluster_preset, evaluate, framework_preset, model_preset
from costmodel._layer_terms import framework_terms, shape_terms
from costmodel._reference import evaluate_row

LLAMA3 = framework_preset("llama3-fsdp")
NO_GATHER = dataclasses.replace(LLAMA3, name="llama3-fsdp-no-gather", cp_all_gather=False)


def _layer(cp, seq, fw, t=8, bw=40e9, lat=10e-6):
    """One Llama 3 405B layer's shape terms at tp ``t``, cp ``cp``, micro-batch 1, on a given cp link, under ``fw``."""
    model = dataclasses.replace(model_preset("llama3-405b"), seq_len=seq)
    cl = cluster_preset("h100x1024")
    n = np.array([1])
    sh = shape_terms(model, cl, n, n * t, np.array([cp]), np.array([True]), cl.gpu.peak_flops[0],
                     cp_link=(np.array([bw]), np.array([lat])), peak16=cl.gpu.peak_flops[0])
    return sh, framework_terms(fw, model, sh, n * t, np.array([True]), np.array([0]))


def test_the_gather_and_the_reduce_scatter_are_exposed_by_hand():
    """Llama 3 405B (hk 1,024), tp 8, cp 4 at 32,768 tokens: 8,192 a rank, its K and V 2 x 8,192 x 128 = 2,097,152
    elements, 4,194,304 bytes. The all-gather brings the other three ranks' over a 40 GB/s, 10 us link: 3 x 4,194,304
    / 40e9 + 3 x 10e-6 = 344.5728 us, all of it exposed however long the attention; backward the gather again and the
    gradients' reduce-scatter, as many bytes: 689.1456 us."""
    _, terms = _layer(4, 32768, LLAMA3)
    one = 3 * 4_194_304 / 40e9 + 3 * 10e-6
    np.testing.assert_allclose(terms["cp_fwd"], one, rtol=1e-12)
    np.testing.assert_allclose(terms["cp_bwd"], 2 * one, rtol=1e-12)
    # the layer's other terms are the profile's without the gather
    _, off = _layer(4, 32768, NO_GATHER)
    for key in ("cast_f", "cast_b", "attn", "elem"):
        np.testing.assert_array_equal(terms[key], off[key])


def test_without_context_parallelism_nothing_changes():
    _, terms = _layer(1, 8192, LLAMA3)
    _, off = _layer(1, 8192, NO_GATHER)
    for key in ("cp_fwd", "cp_bwd", "cast_f", "cast_b"):
        np.testing.assert_array_equal(terms[key], off[key])
    assert terms["cp_fwd"][0] == terms["cp_bwd"][0] == 0.0


def test_only_the_llama3_profile_gathers():
    assert LLAMA3.cp_all_gather and not any(LLAMA3.ring_attention_bytes)
    assert not framework_preset("fsdp2").cp_all_gather and not framework_preset("megatron-core").cp_all_gather


@pytest.mark.parametrize("c", [dict(cp=2, recompute="full"), dict(cp=4, recompute="none", pp=2, schedule="1f1b")],
                         ids=["cp2-full", "cp4-pp2"])
def test_the_scalar_reference_prices_it_alike(c):
    model = dataclasses.replace(model_preset("llama3-8b"), seq_len=32768)
    cols = {"dp": 2, "tp": 2, "pp": 1, "micro_batch": 1, "global_batch": 8, "zero_stage": 1,
            "sequence_parallel": True, **c}
    gpus = cols["dp"] * cols["tp"] * cols["pp"] * cols["cp"]
    table = StrategyTable.from_columns(**cols)
    cl = cluster_preset(f"h100x{gpus}")
    vec = evaluate(model, cl, table, framework=LLAMA3)
    ref = evaluate_row(model, cl, table.row(0), framework=LLAMA3)
    for k in ("step_time_s", "cp_comm_s", "compute_s", "recompute_s", "bubble_s"):
        assert vec[k][0] == pytest.approx(ref[k], rel=1e-9), k
    assert vec["cp_comm_s"][0] > 0.0
