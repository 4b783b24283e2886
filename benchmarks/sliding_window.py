"""What a sliding window (or Llama 4's chunks) takes off a layer and a step, model by model.

    PYTHONPATH=. python3 benchmarks/sliding_window.py

For each model: its window (or chunk) and the layers it restricts, the fused attention kernel's time against the causal one's
(Transformer.attention_time_share: the key tiles that meet the band), the attention FLOPs against the causal
triangle's (attention_span / s), and the best plan `rank` finds on the cluster with the window and without it
(megatron-core, the default space), with the step time of the windowed model's best plan priced without the window.
Then Mistral 7B's published kernel speedup (arXiv:2310.06825 Sec. 2: about 2x at 16K tokens, W = 4,096) against
the tile count's.
"""

from __future__ import annotations

import dataclasses

from costmodel import cluster_preset, evaluate, from_hf_config, model_preset
from search import default_table

MISTRAL_7B = {"model_type": "mistral", "hidden_size": 4096, "num_attention_heads": 32, "num_key_value_heads": 8,
              "num_hidden_layers": 32, "intermediate_size": 14336, "max_position_embeddings": 32768,
              "vocab_size": 32000, "hidden_act": "silu", "sliding_window": 4096, "tie_word_embeddings": False}
GEMMA2_9B = {"model_type": "gemma2", "hidden_size": 3584, "intermediate_size": 14336, "num_hidden_layers": 42,
             "num_attention_heads": 16, "num_key_value_heads": 8, "head_dim": 256,
             "hidden_activation": "gelu_pytorch_tanh", "max_position_embeddings": 8192, "vocab_size": 256000,
             "sliding_window": 4096}
CASES = [  # (model, cluster, global batch)
    (from_hf_config(MISTRAL_7B, "mistral-7b"), "h100x64", 256),
    (dataclasses.replace(from_hf_config(MISTRAL_7B, "mistral-7b"), seq_len=16384), "h100x64", 512),
    (from_hf_config(GEMMA2_9B, "gemma-2-9b"), "h100x64", 512),
    (model_preset("gpt-oss-120b"), "h100x64", 1280),
    (dataclasses.replace(model_preset("llama4-maverick"), seq_len=32768), "h100x256", 512),
]


def best(model, cluster, batch):
    table = default_table(model, cluster, batch)
    met = evaluate(model, cluster, table)
    i = int(met["tokens_per_s"].argmax())
    return table.take([i]), float(met["step_time_s"][i])


def main() -> None:
    print("| model | tokens | window, layers | kernel time | attention FLOPs | best plan's step: window / none "
          "| the windowed plan without the window |")
    print("| --- | ---: | --- | ---: | ---: | ---: | ---: |")
    for model, cl, batch in CASES:
        cluster = cluster_preset(cl)
        full = dataclasses.replace(model, sliding_window=None, window_layers=None, attention_chunk=None,
                                   window_every=None)
        what = f"chunks of {model.attention_chunk:,}" if model.attention_chunk else f"{model.sliding_window:,}"
        row, t_w = best(model, cluster, batch)
        _, t_f = best(full, cluster, batch)
        same = float(evaluate(full, cluster, row)["step_time_s"][0])
        print(f"| {model.name} on {cl} | {model.seq_len:,} | {what}, {model.windowed_layers} of "
              f"{model.layers} | {model.attention_time_share:.3f} | {model.attention_span / model.seq_len:.3f} | "
              f"{t_w:.2f} s / {t_f:.2f} s | {same:.2f} s |")
    share = dataclasses.replace(from_hf_config(MISTRAL_7B, "m"), seq_len=16384).attention_time_share
    print(f"\nMistral 7B at 16,384 tokens, W = 4,096: the kernel {1 / share:.2f}x faster by its tiles; published: "
          "'a 2x speed improvement'")


if __name__ == "__main__":
    main()
