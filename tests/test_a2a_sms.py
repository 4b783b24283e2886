"""The SMs NCCL's all-to-all holds while it hides under Megatron-Core's EP A2A overlap: the CTAs of its grouped
send / recv (costmodel._experts.a2a_channels, NCCL 5067397c graph/paths.cc ncclTopoComputeP2pChannels, enqueue.cc
addP2pToPlan, include/channel.h ncclP2pChannelBaseForRound), each worked by hand from NCCL's rules on the reference
nodes (8 GPUs a node on NVSwitch, one NIC a GPU), in the vectorised rule and the scalar reference's loops."""

import dataclasses

import numpy as np
import pytest

from costmodel import cluster_preset, framework_preset, model_preset
from costmodel._experts import a2a_channels, moe_layer_costs
from costmodel._layer_compute import layer_costs
from costmodel._layer_terms import moe_shape_terms
from costmodel._nccl import ring_channel_table
from costmodel._reference import _a2a_ctas

# (ranks, ranks on a node, ring channel table, NIC GB/s, CTAs by hand)
CASES = [
    # H100, ep 32 over 4 nodes of 8: ring channels min(4 x 8, 16) = 16 -> p2p pow2Up(16) = 16; per peer across nodes
    # pow2Up(divUp(50, 14) = 4) = 4, kept (4 x divUp(32, 8) = 16 <= 16); the schedule group gcd(8, 8) = 8 ranks ->
    # 32 / 8 = 4 bases (reverseBits over 4 bits: 0, 8, 4, 12), 4 channels each: 16 CTAs
    (32, 8, (24, 4), 50, 16),
    # H100, ep 8 in one node: ring 24 -> p2p pow2Up(24) = 32; per op 32 halved while x 8 > 32: 4; 8 rounds' bases
    # (reverseBits over 5 bits: 0, 16, 8, 24, 4, 20, 12, 28) x 4 = 32 CTAs
    (8, 8, (24, 4), 50, 32),
    # H100, ep 16 over 2 nodes: p2p 16, per peer 4 (4 x 2 = 8 <= 16), 2 bases (0, 8) x 4 = 8 CTAs
    (16, 8, (24, 4), 50, 8),
    # H100, ep 64 over 8 nodes: p2p 16, per peer 4 halved (4 x 8 = 32 > 16) to 2, 8 bases x 2 = 16
    (64, 8, (24, 4), 50, 16),
    # A100 (200 Gb/s HDR: 25 GB/s), ep 32: ring min(2 x 8, 16) = 16 -> 16; per peer divUp(25, 14) = 2; 4 bases x 2 = 8
    (32, 8, (24, 2), 25, 8),
    # B200, ep 8 in one node: ring 32 -> 32; per op 4; 8 x 4 = 32
    (8, 8, (32, 4), 50, 32),
    # H100, ep 6 in one node: per op 32 -> 4 (4 x 6 = 24 <= 32); 6 bases x 4 = 24 of the 32 channels
    (6, 8, (24, 4), 50, 24),
    # H100, ep 32 two ranks a node (etp 4): ring min(4 x 2, 16) = 8 -> 8; group gcd(8, 2) = 2 -> 16 bases; per peer
    # 4 halved to 2 (4 x 4 = 16 > 8); 16 x 2 = 32, at most the 8 channels
    (32, 2, (24, 4), 50, 8),
]


@pytest.mark.parametrize("size,per_node,ring,nic,want", CASES)
def test_nccl_all_to_all_ctas_by_hand(size, per_node, ring, nic, want):
    assert a2a_channels(size, per_node, ring[0], ring[1], nic * 1e9) == want


def test_vectorised_over_rows():
    size, per_node, ring, nic, want = (np.array(c) for c in zip(*CASES, strict=True))
    ring = np.stack(ring)
    got = a2a_channels(size, per_node, ring[:, 0], ring[:, 1], nic * 1e9)
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("gpus,nodes,ep,etp,want", [("h100", 32, 32, 1, 16), ("h100", 32, 8, 1, 32),
                                                     ("h100", 32, 32, 4, 8), ("a100", 16, 32, 1, 8),
                                                     ("b200", 32, 8, 1, 32)])
def test_scalar_reference_loops_by_hand(gpus, nodes, ep, etp, want):
    """The scalar reference walks NCCL's halving loops (costmodel._reference._a2a_ctas) on a cluster preset: the
    same counts as the table above (the A100 preset's NIC 25 GB/s, the others' 50)."""
    assert _a2a_ctas(cluster_preset(f"{gpus}x{nodes * 8}"), ep, etp) == want


def test_a2a_overlap_layer_charges_sixteen_of_132_sms():
    """Qwen3-235B-A22B, ep 32 on H100 nodes of 8 under megatron-core-a2a-overlap (NCCL's all-to-all): the layer's
    exposed all-to-all time is overlapped_a2a_s's with sm_frac = 16 / 132 (the first case above), and more than with
    none: the hidden all-to-all slows the computation beside it by 12.1%."""
    model = dataclasses.replace(model_preset("qwen3-235b-a22b"), seq_len=4096)
    cl = cluster_preset("h100x256")
    fw = framework_preset("megatron-core-a2a-overlap")
    assert fw.overlap_ep and not fw.ep_dispatch_per_node
    one, peak = np.array([1]), cl.gpu.peak_flops[0]
    lc = layer_costs(model, cl, one, one, one, np.array([False]), peak)
    got = moe_shape_terms(model, cl, lc, one, one, one, np.array([False]), peak,
                          (np.array([32]), one, fw, np.array([0])))
    assert ring_channel_table(cl.gpu.name) == (24.0, 4.0)

    def layer(frac):
        return moe_layer_costs(model, cl, lc, one, np.array([False]), np.array([32]), peak, True, False, one,
                               sm_frac=frac, shared_cast=None, host_sync=fw.moe_host_sync)["ep_fwd"][0]

    assert got["moe_ep_fwd"][0] == pytest.approx(layer(16 / 132), rel=1e-12)
    assert layer(16 / 132) > layer(0.0)
