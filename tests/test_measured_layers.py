"""The cost model's per-layer activation bytes against blocks measured on an H200 (tests/data/
h200_modern_layers_measured.csv: Llama-3 8B / 70B / 405B and Mixtral 8x7B blocks written the way torchtitan writes
them, bf16 under FlashAttention-2 and cuDNN attention, fp8 through torchao's Float8Linear, recompute none / per-op
selective / full, micro-batches 1-4, 2k-8k tokens; act_bytes is what autograd holds after the forward, from
torch.cuda.memory_allocated deltas). Each row is priced under the profile whose layer code the blocks copy
(fsdp2-eager), one tensor-parallel rank without sequence parallelism."""

from __future__ import annotations

import csv
import dataclasses
import os

import numpy as np
import pytest

from costmodel import cluster_preset, model_preset
from costmodel._frameworks import FRAMEWORKS
from costmodel._hardware import PRECISIONS
from costmodel._layer_terms import framework_terms, shape_terms
from costmodel._memory_terms import activation_bytes

DATA = os.path.join(os.path.dirname(__file__), "data", "h200_modern_layers_measured.csv")
PROFILE = "fsdp2-eager"
MiB = 2**20


def measured_rows() -> list[dict]:
    with open(DATA, newline="") as fh:
        return list(csv.DictReader(line for line in fh if not line.startswith("#")))


def model_kept(row: dict) -> float:
    """What the model says the row's block keeps per micro-batch (its input included where a checkpoint keeps it),
    less the all-to-alls' saved results, which a one-GPU block (no all-to-all run) cannot hold."""
    model = dataclasses.replace(model_preset(row["model"]), seq_len=int(row["seq"]))
    fw, cluster = FRAMEWORKS[PROFILE], cluster_preset("h200x8")
    b, t, ep = (np.array([int(row[c])]) for c in ("micro_batch", "tp", "ep"))
    sp, prec = np.array([False]), np.array([PRECISIONS.index(row["precision"])])
    moe = (ep, np.array([1]), fw, prec) if model.is_moe else None
    sh = shape_terms(model, cluster, b, t, np.array([1]), sp, cluster.gpu.peak_flops[0], moe=moe)
    ft = framework_terms(fw, model, sh, t, sp, prec)
    pre = "moe_" if model.is_moe else ""
    full, sel = np.array([row["recompute"] == "full"]), np.array([row["recompute"] == "selective"])
    kept, _ = activation_bytes(full, sel, ft[pre + "act_L"], ft[pre + "sel_kept"], ft[pre + "sel_work"], ft["T"],
                               model.hidden, np.array([1]))
    if pre and sel[0]:
        kept = kept - ft["moe_a2a_L"]
    return float(kept[0])


def measured_kept(row: dict) -> int:
    """act_bytes, plus the block's input where a checkpoint keeps it (it was allocated before the forward)."""
    return int(row["act_bytes"]) + (int(row["input_bytes"]) if row["recompute"] != "none" else 0)


def test_the_measured_file_covers_what_it_must():
    rows = measured_rows()
    assert not [r["label"] for r in rows if r["error"] or r["act_bytes"] == ""]
    seen = {(r["block"], r["recompute"], r["attention"], r["precision"]) for r in rows}
    for block in ("dense", "moe"):
        for rc in ("none", "selective", "full"):
            for attn in ("flash", "cudnn"):
                assert (block, rc, attn, "bf16") in seen
    assert {("dense", rc, "flash", "fp8") for rc in ("none", "selective", "full")} <= seen
    assert {int(r["micro_batch"]) for r in rows} == {1, 2, 4} and {int(r["seq"]) for r in rows} == {2048, 4096, 8192}


@pytest.mark.parametrize("row", measured_rows(), ids=lambda r: r["label"])
def test_per_layer_activation_bytes_within_5_percent_of_the_h200_measurement(row):
    assert model_kept(row) == pytest.approx(measured_kept(row), rel=0.05)


