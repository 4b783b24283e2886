"""How much of the LLM Foundry H100 rows' miss their attention kernel could hold.

    PYTHONPATH=. python3 benchmarks/llm_foundry_h100_attention.py

Analysis only: nothing here changes the shipped model. The H100 rows of tests/data/validation/published_runs.csv
whose source is LLM Foundry's benchmark README are priced as `plansweep validate` prices them
(costmodel._validate.predict), once as shipped and once with FlashAttention-2's measured Hopper rates divided by a
slowdown (the attn_impl flash rows, profile llm-foundry; the attn_impl triton rows, profile llm-foundry-triton, are
priced by the standard formula on H100 and do not move: they show that the miss is not the flash rows' alone). From
the 2x case the script reads the attention time a step holds (predicted step at 2x minus shipped: the exposed kernel
time, forward, backward and any recompute), and the slowdown that would close each row's miss.

What the runs executed (llm-foundry 5e85bd62d, the H100 table's commit; submit_benchmarks.py reads
scripts/train/yamls/pretrain/mpt-<size>.yaml and in its model changes only attn_impl, norm_type and max_seq_len): no
ALiBi. The yamls' attn_config holds attn_impl alone, and MPTConfig's attn_config_defaults
(llmfoundry/models/layers/blocks.py) have alibi False, so learned_pos_emb stays True (a wpe embedding added to the
token embedding), modeling_mpt.py passes alibi_slopes None, and attention.py flash_attn_fn calls
flash_attn_varlen_func (flash-attn 2.4.2, setup.py's gpu-flash2) with alibi_slopes None; attn_bias_shape gives None
for flash and, without ALiBi, prefix-LM or sequence ids, for triton too: neither path reads a bias. flash_attn_fn
unpads Q, K and V with bert_padding.unpad_input (three calls a layer's forward, each a gather priced in the
llm-foundry profile's eager_elem_bytes, and each with two host synchronisations, torch.nonzero and max_seqlen's
.item(), not priced) and pads the output back (priced). Had ALiBi been on, flash-attn's ALiBi contribution (Sanghun
Cho, merged for flash-attn 2.4) reported "almost no loss" in speed at 16k tokens on an A100; the x1.25 column shows
what even a kernel a quarter slower would have moved.
"""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path

import costmodel._hardware as hw
import costmodel._reference as ref
import costmodel._stages as st
from costmodel._validate import predict, read_runs

CSV = Path(__file__).resolve().parents[1] / "tests/data/validation/published_runs.csv"
SLOWDOWNS = (1.0, 1.25, 2.0)
_orig_kernel = hw.attention_kernel_eff


def _rows() -> list:
    sources = [r["source"] for r in csv.DictReader(CSV.open())]
    return [run for s, run in zip(sources, read_runs(CSV), strict=True)
            if s.startswith("mosaicml/llm-foundry") and run.cluster.gpu.name.startswith("H100")]


def _errors(slowdown: float) -> list[tuple[float, float, float]]:
    """(predicted s, measured s, error %) of each row with the rows' attention kernels slowed ``slowdown`` times."""
    def eff(gpu_name: str, kernel: str) -> tuple[float, ...]:
        rates = _orig_kernel(gpu_name, kernel)
        if kernel == "flash2" and gpu_name.startswith("H100"):
            return tuple(r / slowdown for r in rates)
        return rates
    if slowdown != 1.0:
        st.attention_kernel_eff = ref.attention_kernel_eff = eff
    out = []
    for run in _rows():
        res = predict(run)
        out.append((res["predicted_iteration_time_s"], res["measured_iteration_time_s"], res["error_pct"]))
    st.attention_kernel_eff = ref.attention_kernel_eff = _orig_kernel
    return out


def main() -> None:
    if len(sys.argv) > 1:  # one slowdown a process (the pools' kernel rates are cached per process)
        print(json.dumps(_errors(float(sys.argv[1]))))
        return
    cases = {k: json.loads(subprocess.run([sys.executable, __file__, str(k)], capture_output=True, text=True,
                                          check=True).stdout) for k in SLOWDOWNS}
    print(f"{'run':30s} {'profile':20s} " + " ".join(f"{'x' + str(k):>8s}" for k in SLOWDOWNS)
          + f" {'attn s':>8s} {'closes at':>10s}")
    for i, run in enumerate(_rows()):
        base, slow = cases[1.0][i], cases[2.0][i]
        attn_s = slow[0] - base[0]  # the attention time the 2x case adds: one more kernel time, as exposed
        closes = 1.0 + (base[1] - base[0]) / attn_s if attn_s > 0 else float("nan")
        print(f"{run.name:30s} {run.framework:20s} " + " ".join(f"{cases[k][i][2]:+8.1f}" for k in SLOWDOWNS)
              + f" {attn_s:8.3f} " + (f"{closes:9.1f}x" if attn_s > 0 else f"{'(not flash)':>10s}"))
    for k in SLOWDOWNS:
        errs = [abs(e[2]) for e in cases[k]]
        print(f"x{k}: mean |error| of these {len(errs)} rows {sum(errs) / len(errs):.1f}%")


if __name__ == "__main__":
    main()
