"""The data-parallel exchange (gradient reduction, ZeRO's weight all-gathers), what of it is exposed,
and the optimizer step.

Per step and stage, over the g = dp x cp replicas, each a ring (costmodel._collectives.ring_pass):
ZeRO 0 all-reduces the gradients; ZeRO 1-2 reduce-scatter them and all-gather the updated weights;
ZeRO-3 all-gathers the weights for forward and again for backward and reduce-scatters the
gradients, per micro-batch (Rajbhandari et al. 2020 Sec. 7: 1.5x the all-reduce volume a pass;
zero3_gather_scatter_bytes). dp_exchange_coef gives the exchange as a x parameters + b seconds, in
the framework's reduce and gather dtypes (costmodel._frameworks). exposed_dp_s takes off what
overlaps the bottleneck stage's last backward (ZeRO-3: the whole pipeline), or the next step's first
forward (overlapped parameter gather), or FSDP's unit edges. The optimizer step (Adam) reads and
writes ADAM_BYTES_TOUCHED per sharded parameter at the HBM rate.
"""

from __future__ import annotations

import numpy as np

from costmodel._collectives import ring_pass
from costmodel._dtypes import GRAD_COMM_BYTES, WEIGHT_BYTES
from costmodel._frameworks import Framework
from costmodel._workloads import Transformer

# Adam step, bytes touched per (sharded) parameter: read fp32 param, m, v, grad (16) and
# write fp32 param, m, v (12) plus the 16-bit copy (2).
ADAM_BYTES_TOUCHED = 30


def framework_columns(fw: Framework, p, zero, overlap):
    """The ZeRO stage and overlap the framework prices a row with: ZeRO-2/3 with pp > 1 as
    ZeRO-1 where it shards once per step with a pipeline; overlap fixed where it has one value."""
    if fw.shard_with_pp_once:
        zero = np.where((p > 1) & (zero >= 2), 1, zero)
    if len(fw.overlap_dp) == 1:
        overlap = np.full(np.shape(overlap), fw.overlap_dp[0])
    return zero, overlap


def dp_exchange_s(zero, m, params, g, bw, lat, grad_bytes=None, fw: Framework | None = None, prec=0):
    """Seconds of a stage's data-parallel exchange over g ranks for ``params`` parameters per
    GPU: dp_exchange_coef's a x params + b."""
    a, b = dp_exchange_coef(zero, m, g, bw, lat, grad_bytes, fw, prec)
    return a * params + b


def dp_exchange_coef(zero, m, g, bw, lat, grad_bytes=None, fw: Framework | None = None, prec=0):
    """(a, b): a stage's data-parallel exchange over g ranks takes a x params + b seconds for ``params`` parameters per
    GPU, ``grad_bytes`` a gradient element on the wire (None: ``fw``'s grad_reduce_bytes at ``prec``, else 2), a weight
    element ``fw``'s weight_gather_bytes at ``prec`` (else 2). ZeRO-3: per micro-batch, all-gather the weights for
    forward and for backward and reduce-scatter the gradients (Rajbhandari et al. 2020 Sec. 7: 1.5x the all-reduce
    volume, per pass); ZeRO 0: all-reduce the gradients; ZeRO 1-2: reduce-scatter them and all-gather the updated
    weights; ZeRO 0-1 under ``fw``'s all_reduce_then_gather: all-reduce, then all-gather. Each pass a ring."""
    per_byte, steps = ring_pass(g, bw, lat)
    if grad_bytes is None:
        grad_bytes = GRAD_COMM_BYTES if fw is None else np.take(fw.grad_reduce_bytes, prec)
    w, both = (WEIGHT_BYTES, False) if fw is None else (np.take(fw.weight_gather_bytes, prec), np.logical_and(
        np.take(fw.all_reduce_then_gather, prec), zero <= 1))
    z3, a = zero == 3, np.where(both, 2.0 * grad_bytes + w, np.where(zero == 0, 2.0 * grad_bytes, grad_bytes + w))
    a = np.where(z3, zero3_gather_scatter_bytes(m, w, grad_bytes), a)
    return a * per_byte, np.where(z3, 3.0 * m, 2.0 + both) * steps


def zero3_gather_scatter_bytes(m, weight_bytes, grad_bytes):
    """Bytes per parameter ZeRO-3 puts through the data-parallel ring in a step of m micro-batches: each
    all-gathers the weights for forward and again for backward (2 x ``weight_bytes``) and reduce-scatters the
    gradients (``grad_bytes``), in 3 m ring passes (Rajbhandari et al. 2020 Sec. 7)."""
    return m * (2.0 * weight_bytes + grad_bytes)


def exposed_dp_s(zero, overlap, m, X_max, B_b, W_b, dp_raw, F_b=0.0, fw: Framework | None = None, prec=0,
                 model: Transformer | None = None, pp=1):
    """The data-parallel exchange's exposed time: overlapped (``overlap``) with the bottleneck stage's last backward
    (B + W), or under ZeRO-3 with the whole pipeline (m X_max); under ``fw``'s overlap_param_gather, ZeRO 1-2's weight
    all-gather (its share of dp_exchange_coef's bytes at ``prec``) with the next step's first forward F_b instead.
    ``fw``'s fsdp_unit_edges (``model`` dense, ``pp`` 1, ZeRO 2-3): FSDP's root unit and block 0 (share e of the
    parameters) expose their forward all-gather and reduce-scatter; the rest under F_b and B + W (ZeRO-3: m X_max)."""
    window = np.where(zero == 3, m * X_max, B_b + W_b)
    if fw is not None and fw.fsdp_unit_edges and model is not None and not model.is_moe and model.kind != "mlp":
        n, w, gr = model.num_params(), np.take(fw.weight_gather_bytes, prec), np.take(fw.grad_reduce_bytes, prec)
        e = np.where((pp == 1) & (zero >= 2), (n - (model.layers - 1) * model.layer_params()) / n, 0.0)
        ag, rs = (dp_raw * x / np.where(zero == 3, 2 * w + gr, w + gr) for x in (w, gr))  # ZeRO-3: forward's gather
        rest = np.where(zero == 2, np.maximum((1 - e) * ag - F_b, 0.0) + np.maximum((1 - e) * rs - B_b - W_b, 0.0),
                        np.maximum(dp_raw - e * (ag + rs) - window, 0.0))
        return np.where(overlap, np.where(zero >= 2, e * (ag + rs) + rest, np.maximum(dp_raw - window, 0.0)), dp_raw)
    if fw is None or not fw.overlap_param_gather:
        return np.where(overlap, np.maximum(dp_raw - window, 0.0), dp_raw)
    w, gr, ar = (np.take(x, prec) for x in (fw.weight_gather_bytes, fw.grad_reduce_bytes, fw.all_reduce_then_gather))
    ag = np.where((zero == 1) | (zero == 2), w / (gr * (1 + (ar & (zero == 1))) + w) * dp_raw, 0.0)
    return np.where(overlap, np.maximum(dp_raw - ag - window, 0.0) + np.maximum(ag - F_b, 0.0), dp_raw)
