"""The routed experts' element-wise work outside their fused kernels: a clamped gated activation's clamps and cat
(Transformer.glu_clamp, gpt-oss's) and Megatron-Core's FC2 bias loop over the local experts
(Framework.expert_bias_loop), each against a hand count of the passes the code makes."""

import dataclasses

import numpy as np
import pytest

from costmodel import InputError, StrategyTable, Transformer, cluster_preset, evaluate, model_preset
from costmodel._experts import moe_layer_costs
from costmodel._layer_compute import hbm_s, layer_costs
from costmodel._model_files import from_hf_config
from costmodel._reference import evaluate_row
from sweep._rundir import model_from_dict, model_to_dict
from tests.test_sliding_window import GPT_OSS_120B

OSS = model_preset("gpt-oss-120b")
H100 = cluster_preset("h100x64")


def _moe(model, bias_loop):
    one = np.array([1.0])
    lc = layer_costs(model, H100, one, one, one, np.array([False]), H100.gpu.peak_flops[0])
    return moe_layer_costs(model, H100, lc, one, np.array([False]), np.array([8.0]), H100.gpu.peak_flops[0], False,
                           bias_loop=bias_loop)


def test_clamp_and_bias_loop_passes_by_hand():
    """gpt-oss-120b at its 4096 tokens, b 1, tp 1, ep 8: each rank's 16 experts take 4 x 4096 = 16384 copies, the
    expert width 2880 and h 2880. The clamp forward reads and writes each half of FC1's 2 x 2880-wide output and the
    cat reads and writes it whole: 8 x 16384 x 2880 elements; backward the clamps' gradients, 3 a half: 6 x 16384 x
    2880. The bias loop forward writes b p (1), adds it to the FC2 output (read 2, write 1) and concatenates (2): 6 x
    16384 x 2880; backward the split's cat (2) and two products reduced (3 each): 8 x 16384 x 2880. In 16 bits:
    forward (8 + 6) x 16384 x 2880 x 2 B = 1.3212 GB, backward (6 + 8) x ... the same; 3 + 2 x 16 + 1 = 36 kernels
    more a forward, 6 launch units of 6. The recomputed activation (moe_act) runs the clamp again: 8 x 16384 x 2880 x
    2 B."""
    plain = _moe(dataclasses.replace(OSS, glu_clamp=None), False)
    both = _moe(OSS, True)
    nbytes = 14 * 16384 * 2880 * 2
    assert nbytes == 1_321_205_760
    for key in ("xcast_f", "xcast_b"):
        np.testing.assert_allclose(both[key] - plain[key], hbm_s(nbytes, H100.gpu), rtol=1e-12)
    np.testing.assert_allclose(both["act_f"] - plain["act_f"], hbm_s(8 * 16384 * 2880 * 2, H100.gpu), rtol=1e-12)
    np.testing.assert_allclose((both["overhead"] - plain["overhead"]) / (H100.gpu.kernel_overhead_s * 2.0 * 0.5),
                               36 / 6, rtol=1e-12)
    # the loop only where the framework runs it and the experts have biases
    unbiased = _moe(dataclasses.replace(OSS, glu_clamp=None, bias=False), True)
    np.testing.assert_allclose(unbiased["xcast_f"], _moe(dataclasses.replace(OSS, glu_clamp=None, bias=False),
                                                         False)["xcast_f"], rtol=1e-12)


@pytest.mark.parametrize("framework", ["megatron-core", "megatron-core-deepep-a2a-overlap", "fsdp2"])
def test_the_reference_prices_them_alike(framework):
    table = StrategyTable.from_columns(dp=16, tp=1, pp=4, ep=8, micro_batch=1, global_batch=1280,
                                       recompute=["none", "selective", "full"], zero_stage=1,
                                       schedule="interleaved" if "overlap" in framework else "1f1b",
                                       vpp=3 if "overlap" in framework else 1)
    vec = evaluate(OSS, H100, table, framework=framework)
    for i in range(len(table)):
        ref = evaluate_row(OSS, H100, table.row(i), framework=framework)
        assert vec["step_time_s"][i] == pytest.approx(ref["step_time_s"], rel=1e-9)
        assert vec["compute_s"][i] == pytest.approx(ref["compute_s"], rel=1e-9)
        assert vec["mem_total_bytes"][i] == pytest.approx(ref["mem_total_bytes"], rel=1e-9)


def test_glu_clamp_is_read_checked_and_kept():
    model = from_hf_config(GPT_OSS_120B, "gpt-oss-120b")  # no swiglu_limit: GptOssConfig's default
    assert model.glu_clamp == 7.0 and OSS.glu_clamp == 7.0
    assert from_hf_config({**GPT_OSS_120B, "swiglu_limit": 5}, "x").glu_clamp == 5.0
    with pytest.raises(InputError, match="swiglu_limit: expected a number > 0"):
        from_hf_config({**GPT_OSS_120B, "swiglu_limit": "7"}, "x")
    dense = dict(name="d", layers=2, hidden=64, heads=4, seq_len=128, vocab=100, activation="swiglu", norm="rmsnorm")
    with pytest.raises(InputError, match="model.glu_clamp: expected null but on an MoE model"):
        Transformer(**dense, glu_clamp=7.0)
    with pytest.raises(InputError, match="model.glu_clamp: expected a number > 0"):
        dataclasses.replace(OSS, glu_clamp=0.0)
    assert model_from_dict(model_to_dict(OSS)) == OSS
    assert "glu_clamp" not in model_to_dict(model_preset("llama3-8b"))  # a model without one as before


def test_clamp_memory_by_hand():
    """Without recompute each MoE layer keeps a second 16-bit copy of FC1's output, the cat's (the clamps keep their
    inputs, FC1's output, which the fused kernel kept anyway): 2 x 2880 elements x 2 B = 4 B an element of the expert
    width a copy. gpt-oss-120b at pp 1, micro-batch 1, ep 8: 16384 copies a layer (4 experts x 4096 tokens), 36
    layers in flight: 36 x 16384 x 4 x 2880 = 6.79 GB. Recomputing the activation (moe_act) keeps none of it; one
    layer's, 16384 x 4 x 2880, is held while that layer is rebuilt."""
    kw = dict(dp=64, tp=1, pp=1, ep=8, micro_batch=1, global_batch=64, zero_stage=1)
    plain = dataclasses.replace(OSS, glu_clamp=None)
    none = StrategyTable.from_columns(**kw, recompute="none")
    act = StrategyTable.from_columns(**kw, recompute="selective", recompute_modules=["moe_act"])
    for table, extra in ((none, 36 * 16384 * 4 * 2880), (act, 16384 * 4 * 2880)):
        a = evaluate(OSS, H100, table, framework="megatron-core")["mem_activations_bytes"][0]
        b = evaluate(plain, H100, table, framework="megatron-core")["mem_activations_bytes"][0]
        assert a - b == pytest.approx(extra, rel=1e-12)
        ref = evaluate_row(OSS, H100, table.row(0), framework="megatron-core")["mem_activations_bytes"]
        assert ref == pytest.approx(a, rel=1e-9)
