"""Seed 001's analytical model of one linear layer, reproduced exactly.

A (d_in x d_out) layer with (tp_in x tp_out) 2-D tensor parallelism, dp-way data
parallelism and ``bytewidth``-byte words on a device with 8-bit FLOP/s, global-memory B/s
and network B/s. Time is the roofline maximum of FLOP, global-memory and network time.
Every argument may be a numpy array; the functions broadcast.
"""

from __future__ import annotations

import dataclasses

import numpy as np


@dataclasses.dataclass(frozen=True, kw_only=True)
class LinearDevice:
    """Seed 001's Device: 8-bit FLOP/s, global memory B/s, network B/s, base utilisation."""

    name: str
    flop_per_s_8bit: float
    global_Bps: float
    net_Bps: float
    base_util: float = 0.8


# Seed 001's worked example device.
H100_SXM5_SEED001 = LinearDevice(name="H100 SXM5", flop_per_s_8bit=1979e12, global_Bps=3352e9, net_Bps=900e9)


def all_reduce_words(n, p):
    """Words each device sends or receives in a bandwidth-optimal all-reduce of n words over
    p devices, reduce-scatter plus a multicast taken as free (seed 001): 3 (p - 1) n / p."""
    return 3 * (p - 1) * n / p


def linear_fwd_bwd_s(dev: LinearDevice, *, d_in, d_out, tp_in, tp_out, dp, bytewidth, b):
    """Forward + backward time of the layer on ``b`` tokens (seed 001's fwd_bwd_secs)."""
    d_in_local = d_in / tp_in
    d_out_local = d_out / tp_out
    n_local = d_in_local * d_out_local
    b_local = b / dp

    # Forward: load weights, Y = WX, all-reduce activations over tp_in (network and memory).
    global_io = n_local
    flop = 2 * n_local * b_local
    net_io = all_reduce_words(d_out_local * b_local, tp_in)
    global_io = global_io + all_reduce_words(d_out_local * b_local, tp_in)
    # Backward, weight gradients: reload inputs, dW = dY X^T, accumulate (read + write).
    global_io = global_io + d_in_local * b_local
    flop = flop + 2 * n_local * b_local
    global_io = global_io + 2 * n_local
    # Backward, input gradients: load weights, dX = W^T dY, all-reduce over tp_out.
    global_io = global_io + n_local
    flop = flop + 2 * n_local * b_local
    net_io = net_io + all_reduce_words(d_in_local * b_local, tp_out)
    global_io = global_io + all_reduce_words(d_in_local * b_local, tp_out)

    # base_util (thermal throttling) scales FLOP/s and memory B/s, not the network.
    flop_s = (flop * bytewidth) / (dev.base_util * dev.flop_per_s_8bit)
    global_io_s = (global_io * bytewidth) / (dev.base_util * dev.global_Bps)
    net_io_s = (net_io * bytewidth) / dev.net_Bps
    return np.maximum(flop_s, np.maximum(global_io_s, net_io_s))


def linear_end_of_batch_s(dev: LinearDevice, *, d_in, d_out, tp_in, tp_out, dp, bytewidth):
    """The end-of-batch gradient all-reduce over dp (the optimizer step taken as free)."""
    n_local = (d_in / tp_in) * (d_out / tp_out)
    io = all_reduce_words(n_local, dp)
    global_io_s = (io * bytewidth) / (dev.base_util * dev.global_Bps)
    net_io_s = (io * bytewidth) / dev.net_Bps
    return np.maximum(global_io_s, net_io_s)
