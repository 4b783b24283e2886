"""FSDP1's flat gradient (Framework.pre_reduce_copy_bytes): every micro-batch's backward, autograd concatenates the
views' 16-bit gradients into each unit's unsharded flat gradient before the reduce-scatter (read 2, write 2 bytes an
element), on the computation stream; against a hand calculation on MPT 7B."""

import dataclasses

import pytest

from costmodel import FRAMEWORKS, StrategyTable, Transformer, cluster_preset, evaluate, model_preset
from costmodel._evaluate import stage_breakdown
from costmodel._reference import evaluate_row

# MPT 7B as the LLM Foundry H100 rows read it (tests/data/validation/published_runs.csv, mpt-7b-h100-128gpu-s2048:
# bias, learned positions and tied embeddings left at the model's defaults)
MPT7 = Transformer(name="mpt-7b", layers=32, hidden=4096, heads=32, ffn_hidden=16384, seq_len=2048, vocab=50368)
CLUSTER = cluster_preset("h100x128")
FOUNDRY = FRAMEWORKS["llm-foundry"]
NO_COPY = dataclasses.replace(FOUNDRY, name="llm-foundry-no-copy", pre_reduce_copy_bytes=0.0)

# h = 4096, f = 16384, V = 50368, s = 2048. A layer: attention 4 h^2 + 4 h (QKV and output biases), MLP 2 h f + f + h,
# two LayerNorms 2 x 2 h: 67,108,864 + 16,384 + 134,217,728 + 20,480 + 16,384 = 201,379,840; 32 layers 6,444,154,880;
# the embedding (V + s) h = 214,695,936 (tied: the head is its weight), the final norm 2 h = 8,192: 6,658,859,008
# parameters, every one in one GPU's unsharded units in turn (tp = pp = 1).
PARAMS = 32 * 201_379_840 + 214_695_936 + 8_192
# 4 bytes each a micro-batch (bf16 gradients: read 2, write 2) at the H100's 3.35e12 B/s x hbm_eff 0.765 =
# 2.56275e12 B/s: 26,635,436,032 / 2.56275e12 = 10.393 ms a micro-batch.
COPY_S = PARAMS * 4 / (3.35e12 * 0.765)


def _cols(**c):
    return {"dp": 128, "tp": 1, "pp": 1, "micro_batch": 6, "global_batch": 768, "zero_stage": 3, "recompute": "none",
            **c}


def _one(fw, model=MPT7, **c):
    return evaluate(model, CLUSTER, StrategyTable.from_columns(**_cols(**c)), framework=fw)


def test_the_hand_count_is_the_models():
    assert PARAMS == MPT7.num_params() == 6_658_859_008
    assert COPY_S == pytest.approx(0.010393, rel=1e-4)


@pytest.mark.parametrize("global_batch", [768, 3072])
def test_each_microbatch_backward_copies_the_whole_unsharded_gradient(global_batch):
    # m = global_batch / (dp x micro_batch) = 1 and 4 micro-batches: m x 10.154 ms more compute, and more step (the
    # exchange stays hidden under the units' compute but the root's and block 0's, which do not move)
    m = global_batch // (128 * 6)
    a, b = _one(FOUNDRY, global_batch=global_batch), _one(NO_COPY, global_batch=global_batch)
    assert a["compute_s"][0] - b["compute_s"][0] == pytest.approx(m * COPY_S, rel=1e-6)
    assert a["step_time_s"][0] - b["step_time_s"][0] == pytest.approx(m * COPY_S, rel=1e-6)


def test_tensor_and_pipeline_parallelism_divide_it():
    # tp 2, pp 2: a stage holds 16 layers / 2 and the embedding / 2 (first) or the final norm / 2 (last). The
    # bottleneck stage is the last (the head's GEMM over V outweighs the embedding's lookup, and the first stage's
    # larger copy, 2.68 ms, does not change that); its compute over one micro-batch (m = 192 / (32 x 6) = 1) grows by
    # its own share: (16 x 201,379,840 + 8,192) / 2 x 4 bytes = 6,444,171,264 / 2.56275e12 = 2.5146 ms
    c = dict(tp=2, pp=2, dp=32, global_batch=192, schedule="1f1b")
    a, b = _one(FOUNDRY, **c), _one(NO_COPY, **c)
    last = (16 * 201_379_840 + 8_192) / 2 * 4 / (3.35e12 * 0.765)
    assert a["compute_s"][0] - b["compute_s"][0] == pytest.approx(last, rel=1e-6)
    # each stage's backward, not its forward or weight-gradient pass: the first (16 x 201,379,840 + 214,695,936) / 2
    # x 4 = 6,873,546,752 bytes, 2.6821 ms; the last 2.5146 ms
    first = (16 * 201_379_840 + 214_695_936) / 2 * 4 / (3.35e12 * 0.765)
    sa, sb = (stage_breakdown(MPT7, CLUSTER, StrategyTable.from_columns(**_cols(**c)), fw) for fw in (FOUNDRY, NO_COPY))
    assert sa["backward_s"][0] - sb["backward_s"][0] == pytest.approx([first, last], rel=1e-6)
    for k in ("forward_s", "weight_grad_s"):
        assert list(sa[k][0]) == list(sb[k][0]), k


def test_only_the_llm_foundry_profiles_and_dense_models_pay_it():
    for name, fw in FRAMEWORKS.items():
        assert fw.pre_reduce_copy_bytes == (4.0 if name.startswith("llm-foundry") else 0.0), name
    moe, cl = model_preset("mixtral-8x7b"), cluster_preset("h100x64")
    t = StrategyTable.from_columns(dp=8, tp=1, pp=1, ep=8, micro_batch=1, global_batch=64, zero_stage=3)
    assert (evaluate(moe, cl, t, framework=FOUNDRY)["step_time_s"][0]
            == evaluate(moe, cl, t, framework=NO_COPY)["step_time_s"][0])


@pytest.mark.parametrize("fw", [FOUNDRY, NO_COPY], ids=lambda f: f.name)
@pytest.mark.parametrize("c", [{}, dict(tp=2, pp=2, dp=32, global_batch=192, schedule="1f1b")], ids=["dp", "tp-pp"])
def test_the_scalar_reference_prices_it_alike(fw, c):
    ref = evaluate_row(MPT7, CLUSTER, StrategyTable.from_columns(**_cols(**c)).row(0), framework=fw)
    vec = _one(fw, **c)
    for k in ("step_time_s", "compute_s", "bubble_s"):
        assert vec[k][0] == pytest.approx(ref[k], rel=1e-9), (fw.name, k)