def test_a_mixtral_block_under_torchtitans_per_op_policy_by_hand():
    # Mixtral 8x7B, one micro-batch of 2,048 tokens, ep 1: the per-op policy keeps the block's input (T h), wq's
    # output (T h) and wv's (T h / 4: 8 of 32 heads), SDPA's output (T h) and its fp32 logsumexp (4 bytes a head and
    # token), topk's fp32 scores and int64 expert ids (2 a token); wk and wo (the 2nd and 4th products), the router
    # gate and every expert product run again. 2 bytes an element.
    T, h, heads, k = 2048, 4096, 32, 2
    by_hand = 2 * T * (h + h + h // 4 + h) + 4 * T * heads + (4 + 8) * T * k
    assert by_hand / MiB == pytest.approx(52.3, abs=0.05)  # the measured row (52.3 MiB with its input)
    row = next(r for r in measured_rows() if r["label"] == "mixtral-8x7b-ep1-b1-s2048-selective-flash-bf16")
    assert measured_kept(row) == pytest.approx(by_hand, rel=0.002)
    assert model_kept(row) == pytest.approx(by_hand, rel=1e-9)
    # without recompute the block keeps 14 times that: the experts' intermediates dominate
    none = next(r for r in measured_rows() if r["label"] == "mixtral-8x7b-ep1-b1-s2048-none-flash-bf16")
    assert measured_kept(none) > 14 * by_hand


def test_expert_parallel_all_to_all_results_are_kept_under_the_per_op_policy():
    # ep 2: both all-to-alls' results (the k T dispatched copies and the k T combined ones, 2 bytes an element of h)
    # are saved by the policy (all_to_all_single is on its save list), on top of what the one-GPU block measured
    model = dataclasses.replace(model_preset("mixtral-8x7b"), seq_len=2048)
    fw, cluster = FRAMEWORKS[PROFILE], cluster_preset("h200x8")
    one = np.array([1])
    prec = np.array([PRECISIONS.index("bf16")])
    kept = {}
    for ep in (1, 2):
        sh = shape_terms(model, cluster, one, one, one, np.array([False]), cluster.gpu.peak_flops[0],
                         moe=(np.array([ep]), one, fw, prec))
        kept[ep] = float(framework_terms(fw, model, sh, one, np.array([False]), prec)["moe_sel_kept"][0])
    assert kept[2] - kept[1] == pytest.approx(2 * 2 * (2 * 2048) * 4096, rel=1e-9)


def test_fp8_linear_layers_keep_what_bf16_ones_keep_under_the_per_op_policy():
    # torchao's Float8Linear runs aten.mm on its float8 tensors, which the checkpoint's policy sees and counts as a
    # bf16 product; it saves its 16-bit input: the measured fp8 and bf16 rows keep the same bytes
    rows = {r["label"]: r for r in measured_rows()}
    pairs = [(r, rows[r["label"].replace("-fp8", "-bf16")]) for r in rows.values() if r["precision"] == "fp8"]
    assert len(pairs) == 108
    for fp8, bf16 in pairs:
        assert measured_kept(fp8) == pytest.approx(measured_kept(bf16), rel=0.002), fp8["label"]


def test_shared_experts_continue_the_policys_count_by_hand():
    # A small MoE layer with a shared expert (hidden 1024, 16 heads, 4 K/V heads of 64, shared SwiGLU of 1024, 8
    # experts of 512, top-2), one micro-batch of 2,048 tokens, ep 1, tp 1: after wq (saved), wk, wv (saved), wo, the
    # router gate (recomputed, uncounted) and the grouped expert products (uncounted), the shared expert's w1 is the
    # 5th product (saved), w3 the 6th, w2 the 7th (saved)
    from costmodel._layer_compute import recompute_flops_per_token
    from tests.test_moe_pricing import TINY

    T, h, hk, fs, fe, E, k = 2048, 1024, 256, 1024, 512, 8, 2
    fw = FRAMEWORKS[PROFILE]
    one, prec = np.array([1]), np.array([PRECISIONS.index("bf16")])
    model = dataclasses.replace(TINY, seq_len=T)
    cluster = cluster_preset("h100x64")
    sh = shape_terms(model, cluster, one, one, one, np.array([False]), cluster.gpu.peak_flops[0],
                     moe=(one, one, fw, prec))
    ft = framework_terms(fw, model, sh, one, np.array([False]), prec)
    by_hand = 2 * T * (h + h + hk + h) + 2 * T * (fs + h) + 4 * T * 16 + (4 + 8) * T * k
    assert float(ft["moe_sel_kept"][0]) == pytest.approx(by_hand, rel=1e-12)
    re = recompute_flops_per_token(model, np.array([False]), np.array([True]), fw, moe_layer=True)
    assert float(re[0]) == pytest.approx(2 * h * hk + 2 * h * h + 2 * h * fs + 2 * h * E + 2 * 3 * h * k * fe)


def test_eager_torchao_fp8_casts_by_hand():
    # torchao's eager float8 linear (tensorwise): a cast of a 16-bit tensor moves 33 bytes an element (abs: 2 + 2,
    # max: 2, to fp32: 2 + 4, times the scale: 4 + 4, clamp: 4 + 4, to fp8: 4 + 1). Forward: each layer's input and
    # weight; torchtitan's wq, wk, wv each cast the attention norm's output, w1, w3 the MLP norm's. Backward: the
    # output gradient twice and laid out once (2 x 33 + 2), the weight again and laid out (33 + 2), the saved input
    # again and laid out (33 + 2). Llama 3 8B, 2,048 tokens, tp 1.
    from costmodel._layer_compute import fp8_cast_columns, fp8_cast_parts_s

    T, h, q, hk, f = 2048, 4096, 4096, 1024, 14336
    gpu = cluster_preset("h100x8").gpu
    casts = fp8_cast_columns(FRAMEWORKS[PROFILE], np.array([True]))
    af, ab, mf, mb = (float(x[0]) for x in fp8_cast_parts_s(model_preset("llama3-8b"), np.array([float(T)]), 1, gpu,
                                                            casts))
    x_a, w_a, g_a = T * (3 * h + q), h * (q + 2 * hk) + q * h, T * (q + 2 * hk + h)
    x_m, w_m, g_m = T * (2 * h + f), 3 * h * f, T * (2 * f + h)
    rate = gpu.hbm_eff * gpu.hbm_Bps
    assert af == pytest.approx((33 * x_a + 33 * w_a) / rate, rel=1e-12)
    assert ab == pytest.approx((68 * g_a + 35 * w_a + 35 * x_a) / rate, rel=1e-12)
    assert mf == pytest.approx((33 * x_m + 33 * w_m) / rate, rel=1e-12)
    assert mb == pytest.approx((68 * g_m + 35 * w_m + 35 * x_m) / rate, rel=1e-12)


def test_eager_fp8_blocks_priced_slower_than_bf16_ones_as_measured():
    # Without torch.compile, torchao's fp8 blocks ran 1.44x-3.3x slower than the bf16 ones on the H200 (every one of
    # the 108 pairs); the model prices them slower too (its casts' bytes), by less: the eager casts' ~450 small
    # kernels a block's forward and backward, which bind the small shapes, are not priced. With the compiled
    # profile's cast bytes it priced every one faster (0.69x-0.82x)
    rows = {r["label"]: r for r in measured_rows()}
    for fp8 in (r for r in rows.values() if r["precision"] == "fp8"):
        bf16 = rows[fp8["label"].replace("-fp8", "-bf16")]
        measured = float(fp8["fwd_bwd_s"]) / float(bf16["fwd_bwd_s"])
        model = model_layer_s(fp8) / model_layer_s(bf16)
        assert measured > 1.4, fp8["label"]
        assert 1.1 < model <= measured, fp8["label"]


def model_layer_s(row: dict) -> float:
    """The model's compute seconds of one layer forward and backward (with its recompute, no communication) for the
    row on an H200, under the profile, fp8 casts included."""
    from costmodel._hardware import attention_kernel_eff
    from costmodel._layer_compute import fp8_cast_columns
    from costmodel._layer_terms import LAYER_INPUTS, layer_terms

    model = dataclasses.replace(model_preset(row["model"]), seq_len=int(row["seq"]))
    fw, cluster = FRAMEWORKS[PROFILE], cluster_preset("h200x8")
    b, t = np.array([int(row["micro_batch"])]), np.array([int(row["tp"])])
    sp, prec = np.array([False]), np.array([PRECISIONS.index(row["precision"])])
    casts = fp8_cast_columns(fw, prec == PRECISIONS.index("fp8"))
    attn_eff = np.array([attention_kernel_eff(cluster.gpu.name, fw.attention_kernel)])  # as the evaluator passes it
    sh = shape_terms(model, cluster, b, t, np.array([1]), sp, np.asarray(cluster.gpu.peak_flops)[prec], casts=casts,
                     peak16=cluster.gpu.peak_flops[0], attn_eff=attn_eff)
    ft = framework_terms(fw, model, sh, t, sp, prec)
    full, sel = np.array([row["recompute"] == "full"]), np.array([row["recompute"] == "selective"])
    lt = layer_terms({k: ft[k] for k in LAYER_INPUTS}, full, sel)
    return float((lt["compute"] + lt["recompute"])[0])
