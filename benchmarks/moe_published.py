"""Published mixture-of-experts training throughputs against plansweep's prediction (issue 18).

Each row is one published run: its model, GPUs, parallel layout, batch and precision as the source
gives them, priced with costmodel.evaluate (pipeline simulator) and no constant fitted to the row.
Printed: predicted and published throughput in the source's unit and the error. BENCHMARKS.md,
"Mixture of experts (issue 18)", records the output and what each source leaves open.

    PYTHONPATH=. python3 benchmarks/moe_published.py [--json | --variants]

--variants: the DeepSeek-V3 rows again without node-limited routing and (the 2048-H800 row) without
fp8 dispatch, to show what each mechanism moves.
"""

from __future__ import annotations

import argparse
import dataclasses
import json

import numpy as np

from costmodel import StrategyTable, cluster_preset, evaluate, model_preset

MCORE_README_V08 = ("Megatron-LM megatron/core/transformer/moe/README.md at commit 0b981f9c53 (2024-08-02): 438 TFLOPS "
                    "for Mixtral 8x7B bf16 with MCore v0.8, 'Reference Best Parallel Mapping' (dropless, all-to-all "
                    "dispatcher, 64 GPUs, seq 4096, TP1 EP8 PP4 VP8, MBS 1, GBS 256; 8xH100 nodes, 8x400 Gb/s IB)")
BRIDGE_2509 = ("NVIDIA-NeMo/Megatron-Bridge docs/performance-summary-archive.md, 25.09 NeMo container, DGX-H100: "
               "DeepSeekV3 (dropless, force-balanced routing), 1024 GPUs, GBS 8192, MBS 1, seq 4096, TP2 PP8 VP4 "
               "EP64: 1297 tokens/s/GPU, 338 model TFLOP/s/GPU (FP8 blockwise, the 128x128 / 1x128 scaling of the "
               "original DeepSeek-V3 run); recipe: scripts/performance/configs/deepseek/"
               "deepseek_workload_base_configs.py H100_V1, pp_layout 'Et|(tt|)*30mL', moe_a2a_overlap False, "
               "selective recompute of mla_up_proj and mlp")
BRIDGE_2602 = ("NVIDIA-NeMo/Megatron-Bridge docs/performance-summary-archive.md, 26.02 NeMo container, DGX-B200: "
               "DeepSeekV3, 256 GPUs, MXFP8, GBS 4096, MBS 1, seq 4096, TP1 PP16 EP8, no VP: 2689 tokens/s/GPU "
               "(force-balanced, dropless); recipe at v0.3.0 DEEPSEEK_V3_PRETRAIN_CONFIG_B200_V2: selective "
               "recompute of mla_up_proj (deepseek_llm_pretrain.py sets recompute_granularity 'selective')")
DSV3_REPORT = ("DeepSeek-AI 2024, DeepSeek-V3 Technical Report, arXiv:2412.19437: Table 1 / Sec. 1, 180K H800 GPU "
               "hours per trillion tokens on 2048 H800 (= 1e12 / (180e3 x 3600) = 1543 tokens/s/GPU); Sec. 3.2: "
               "PP 16, EP 64 over 8 nodes, ZeRO-1 DP, no TP, DualPipe hiding the all-to-alls; Sec. 3.3: FP8; "
               "Sec. 4.2: seq 4096, batch 15360 sequences for most of training")


BRIDGE_2602_QWEN = ("NVIDIA-NeMo/Megatron-Bridge docs/performance-summary-archive.md, 26.02 NeMo container, DGX-H100, "
                    "FP8 (force-balanced, dropless): Qwen3_30B_a3B 16 GPUs, GBS 1024, MBS 1, seq 4096, TP1 PP2 VP12 "
                    "EP8: 5113 tokens/s/GPU; Qwen3_235B_a22B 256 GPUs, GBS 8192, MBS 1, TP2 PP8 VP4 EP32: 1633 "
                    "tokens/s/GPU; recipe scripts/performance/configs/qwen/qwen3_workload_base_configs.py at tag "
                    "v0.3.0 (the release whose docs/performance-summary.md first lists 26.02): 235B on H100 with "
                    "moe_a2a_overlap True and the alltoall dispatcher; 30B on H100 (FP8_CS_V1) with moe_a2a_overlap "
                    "True and moe_flex_dispatcher_backend 'deepep'; qwen3_llm_pretrain.py: no recompute")
