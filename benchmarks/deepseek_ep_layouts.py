"""DeepSeek-V3 on 256 B200 at EP 8 x PP 16 against EP 32 x PP 8 x VP 2: what the two layouts run differently, and
what each difference would move if it were priced. A diagnosis; nothing here changes the model.

    PYTHONPATH=. python3 benchmarks/deepseek_ep_layouts.py

Printed, for the two Megatron-Bridge DeepSeek-V3 B200 rows and the Qwen3-235B-A22B B200 row (EP 8 x PP 8):
1. One MoE layer and micro-batch as the scalar reference prices it (costmodel._reference._moe): local experts, the
   rows a local expert's GEMM takes, forward and backward (fwd, bwd: GPU or host, whichever binds), the exposed
   all-to-alls a pass (ep), the host's launches (host_f a forward) and the forward expert phase's excess over its GPU
   time (host_x), and the time per layer and micro-batch the published figure implies (step / ((m + p - 1) x the
   bottleneck stage's layers), the 1F1B count; (m + (p - 1) / v) slots interleaved; the embedding, head and MTP layer
   counted as the model prices them, so this is a rough reading).
2. Each row's error (as `plansweep validate`) under two candidate mechanisms, one at a time, and a third's size:
   "no_p2p": the model without the steady state's hand-offs of Megatron-Core's pipeline without interleaving, which it
   now prices (Framework.blocking_p2p: each micro-batch's send_forward_recv_backward and send_backward_recv_forward
   are batched isend / irecv pairs waited on before the next pass, Megatron-LM b0cc270, the 26.02 container's
   core_r0.16.0, megatron/core/pipeline_parallel/schedules.py forward_backward_pipelining_without_interleaving;
   p2p_communication.py _communicate, wait_on_reqs and torch.cuda.synchronize() under batch_p2p_sync; two
   neighbours that meet there both wait for the exchange, so each stage's period is its F + B + 2 T_C): the profiles'
   blocking_p2p turned off, the closed form's 2 (p - 1) T_C counted once (fill and drain), as before.
   "half_dim": the B200's GEMM half-size at the H100's measured 240 instead of the tile edge 128 (its efficiency
   matmul ceiling is its published MAMF, its other efficiency constants the H100's fractions; not measured on a
   B200).
   "pad" (printed, not priced): MXFP8's per-expert alignment of the received tokens to 32 rows (HybridEP's
   dispatch_with_permute pad_multiple = get_align_size_for_quantization, 32 under MXFP8), 15.5 rows a local expert
   on average under force-balanced routing: the share of more rows a GPU's expert GEMMs take (32 x 15.5 / 32768 =
   1.5% at EP 8, 0.4% at EP 32).
"""

from __future__ import annotations

import contextlib
import dataclasses
import math

import numpy as np

import costmodel._frameworks as frameworks
import costmodel._hardware as hardware
import costmodel._reference as reference
from costmodel._validate import _candidates, predict, read_runs

try:
    from benchmarks.validation_by_source import CSV
except ImportError:  # run as a script from benchmarks/
    from validation_by_source import CSV

ROWS = ("bridge-26.02.01-deepseek-v3-b200-256gpu", "bridge-26.04.01-deepseek-v3-b200-256gpu",
        "bridge-26.02-qwen3-235b-a22b-b200-256gpu")
B200 = "B200-HGX-180GB"
MXFP8_ALIGN_ROWS = 32  # Megatron-Core moe_utils.get_align_size_for_quantization under the MXFP8 recipe
H100_HALF_DIM = 240.0  # costmodel._hardware.GEMM_HALF_DIM, measured on an H100 SXM


def layer_terms(run) -> dict:
    """The reference's MoE layer of ``run``'s first candidate (the published settings), and its step."""
    seen = []
    orig = reference._moe

    def spy(*a, **k):
        out = orig(*a, **k)
        seen.append(out)
        return out

    reference._moe = spy
    try:
        cluster = dataclasses.replace(run.cluster, gpu=dataclasses.replace(run.cluster.gpu, hbm_bytes=math.inf))
        step = reference.evaluate_row(run.model, cluster, _candidates(run).row(0), framework=run.profile())
    finally:
        reference._moe = orig
    return {**seen[0], "step": step["step_time_s"]}


@contextlib.contextmanager
def without_blocking_p2p():
    """Every profile's blocking_p2p off (module docstring, "no_p2p")."""
    saved = dict(frameworks.FRAMEWORKS)
    for name, fw in saved.items():
        frameworks.FRAMEWORKS[name] = dataclasses.replace(fw, blocking_p2p=False)
    try:
        yield
    finally:
        frameworks.FRAMEWORKS.update(saved)


def errors(runs) -> dict:
    return {r.name: predict(r)["error_pct"] for r in runs}


def main() -> None:
    runs = {r.name: r for r in read_runs(CSV)}
    print("One MoE layer a micro-batch (ms; the scalar reference, published settings)")
    print(f"{'run':44s} {'local':>5s} {'rows':>6s} {'fwd':>6s} {'bwd':>6s} {'ep':>6s} {'host_f':>6s} {'host_x':>6s}"
          f" {'implied':>8s}")
    for name in ROWS:
        run = runs[name]
        f = run.fixed
        mo = layer_terms(run)
        local = run.model.experts / f["ep"]
        rows = run.model.experts_per_token * run.model.seq_len * f.get("micro_batch", 1) / local
        m = f["global_batch"] / f.get("micro_batch", 1) / f["dp"]
        p, v = f["pp"], f.get("vpp", 1)
        layers = max(run.stage_layers) if run.stage_layers else run.model.layers / p
        slots = m + (p - 1) / v if v > 1 else m + p - 1
        implied = predict(run)["measured_iteration_time_s"]
        per_layer = implied / (slots * layers)  # a stage's layers, its chunks together
        print(f"{name:44s} {local:5.0f} {rows:6.0f} {mo['fwd'] * 1e3:6.2f} {mo['bwd'] * 1e3:6.2f} {mo['ep'] * 1e3:6.2f}"
              f" {mo['host_f'] * 1e3:6.2f} {mo['host_x'] * 1e3:6.2f} {per_layer * 1e3:8.2f}")
    listed = list(runs.values())
    base = errors(listed)
    with without_blocking_p2p():
        p2p = errors(listed)
    eff = dict(hardware.EFFICIENCY)
    eff[B200] = dataclasses.replace(eff[B200], gemm_half_dim=H100_HALF_DIM)
    half = errors(read_runs(CSV, efficiency=eff))
    print()
    print(f"{'run':44s} {'now':>7s} {'no_p2p':>7s} {'half_dim':>8s} {'pad':>8s}")
    for name in ROWS:
        f, model = runs[name].fixed, runs[name].model
        local = model.experts / f["ep"]
        copies = model.experts_per_token * model.seq_len * f.get("micro_batch", 1)
        pad = local * (MXFP8_ALIGN_ROWS - 1) / 2 / copies  # more rows a GPU's expert GEMMs take, on average
        print(f"{name:44s} {base[name]:+6.1f}% {p2p[name]:+6.1f}% {half[name]:+7.1f}% {100 * pad:7.2f}%")
    moved = sorted(n for n in base if abs(p2p[n] - base[n]) > 0.05 and n not in ROWS)
    for n in moved:
        print(f"  no_p2p also moves {n}: {base[n]:+.1f}% -> {p2p[n]:+.1f}%")
    for label, errs in (("now", base), ("no_p2p", p2p), ("half_dim", half)):
        print(f"  mean |error| over the set, {label}: {np.mean([abs(e) for e in errs.values()]):.2f}%")


if __name__ == "__main__":
    main()
