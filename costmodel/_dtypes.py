"""Bytes per element and per parameter that every cost term counts, with their sources.

Activations travel and are stored in 16 bits; model state follows Megatron-LM's mixed precision with
Adam; the data-parallel reduction runs in the 16-bit training dtype unless a framework profile says
otherwise (costmodel._frameworks). Each constant is used by the time terms (HBM and link traffic) and
the memory terms alike, so it is defined once, here.
"""

from __future__ import annotations

# Activations and their gradients are kept in 16-bit floats (also under fp8 compute, where
# Transformer Engine casts to fp8 only inside the GEMMs).
ACT_BYTES = 2

# FP8_IN_16_BIT: under fp8 only the transformer layers' linear products run in fp8; the attention
# core (QK^T and AV inside the fused kernel) and the output head stay in 16 bits, so they are
# priced at the 16-bit peak. Sources: DeepSeek-V3 technical report Sec. 3.3.1 (embedding, output
# head, MoE gating, normalisation and attention kept in BF16/FP32); Transformer Engine's recipes
# leave fp8 attention off (``fp8_dpa=False`` by default, transformer_engine/common/recipe); torchao's
# float8 training converts nn.Linear only and torchtitan leaves the output layer out
# (``filter_fqns`` default ["output"]); PyTorch's scaled_dot_product_attention has no fp8 kernel.

# Per parameter, Megatron-LM mixed precision with Adam (Megatron's
# theoretical_memory_usage: 18 bytes/param = 2 + 4 + 12; Rajbhandari et al. 2020 Sec. 3.1).
WEIGHT_BYTES = 2  # bf16/fp16 working copy
GRAD_BYTES = 4  # fp32 main gradient
OPTIM_BYTES = 12  # fp32 master weight + Adam first and second moments

# Bytes on the wire per gradient element in the data-parallel reduction, where a framework does not say
# (Framework.grad_reduce_bytes: reduced in the 16-bit training dtype).
GRAD_COMM_BYTES = 2