BRIDGE_2602_QWEN_B200 = ("the same page, 26.02, DGX-B200, MXFP8 (force-balanced, dropless): Qwen3_30B_a3B 8 GPUs, "
                         "GBS 512, MBS 1, seq 4096, TP1 PP1 EP8: 9691 tokens/s/GPU; Qwen3_235B_a22B 256 GPUs, GBS 8192, MBS 1, "
                         "TP1 PP8 EP8, no VP: 3805 tokens/s/GPU; recipe at v0.3.0: B200 30B (FP8_MX_V1) and 235B "
                         "(FP8_MX_V2 = FP8_CS_V1 at 256 GPUs) without moe_a2a_overlap or a flex dispatcher (alltoall), "
                         "no recompute; 235B's 94 layers split with account_for_embedding/loss_in_pipeline_split "
                         "(qwen3_moe.py): 11, 12 x 6, 11")


def _deepseek(seq: int = 4096):
    return dataclasses.replace(model_preset("deepseek-v3"), seq_len=seq)


# (label, source, model, cluster, framework, strategy columns, stage_layers or None, unit, published)
ROWS = [
    ("Mixtral 8x7B, 64 H100, MCore v0.8", MCORE_README_V08,
     dataclasses.replace(model_preset("mixtral-8x7b"), seq_len=4096), "h100x64", "megatron-core",
     dict(dp=16, tp=1, pp=4, ep=8, micro_batch=1, global_batch=256, schedule="interleaved", vpp=8, zero_stage=1,
          recompute="none", precision="bf16"), None, "TFLOP/s/GPU", 438.0),
    ("DeepSeek-V3, 1024 H100, Megatron-Bridge 25.09", BRIDGE_2509, _deepseek(), "h100x1024", "megatron-core-deepep",
     dict(dp=64, tp=2, pp=8, ep=64, micro_batch=1, global_batch=8192, schedule="interleaved", vpp=4, zero_stage=1,
          recompute="selective", sequence_parallel=True, precision="fp8"),
     [7, 8, 8, 8, 8, 8, 8, 6], "tokens/s/GPU", 1297.0),
    ("DeepSeek-V3, 256 B200, Megatron-Bridge 26.02", BRIDGE_2602, _deepseek(), "b200x256", "megatron-core-deepep",
     dict(dp=16, tp=1, pp=16, ep=8, micro_batch=1, global_batch=4096, schedule="1f1b", vpp=1, zero_stage=1,
          recompute="selective", precision="fp8"),
     [3] + [4] * 14 + [2], "tokens/s/GPU", 2689.0),
    ("Qwen3-30B-A3B, 16 H100, Megatron-Bridge 26.02", BRIDGE_2602_QWEN, model_preset("qwen3-30b-a3b"), "h100x16",
     "megatron-core-deepep-a2a-overlap",
     dict(dp=8, tp=1, pp=2, ep=8, micro_batch=1, global_batch=1024, schedule="interleaved", vpp=12, zero_stage=1,
          recompute="none", precision="fp8"), None, "tokens/s/GPU", 5113.0),
    ("Qwen3-235B-A22B, 256 H100, Megatron-Bridge 26.02", BRIDGE_2602_QWEN, model_preset("qwen3-235b-a22b"),
     "h100x256", "megatron-core-a2a-overlap",
     dict(dp=16, tp=2, pp=8, ep=32, micro_batch=1, global_batch=8192, schedule="interleaved", vpp=4, zero_stage=1,
          recompute="none", sequence_parallel=True, precision="fp8"),
     [11, 12, 12, 12, 12, 12, 12, 11], "tokens/s/GPU", 1633.0),
    ("Qwen3-30B-A3B, 8 B200, Megatron-Bridge 26.02", BRIDGE_2602_QWEN_B200, model_preset("qwen3-30b-a3b"), "b200x8",
     "megatron-core",
     dict(dp=8, tp=1, pp=1, ep=8, micro_batch=1, global_batch=512, schedule="1f1b", vpp=1, zero_stage=1,
          recompute="none", precision="fp8"), None, "tokens/s/GPU", 9691.0),
    ("Qwen3-235B-A22B, 256 B200, Megatron-Bridge 26.02", BRIDGE_2602_QWEN_B200, model_preset("qwen3-235b-a22b"),
     "b200x256", "megatron-core",
     dict(dp=32, tp=1, pp=8, ep=8, micro_batch=1, global_batch=8192, schedule="1f1b", vpp=1, zero_stage=1,
          recompute="none", precision="fp8"),
     [11, 12, 12, 12, 12, 12, 12, 11], "tokens/s/GPU", 3805.0),
    ("DeepSeek-V3, 2048 H800, DeepSeek-V3 report", DSV3_REPORT, _deepseek(), "h800x2048", "hai-llm",
     dict(dp=128, tp=1, pp=16, ep=64, micro_batch=1, global_batch=15360, schedule="1f1b", vpp=1, zero_stage=1,
          recompute="full", precision="fp8"),
     [3] + [4] * 14 + [2], "tokens/s/GPU", 1543.0),
]


