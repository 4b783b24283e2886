"""The names behind the strategy table's integer codes that a framework profile also reads: a code is
its name's position (append only). costmodel._strategy re-exports them with the other dimensions;
costmodel._frameworks reads the schedules here, so that the strategy table can read the profiles'
names (its framework column) without an import circle."""

from __future__ import annotations

import re

SCHEDULES = ("gpipe", "1f1b", "interleaved", "zb-h1", "zb-h2", "zb-v", "hanayo")
RECOMPUTE = ("none", "selective", "full")
# Megatron-Core's selective-recompute modules (Megatron-LM d98e8a6, megatron/core/transformer/transformer_config.py
# recompute_modules, validated in __post_init__): bit i of the strategy table's optional ``recompute_modules`` column is
# RECOMPUTE_MODULES[i]; 0 is the framework's own selective policy (Framework.selective). Read only where a stage's
# recompute is "selective" (recompute_granularity selective), priced by costmodel._layer_terms.module_terms.
RECOMPUTE_MODULES = ("core_attn", "moe_act", "layernorm", "mla_up_proj", "mlp", "moe", "shared_experts")
MODULE_BIT = {name: 1 << i for i, name in enumerate(RECOMPUTE_MODULES)}


def module_names(code: int) -> str:
    """The names of a recompute_modules bit set, comma-separated in RECOMPUTE_MODULES' order ("" for 0)."""
    return ",".join(name for name, bit in MODULE_BIT.items() if int(code) & bit)


def module_code(text) -> int | None:
    """A recompute_modules bit set from names separated by commas or spaces (Megatron-LM's --recompute-modules takes
    them space-separated), or from its integer; None where a name is no module (the caller names the argument)."""
    if isinstance(text, (int,)) or (hasattr(text, "dtype") and text.dtype.kind in "iu"):
        code = int(text)
        return code if 0 <= code < 1 << len(RECOMPUTE_MODULES) else None
    words = str(text).replace(",", " ").split()
    if any(w.lower() not in MODULE_BIT for w in words):
        return None
    code = 0
    for w in words:
        code |= MODULE_BIT[w.lower()]
    return code


def name_words(text) -> list[str]:
    """The words of a name as a user writes it (a GPU, a framework): lower case, split at spaces, underscores and
    hyphens ("NVIDIA H100_SXM" -> ["nvidia", "h100", "sxm"]); "-".join of them is the name's key."""
    return [w for w in re.split(r"[\s_\-]+", str(text).strip().lower()) if w]