def predict(model, cluster_name, framework, cols, stage_layers):
    cluster = cluster_preset(cluster_name)
    table = StrategyTable.from_columns(stage_layers=None if stage_layers is None else [stage_layers], **cols)
    m = evaluate(model, cluster, table, pipeline="simulate", framework=framework)
    n_gpu = int(table.num_gpus[0])
    tok = float(m["tokens_per_s"][0]) / n_gpu
    tflops = float(m["mfu"][0]) * float(np.asarray(cluster.gpu.peak_flops)[table["precision"][0]]) / 1e12
    parts = {k: float(m[k][0]) for k in ("step_time_s", "compute_s", "ep_comm_s", "tp_comm_s", "pp_comm_s",
                                          "dp_comm_s", "bubble_s", "mem_total_bytes")}
    return {"tokens_per_s_gpu": tok, "tflops_gpu": tflops, "feasible": bool(m["feasible"][0]), **parts}


def variants() -> None:
    """The DeepSeek-V3 rows with and without node-limited routing and fp8 dispatch."""
    for label, _, model, cluster, fw, cols, sl, _, published in ROWS:
        if not label.startswith("DeepSeek-V3"):
            continue
        free = dataclasses.replace(model, router_groups=1, router_group_topk=1)
        cases = [("no node limit", free, fw), ("node limit", model, fw)]
        if fw == "hai-llm":  # fp8 dispatch is hai-llm's; without it the profile is megatron-core-deepep-a2a-overlap
            cases = [("no node limit, 16-bit dispatch", free, "megatron-core-deepep-a2a-overlap"),
                     ("node limit, 16-bit dispatch", model, "megatron-core-deepep-a2a-overlap"),
                     ("no node limit, fp8 dispatch", free, fw), ("node limit, fp8 dispatch", model, fw)]
        for name, m, f in cases:
            p = predict(m, cluster, f, cols, sl)
            tok = p["tokens_per_s_gpu"]
            print(f"{label:<45} {name:<32} {tok:7.0f} tokens/s/GPU  error {100 * (tok / published - 1):+6.1f}%  "
                  f"(ep a2a {p['ep_comm_s']:.2f} s of {p['step_time_s']:.2f} s)")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--variants", action="store_true")
    args = ap.parse_args()
    if args.variants:
        variants()
        return 0
    out = []
    for label, source, model, cluster, fw, cols, sl, unit, published in ROWS:
        p = predict(model, cluster, fw, cols, sl)
        pred = p["tflops_gpu"] if unit.startswith("TFLOP") else p["tokens_per_s_gpu"]
        out.append({"run": label, "unit": unit, "published": published, "predicted": pred,
                    "error": pred / published - 1.0, "source": source, "framework": fw, **p})
    if args.json:
        print(json.dumps(out, indent=1))
        return 0
    for r in out:
        print(f"{r['run']:<48} {r['unit']:<13} published {r['published']:8.0f}  predicted {r['predicted']:8.0f}  "
              f"error {100 * r['error']:+6.1f}%  (feasible {r['feasible']}, {r['mem_total_bytes'] / 1e9:.0f} GB; "
              f"ep a2a {r['ep_comm_s']:.2f} s, bubble {r['bubble_s']:.2f} s of {r['step_time_s']:.2f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
