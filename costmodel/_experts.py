"""Mixture-of-experts layers: routing, expert GEMMs, the dispatch and combine all-to-alls.

E experts, top-k, capacity factor cf, expert parallelism ep and expert tensor parallelism etp.
    Rule: Megatron-Core's MoE Parallel Folding (Liu et al. 2025, arXiv:2504.14960;
    megatron/core/transformer/moe/README.md): the MoE layers of a pipeline stage run on the same
    tp x cp x dp ranks as its attention, regrouped as etp x ep x edp (etp innermost): ep must
    divide E, etp the expert's ffn width, and ep x etp must divide tp x cp x dp; the
    expert-data-parallel group has edp = tp cp dp / (ep etp) ranks, an ep group is ep ranks etp
    apart, an etp group etp consecutive ranks (etp = 1, the README's recommendation for
    fine-grained MoE and DeepSeek-V3's layout, is the default). A dense model takes ep = etp = 1.
    Each GPU routes its T / tp tokens (T = b s / cp); the busiest rank's E / ep experts take
    cf k T / tp token copies (routed_copies; grouped GEMMs of cf k T ep etp / (tp E) rows each after
    the etp group's all-gather, at 1 / etp of the expert's width); dispatch and combine are
    all-to-alls of those copies (h values each) over ep ranks, once each forward and again
    backward, the share to other nodes on the network and the rest on NVLink
    (costmodel._collectives.all_to_all_s; remote_nodes_per_token for a per-node dispatcher), plus
    the etp group's all-gather and reduce-scatter (one_way_a2a_s). Shared experts and the router run like a
    dense MLP split by tp. Expert weights, gradients and optimizer state are split by ep x etp and
    sharded by ZeRO over edp (costmodel._memory_terms.moe_memory); their gradients are reduced over
    edp. Model FLOPs (MFU) count active parameters only.
What Megatron-Core's MoE layer adds to a dense one (core_v0.16.0, 3bec9aa; Transformer Engine v2.11, c188b53), each
    priced by what it does:
    HBM bytes of its memory-bound kernels, at the element-wise rate (hbm_s): the router's top-k and aux-loss passes
        over the fp32 scores and the permutation's row-id map (ROUTING_BYTES_PER_SCORE a token and expert), permute
        and unpermute (PERMUTE_ELEMS_PER_COPY elements of h a copy, and T h / t written), the sort by local expert
        and back (SORT_ELEMS_PER_COPY, with more than one local expert), and under fp8 the quantization of each
        expert GEMM's input and output gradient (Framework.expert_fp8_cast_bytes).
    Kernel launches (moe_launch_units): a fixed set of router, dispatcher and permutation kernels and one GEMM per
        local expert for each of FC1 and FC2 (Transformer Engine's grouped GEMM launches a cuBLAS GEMM per expert),
        one quantization per expert and GEMM under fp8, priced at kernel_overhead_s per KERNELS_PER_SUBLAYER kernels
        (the dense layer's rate), the backward twice the forward (ELEM_BWD_FACTOR).
    Expert GEMMs at their own shape: rows = the copies a local expert takes (cf k T ep etp / (t E)), not the layer's
        tokens, so fine-grained experts (Qwen3: 128, top-8) run at the roofline's utilisation of their row count.
    The EP A2A overlap (Framework.overlap_ep; overlapped_a2a_s): a micro-batch's forward through a layer paired with
        another's backward, the four all-to-alls in order on one communication stream, each waiting for the
        computation it needs; what the pair's computation cannot cover is exposed, and an all-to-all holding SMs
        (DeepEP's DEEPEP_SMS of the GPU's, costmodel._sms; NCCL's all-to-all its p2p channels, a2a_channels) slows
        the computation it hides behind by that share.
Also here: which layers of a stage are MoE layers (moe_layers_in, moe_stage_layers) and the sum
over a stage's dense and MoE layers (layer_mix).
"""

from __future__ import annotations

import numpy as np

from costmodel._collectives import all_to_all_s, gather_s, tier
from costmodel._dtypes import ACT_BYTES
from costmodel._hardware import Cluster
from costmodel._layer_compute import (
    ELEM_BWD_FACTOR,
    ELEM_TF_PER_LAYER,
    ELEM_TH_PER_LAYER,
    KERNELS_PER_SUBLAYER,
    gemm_s,
    hbm_s,
)
from costmodel._nccl import ring_channels
from costmodel._strategy import StrategyTable
from costmodel._workloads import Transformer

# Memory-bound kernels of an MoE layer, counted from Megatron-Core core_v0.16.0 (3bec9aa) with moe_router_fusion and
# moe_permute_fusion on (Megatron-Bridge's MoE recipes set both), priced at the HBM rate of every element-wise kernel:
# Router, HBM bytes per token and expert (T E / t a layer): router.py TopKRouter.routing, fused top-k over the fp32
# logits (read 4, write the fp32 probabilities 4 and the boolean routing map 1), the aux-loss scores from the logits
# (read 4, write 4 and 1), the aux loss over the scores (read 4): 22; moe_utils.permute's int32 row-id map of the
# routing map, written once and read by permute and by unpermute: 12.
ROUTING_BYTES_PER_SCORE = 22 + 12
# Permutation, elements of h per token copy: permute 1 (token_dispatcher.py dispatch_preprocess: a gather, read the
# token and write its copy: 2) and unpermute (combine_postprocess: read each copy once: 1); unpermute also writes
# every one of the rank's T / t tokens once (T h / t more elements, moe_layer_costs).
PERMUTE_ELEMS_PER_COPY = 2 + 1
# Sorting the received copies by local expert after the dispatch all-to-all (dispatch_postprocess,
# sort_chunks_by_idxs) and back before the combine (combine_preprocess): read + write each, 2 + 2 elements of h a
# copy; only with more than one local expert (both run under `if self.num_local_experts > 1`).
SORT_ELEMS_PER_COPY = 2 + 2
# Router probabilities kept for backward in fp32 (Megatron-Core --moe-router-dtype fp32), bytes
# per token and expert.
ROUTER_PROB_BYTES = 4
# torch.topk's results a per-op checkpoint saves (torchtitan's policy saves aten.topk: expert choices stable between
# the forward and its recompute): the fp32 score and the int64 expert index, bytes per token and choice.
ROUTER_TOPK_BYTES = 4 + 8
# Kernel launches, priced at the GPU's kernel_overhead_s per sub-layer of KERNELS_PER_SUBLAYER kernels. A dense
# Megatron-Core layer forward launches, with Transformer Engine's fused modules: attention: LayerNormLinear (norm,
# GEMM), fused RoPE (Q, K), fused attention, projection GEMM, bias-dropout-add: 7; MLP: LayerNormLinear (norm, GEMM),
# bias-SwiGLU, FC2 GEMM, bias-dropout-add: 5; 6 a sub-layer (KERNELS_PER_SUBLAYER, costmodel._layer_compute).
# An MoE layer's MLP part forward, besides its expert GEMMs (core_v0.16.0): pre-MLP norm and bias-dropout-add 2; router
# (router.py): gating GEMM, fused top-k, fused aux-loss scores, tokens per expert (sum, all-reduce over tp x cp), fused
# aux loss: 6; dispatcher preprocess (token_dispatcher.py MoEAlltoAllTokenDispatcher.preprocess): tokens per expert,
# input splits, their all-gather over tp x ep, the local slice and its two sums, 5 device-to-host copies of the splits
# (_maybe_dtoh_and_synchronize): 11; permute (row-id map, permute) 2, the all-to-alls of tokens and probabilities 2,
# sort 1, activation 1, unsort 1, combine all-to-all 1, unpermute 1: 9. Total 28.
MOE_FIXED_KERNELS = 2 + 6 + 11 + 9
# Shared experts: their FC1, activation and FC2 (shared_experts.py).
SHARED_EXPERT_KERNELS = 3
# A clamped gated activation (Transformer.glu_clamp, gpt-oss's): Megatron-Core core_v0.16.0 (3bec9aa)
# fusions/fused_bias_geglu.py weighted_bias_quick_geglu_impl clamps the FC1 output's two halves and concatenates them in
# eager PyTorch before its fused kernel (chunk, x_glu.clamp, x_linear.clamp, torch.cat): each clamp reads and writes its
# half, the cat reads and writes the whole, 8 elements of the expert's width a copy forward (its 2 halves x 4); the
# backward, the two clamps' gradients (read the gradient and the input, write it: 3 a half; the cat's gradient is a
# view of each half): 6. Three kernels forward (twice that backward, as every element-wise kernel's). The clamp reruns
# where the activation is recomputed (moe_act).
CLAMP_ELEMS_FWD, CLAMP_ELEMS_BWD = 8, 6
CLAMP_KERNELS = 3
# What the clamp keeps for the backward: torch's clamp saves its input (derivatives.yaml clamp: clamp_backward(grad,
# self, min, max)), the two halves of FC1's output, which the fused kernel kept anyway, and the fused kernel now saves
# the cat's output, a second 16-bit copy of FC1's output: 2 elements of the expert width a copy, 4 bytes. Inside the
# checkpointed activation (moe_act recompute) none of it is kept.
CLAMP_SAVED_BYTES = 4.0
# Experts with biases under a framework whose FC2 bias is added by a loop over the local experts
# (Framework.expert_bias_loop: Megatron-Core core_v0.16.0 experts.py TEGroupedMLP._apply_bias; FC1's bias rides in its
# grouped GEMM): per expert t + b * p on its slice of the FC2 output, then torch.cat. Elements of h a copy (the FC2
# output's rows: every copy the etp group received), forward: the product b p written 1, the sum reading the slice and
# the product and writing 3, the cat reading and writing 2: 6; backward: the gradient's pieces concatenated for the
# split (2) and, for the bias and for the probabilities, a product with the gradient (read 1, write 1) reduced (read
# 1): 2 + 2 x 3 = 8. Two kernels a local expert forward (twice backward). In 16 bits: the probabilities in the
# activations' dtype (fp32 router probabilities, --moe-router-dtype fp32, would widen the product and the sum).
EXPERT_BIAS_ELEMS_FWD, EXPERT_BIAS_ELEMS_BWD = 6, 8
EXPERT_BIAS_KERNELS_PER_LOCAL_EXPERT = 2
# Per local expert: one GEMM for FC1 and one for FC2 (Transformer Engine v2.11, c188b53, GroupedLinear ->
# general_grouped_gemm -> common/gemm/cublaslt_gemm.cu multi_stream_cublas_gemm: a cuBLAS GEMM per expert, round-robin
# over its compute streams); under fp8 each expert's input is quantized by a kernel of its own (grouped_linear.py
# forward, tex.split_quantize over m_splits): one more per expert per GEMM.
KERNELS_PER_LOCAL_EXPERT = 2
# SMs DeepEP's dispatch and combine kernels hold while they run (Megatron-Core core_v0.16.0 transformer_config.py
# moe_deepep_num_sms = 20, passed to deep_ep.Buffer.set_num_sms; the DeepSeek-V3 report, Sec. 3.2.2: 20 SMs suffice
# for its all-to-alls). An all-to-all hidden behind computation takes that share of the GPU from it while it runs.
DEEPEP_SMS = 20
# NCCL's all-to-all (torch.distributed.all_to_all_single -> ProcessGroupNCCL::alltoall_base -> ncclSend / ncclRecv to
# every peer in one ncclGroupStart / ncclGroupEnd, or NCCL's own ncclAlltoAll, which enqueue.cc ncclEnqueueCheck turns
# into the same p2p tasks) runs as one p2p kernel whose grid is one CTA per channel its plan touches (enqueue.cc
# ncclLaunchKernel: grid = countOneBits(plan->channelMask)). NVIDIA/nccl commit
# 5067397c2676d5aed50042fc39e5c8ee96eb0027:
#   graph/paths.cc ncclTopoComputeP2pChannels: p2pnChannels = pow2Up(min(comm->nChannels, NCCL_MAX_P2P_NCHANNELS =
#     MAXCHANNELS = 64)), comm->nChannels the ring / tree channels after ncclTopoPostset (init.cc calls it after);
#     p2pnChannelsPerPeer (ncclTopoComputeP2pChannelsPerPeer, ncclTopoGetNchannels): the least over peers of 2 x the
#     NVLinks to a peer on the node (>= p2pnChannels on the reference nodes) and, to a peer on another node,
#     max(NICs, divUp(NIC GB/s, NCCL_P2P_PER_CHANNEL_NET_BW = 14)); across nodes halved while it x divUp(nRanks,
#     NCCL_MAX_DEV_WORK_P2P_PER_BATCH = 8) > p2pnChannels.
#   enqueue.cc scheduleP2pTasksToPlan / addP2pToPlan: one node: each op on nChannelsMin = p2pnChannelsPerPeer halved
#     while x nRanks > p2pnChannels (more only past 32 x the 512 KiB NVLink chunk a channel); across nodes: up to
#     p2pnChannelsPerPeer, doubling while a part exceeds the 128 KiB network chunk; channel (base + part) mod
#     p2pnChannels, base = reverseBits of the round (one node) or of round / the schedule group (include/channel.h
#     ncclP2pChannelBaseForRound; init.cc ncclP2pSchedule: group = NCCL_P2P_SCHEDULE_GROUP_SIZE = 8, gcd with the
#     ranks on a node). Worked: H100, 32 ranks 8 a node -> ring 16, p2p 16, per peer divUp(50, 14) = 4 (4 x 4 <= 16),
#     4 bases x 4 = 16 CTAs (12% of 132 SMs); 8 ranks in a node -> p2p pow2Up(24) = 32, 8 bases x 4 = 32 (24%).
P2P_PER_CHANNEL_NET_GBps = 14.0
P2P_SCHEDULE_GROUP = 8
# Dropless routing waits on the host for each MoE layer's token counts: Megatron-Core's alltoall dispatcher copies the
# splits and tokens per expert to the host and synchronizes before the EP all-to-all (Megatron-LM d98e8a6,
# megatron/core/transformer/moe/token_dispatcher.py MoEAlltoAllTokenDispatcher.preprocess: cuda_sync_point
# "before_ep_alltoall"; _maybe_dtoh_and_synchronize: self.d2h_event.synchronize(); "before_permutation_1" with a
# capacity factor or --moe-router-padding-for-quantization), and the flex dispatcher's DeepEP normal-mode dispatch
# returns the received counts to the host too; only with --moe-pad-expert-input-to-capacity (drop_and_pad) are the
# shapes static and the wait gone (the path CUDA graphs can capture: the MoE README's "CUDA Graph" section). Past the
# wait the host can queue no further ahead of the GPU than the layer it is in: a layer whose kernels take the host
# longer to launch than the GPU to run them runs at the host's pace (the README's "CPU Overhead Bottleneck": gaps
# between kernels). Priced per MoE layer and micro-batch, each pass the larger of the GPU's work (its compute and the
# exchanges it exposes, tensor and context parallel and the all-to-alls, which run in the host's gaps as the kernels
# do) and its kernels x HOST_S_PER_KERNEL (the kernels moe_launch_units counts, the backward twice the forward's,
# ELEM_BWD_FACTOR), where Framework.moe_host_sync; the forward also pays its expert phase's launches the GPU does not
# cover (expert_launch_excess, below) and each backward pass the stretch it starts behind a wait
# (backward_chunk_excess). (With the exchanges added after the larger of compute and launches instead, a faster GPU
# exposed more of an overlapped all-to-all while the host kept the pass as long: a plan priced slower on a faster GPU.)
# HOST_S_PER_KERNEL: host time per kernel launched from Megatron-Core's eager PyTorch code, the Python call, the
# autograd record, the ATen dispatch and cudaLaunchKernel together (Transformer Engine's GEMMs also build their cuBLASLt
# descriptors and query its heuristic on every call: TransformerEngine c188b53 common/gemm/cublaslt_gemm.cu
# cublas_gemm, one call per expert through multi_stream_cublas_gemm). Not measured here (no GPU); taken from the
# published micro-batch pair of one layout: Megatron-Bridge's Qwen3-30B-A3B on 8 B200 (TP 1, PP 1, EP 8, GBS 512, seq
# 4096; docs/performance-summary-archive.md at 067f987d) ran 9691 tokens/s/GPU at micro-batch 1 (26.02 container) and
# 26695 at micro-batch 4 (26.02.01): a layer and micro-batch of b sequences took 4096 b / (tokens/s x 48 layers) =
# 8.805 ms at b = 1 and 12.786 ms at b = 4. Priced as the larger of the GPU's work and the launches, b = 4 is the GPU's
# (its work a quarter of it a sequence, 3.2 ms, is under b = 1's 8.805 ms) and b = 1 the host's alone: the forward's
# 98 kernels and the backward's 196 (moe_launch_units, under fp8) in 8.805 ms, 29.95 us each: 30 us. (Read as the line
# through the two, a + 1.327 ms x b, its 7.48 ms that no sequence pays for gave the 25 us priced while the exchanges
# came after the launches.) The pair spans two containers (26.02, 26.02.01), and the container alone moved the H100
# layout below by 1.77x: part of the 8.805 ms may be the older container's, not host time; a measurement would settle
# it. Rows in view when it was chosen: that pair, the validation set's Qwen3-30B-A3B rows on 8 B200 (the pair's b = 1
# point: +2.9% at 30 us, -12.4% at 25 us) and on 16 H100 (its 26.02 figure, 5113 tokens/s, ran at 9058 in the 26.02.01
# container with the same layout: +5.5% at 30 us, -10.1% at 25 us against the later figure).
HOST_S_PER_KERNEL = 30e-6
# The wait splits a forward into stretches, from one MoE layer's wait to the next's; past a wait the GPU has drained,
# so the host and the GPU start each stretch together and a kernel runs no earlier than it is launched nor than the
# one before it ends: a stretch lasts max over k of (the host's time to launch its first k kernels + the GPU's time of
# the rest), not the larger of its two totals. A stretch opens with the layer's expert phase (token_dispatcher.py at
# d98e8a6, MoEAlltoAllTokenDispatcher: the sync "before_ep_alltoall" sits after permute, then the tokens' and the
# probabilities' all-to-alls, the sort by local expert, the shared experts' FC1 (token_dispatch), experts.py's FC1
# grouped GEMM, the activation, FC2; DeepEP's normal-mode dispatch waits on the host for the received counts inside
# fused_a2a.py's fused_dispatch, before its dispatch kernel) and ends with the next layer's attention, router and
# permutation. Where the expert phase takes the host longer to launch than the dispatch all-to-all and its own kernels
# take the GPU, the attention, router and permutation behind it start only once the host has launched it: the pass is
# the expert phase's launches + the rest's GPU time (expert_launch_excess). Kernels the host launches in the phase
# besides the experts' and the shared experts': the tokens' and the probabilities' all-to-alls and the sort (DeepEP:
# its dispatch kernel, the multi-hot map and the permutation), and the activation: 4. Under the EP A2A overlap each
# stretch also holds the paired micro-batch's backward, whose GPU time this does not split: there the larger of the
# totals stays (host_f alone).
EXPERT_PHASE_FIXED_KERNELS = 4
# The backward has no wait of its own, but it starts behind one: in a forward after dropless routing's last wait the
# host launches no further ahead of the GPU than the rest of that layer, and Megatron-Core's pipeline without
# interleaving drains the GPU between every forward and backward pass besides (Megatron-LM d98e8a6,
# megatron/core/pipeline_parallel/p2p_communication.py _communicate: torch.cuda.synchronize() after each batched
# send / receive where config.batch_p2p_comm and config.batch_p2p_sync, both True by default in
# model_parallel_config.py; megatron/training/arguments.py turns overlap_p2p_comm off without a virtual pipeline and
# argument_utils.py sets batch_p2p_comm = not overlap_p2p_comm). So each backward pass of a model chunk (each micro-
# batch, each of the v chunks a stage holds interleaved) is a stretch that starts on an empty GPU and runs its MoE
# layers in reverse: each layer's expert phase first (the combine's gradient all-to-all, then a dgrad and a wgrad GEMM
# per local expert, with their quantization), then its attention. Its n MoE layers (GPU G, host H a layer, the phase
# GPU gx, host hx = ELEM_BWD_FACTOR x the forward phase's launches) take max over k of (host time of the first k
# launches + GPU time of the rest) = max(n G + e, n H + t): e = hx - a_c - gx past 0 (the first phase's launches
# outlast the all-to-all and its own GPU time: what the forward's expert_launch_excess is, for the backward), t = (G -
# gx) - (H - hx) past 0 (the GPU time the last attention leaves after its launches), where the layer terms price
# n max(G, H) (backward_chunk_excess). A recomputed MoE block (full recompute, or the "moe" module) waits again on the
# host inside the backward, before each layer's backward: there each MoE layer is a stretch of its own. Not priced:
# the head start the last stage's output layer backward gives the host (its first chunk then pays less), and
# stretches under the EP A2A overlap (as the forward's).
# Bytes per element of an fp8 dispatch (Framework.fp8_dispatch): one e4m3 byte and one fp32 scale
# per 128 channels (DeepSeek-V3 report, arXiv:2412.19437, Sec. 3.3.2: 1 x 128 tile-wise activation
# scaling; DeepEP's dispatch takes x as an fp8 tensor and a [tokens, hidden / 128] fp32 scale tensor).
FP8_DISPATCH_BYTES = 1.0 + 4.0 / 128.0


def remote_nodes_per_token(model: Transformer, e, cluster: Cluster, u=1):
    """Expected other nodes a token's k experts sit on, the ep ranks (stride u = etp) spread over
    min(ep, ceil(ep u / gpus_per_node)) nodes of E / nodes consecutive experts each, the k chosen
    uniformly without repeats: (nodes - 1) x (1 - P(none of k on a given node)), P = prod_i
    (E - E / nodes - i) / (E - i). 0 inside a node.

    Group-limited routing (model.router_groups G, router_group_topk M < G; DeepSeek-V3 Sec.
    2.1.2, Megatron-Core's group_limited_topk): M groups are picked by the sum of their best
    k / M scores and the k experts are the best of the picked groups, so (scores alike across
    experts) each picked group gives the token k / M experts, drawn uniformly within it. Where
    G / nodes = c is whole (a node holds c groups), a node misses the token when none of its
    groups is picked: P = (G - c)_M / (G)_M (falling factorials); where nodes / G is whole (a
    group spans nodes / G nodes), it misses when its group is not picked, or is and its E / nodes
    experts get none of the group's k / M: P = 1 - M / G + M / G prod_i (E / G - E / nodes - i) /
    (E / G - i), i < k / M; where neither divides, the unlimited P (conservative)."""
    e = np.asarray(e, dtype=np.float64)
    nodes = np.maximum(np.minimum(e, np.ceil(e * u / cluster.gpus_per_node)), 1.0)
    E, k = float(model.experts), model.experts_per_token

    def miss_of(pool, held, draws):  # P(``draws`` experts drawn from ``pool`` avoid ``held`` of them)
        i = np.arange(draws, dtype=np.float64)
        return np.prod(np.maximum(((pool - held)[..., None] - i) / (pool - i), 0.0), axis=-1)

    miss = miss_of(E, E / nodes, k)
    G, M = float(model.router_groups), model.router_group_topk
    if M < G:
        c = G / nodes  # groups per node
        r = np.arange(M, dtype=np.float64)
        held = np.prod(np.maximum(((G - c)[..., None] - r) / (G - r), 0.0), axis=-1)
        spans = (1.0 - M / G) + M / G * miss_of(E / G, E / nodes, k // M)
        miss = np.where(np.mod(G, nodes) == 0, held, np.where(np.mod(nodes, G) == 0, spans, miss))
    return (nodes - 1.0) * (1.0 - miss)


def routed_copies(model: Transformer, T, t):
    """Token copies the busiest rank's experts take per micro-batch: cf k T / t (module docstring)."""
    return model.capacity_factor * model.experts_per_token * T / t


def moe_launch_units(local, fp8_quant, shared: bool, extra=0.0):
    """Kernel-overhead units (kernel_overhead_s each, KERNELS_PER_SUBLAYER kernels a unit) of an MoE layer's forward:
    its attention sub-layer's 1 and its MLP part's launches, MOE_FIXED_KERNELS, the shared experts' and
    KERNELS_PER_LOCAL_EXPERT per local expert, twice under fp8 quantization (``fp8_quant``, per row), and ``extra``
    (expert_extra_kernels)."""
    n = (MOE_FIXED_KERNELS + SHARED_EXPERT_KERNELS * shared
         + KERNELS_PER_LOCAL_EXPERT * local * (1.0 + np.asarray(fp8_quant, dtype=np.float64)) + extra)
    return 1.0 + n / KERNELS_PER_SUBLAYER


def clamp_saved_bytes(model: Transformer) -> float:
    """Bytes an element of the expert width a routed copy keeps beyond the gated activation's own for a clamped
    activation (Transformer.glu_clamp; CLAMP_SAVED_BYTES), 0.0 without one."""
    return CLAMP_SAVED_BYTES if model.glu_clamp is not None else 0.0


def expert_extra_terms(model: Transformer, copies, u, local, bias_loop: bool):
    """(forward elements, backward elements, kernels) a forward of the routed experts' element-wise work outside their
    fused kernels adds: a clamped activation's clamps (Transformer.glu_clamp: CLAMP_ELEMS_FWD / _BWD of the expert's
    width a copy) and, where ``bias_loop`` and the experts have biases, the FC2 bias loop (EXPERT_BIAS_ELEMS_FWD / _BWD
    of h a row of the FC2 output, u copies; EXPERT_BIAS_KERNELS_PER_LOCAL_EXPERT a local expert and the cat). Also
    (forward elements of the clamp alone), which a recomputed activation runs again."""
    clamp = model.glu_clamp is not None
    loop = bias_loop and model.bias
    cf = CLAMP_ELEMS_FWD * copies * model.expert_ffn if clamp else 0.0 * copies
    fwd = cf + (EXPERT_BIAS_ELEMS_FWD * u * copies * model.hidden if loop else 0.0)
    bwd = (CLAMP_ELEMS_BWD * copies * model.expert_ffn if clamp else 0.0) + (
        EXPERT_BIAS_ELEMS_BWD * u * copies * model.hidden if loop else 0.0)
    kernels = (CLAMP_KERNELS if clamp else 0.0) + (
        (EXPERT_BIAS_KERNELS_PER_LOCAL_EXPERT * local + 1.0) if loop else 0.0)
    return fwd, bwd, kernels, cf


def permutation_elems(copies, T, t, u, local):
    """(permute + unpermute, sort + unsort) elements of h one MoE layer's permutation kernels move forward: permute
    and unpermute PERMUTE_ELEMS_PER_COPY a copy and unpermute's T / t tokens written; the sort by local expert and
    back SORT_ELEMS_PER_COPY a copy the etp group holds (u copies), with more than one local expert only."""
    return PERMUTE_ELEMS_PER_COPY * copies + T / t, np.where(local > 1, SORT_ELEMS_PER_COPY, 0) * u * copies


def expert_cast_s(model: Transformer, quant, copies, u, gpu):
    """(forward, backward) seconds of the fp8 quantization before the expert GEMMs, ``quant`` bytes an element (per
    row; Framework.expert_fp8_cast_bytes, 0 off fp8): FC1's input (u copies x h) and FC2's (copies x ffn) forward,
    their output gradients (copies x (mats - 1) ffn, u copies x h) backward."""
    h, fe = model.hidden, model.expert_ffn
    return (hbm_s(quant * (u * copies * h + copies * fe), gpu),
            hbm_s(quant * (copies * (model.mlp_matrices - 1) * fe + u * copies * h), gpu))


def shared_expert_cast_s(model: Transformer, T, t, gpu, casts):
    """(forward, backward) seconds the shared experts' linear layers spend casting to fp8 outside their GEMMs, as the
    dense layer's (costmodel._layer_compute.fp8_cast_parts_s; ``casts`` as it takes them, None: none): FC1's input
    (T h: the pre-MLP norm's output, which an MoE layer's separate norm writes in 16 bits, so at the first count) and
    FC2's (T fs / t), their output gradients (T (mats - 1) fs / t, T h) and the weights (mats h fs / t), fs the shared
    experts' width together; where the profile casts a saved input again in the backward and each FC1 / gate layer
    its own input (fp8_cast_columns' seventh and ninth), so. Zeros without shared experts or casts."""
    fs = model.shared_experts * model.shared_expert_ffn
    zero = np.zeros_like(np.asarray(T, dtype=np.float64))
    if casts is None or not fs:
        return zero, zero
    cx, cw, cg, cwb = casts[:4]
    cxb, nm = (casts[6], casts[8]) if len(casts) > 6 else (0.0, 1.0)
    h, mats = model.hidden, model.mlp_matrices
    w = mats * h * fs / t
    x = T * (h * nm + fs / t)  # the inputs' elements cast
    return (hbm_s(cx * x + cw * w, gpu) + zero,
            hbm_s(cg * T * ((mats - 1) * fs / t + h) + cwb * w + cxb * x, gpu) + zero)


def expert_launch_excess(x_kernels, a_d, gpu_x):
    """Seconds a forward's expert phase adds, after dropless routing's wait, over its GPU time (HOST_S_PER_KERNEL
    comment): the host's launches of its ``x_kernels`` kernels (per row) less what the GPU runs meanwhile, the dispatch
    all-to-all ``a_d`` (exposed, priced in ep_fwd) and the phase's kernels ``gpu_x``; 0 where the GPU is the slower.
    The layer's forward is then its GPU time plus this: the attention, router and permutation after the phase wait
    for it to be launched."""
    return np.maximum(x_kernels * HOST_S_PER_KERNEL - a_d - gpu_x, 0.0)


def backward_chunk_excess(n_m, chunks, d, e, t):
    """Seconds dropless routing's host launches add to a stage's backward per micro-batch, over n max(G, H) a chunk
    of n MoE layers (EXPERT_PHASE_FIXED_KERNELS's backward note): max(n G + e, n H + t) - n max(G, H) = max(n d + e, t)
    - n max(d, 0) a chunk, d = G - H, over ``chunks`` chunks of n = n_m / chunks: max(n_m d + chunks e, chunks t) -
    n_m max(d, 0). ``n_m``, ``chunks``: the stages' MoE layers and backward chunks; ``d``, ``e``, ``t``: the MoE
    layer's (layer_terms' xb_d, xb_e, xb_t: 0 where not priced, making the excess 0); 0 on a stage without MoE
    layers. Arrays broadcasting."""
    return np.where(n_m > 0, np.maximum(n_m * d + chunks * e, chunks * t) - n_m * np.maximum(d, 0.0), 0.0)


def backward_chunks(rows):
    """(k, N) or (1, N) backward stretches of a stage per micro-batch for backward_chunk_excess: v under the
    interleaved schedule, 1 otherwise, every MoE layer its own where the MoE block is recomputed (full recompute, or
    the selective "moe" module); None where dropless routing's wait is not priced so (no wait, or the EP A2A
    overlap)."""
    from costmodel._codes import MODULE_BIT, RECOMPUTE
    from costmodel._pipeline_terms import SCHED

    fw = rows.fw
    if not (rows.moe and fw.moe_host_sync and not fw.overlap_ep):
        return None
    chunks = np.where(rows.sched == SCHED["interleaved"], rows.v, 1).astype(np.float64)[None, :]
    again = rows.rc == RECOMPUTE.index("full")
    if rows.rcm is not None:
        again = again | ((rows.rc == RECOMPUTE.index("selective")) & ((rows.rcm & MODULE_BIT["moe"]) > 0)[None, :])
    return np.where(again, rows.n_m, chunks)


def overlapped_a2a_s(Af, Mf, Mb, Mw, Ab, a_d, a_c, sm_frac):
    """Exposed time of one layer's four all-to-alls under Megatron-Core's EP A2A overlap, per pair of a micro-batch's
    forward and another's backward through the layer (core_v0.16.0 models/common/model_chunk_schedule_plan.py
    TransformerLayerSchedulePlan.run; pipeline_parallel/combined_1f1b.py): one communication stream runs combine
    backward (a_d: the gradient goes expert-ward), dispatch forward (a_d), dispatch backward (a_c), combine forward
    (a_c), in that order; one computation stream runs attention forward Af (its router and permute included), expert
    MLP backward Mb, its weight gradients Mw (--delay-wgrad-compute), expert MLP forward Mf, attention backward Ab.
    Each waits for what it needs: dispatch forward for Af, Mb for combine backward, dispatch backward for Mb, Mf for
    dispatch forward and the computation before it, combine forward for Mf, Ab for dispatch backward. The pair ends
    when both streams do; exposed = its length - (Af + Mb + Mw + Mf + Ab). While hidden, an all-to-all holding
    ``sm_frac`` of the GPU's SMs (comm_sm_fraction) slows the computation beside it by that share of its own length."""
    x = np.maximum(Af, a_d)  # attention forward and combine backward done
    mb_end, df_end = x + Mb, x + a_d
    db_end = np.maximum(mb_end, df_end) + a_c
    mf_end = np.maximum(df_end, mb_end + Mw) + Mf
    cf_end = np.maximum(mf_end, db_end) + a_c
    ab_end = np.maximum(mf_end, db_end) + Ab
    exposed = np.maximum(cf_end, ab_end) - (Af + Mb + Mw + Mf + Ab)
    hidden = np.maximum(2.0 * (a_d + a_c) - exposed, 0.0)
    return exposed + sm_frac * hidden


def moe_layer_costs(model: Transformer, cluster: Cluster, lc: dict, t, sp, e, peak, overlap_ep: bool,
                    per_node: bool = False, u=1, etp_link=None, fp8_dispatch=False, *, fp8_cast=0.0,
                    sm_frac=0.0, shared_cast=None, host_sync=False, bias_loop=False) -> dict:
    """Per-micro-batch times of one MoE layer on one GPU (the keys of layer_costs; xcast_f / xcast_b: the expert
    GEMMs' fp8 quantization forward and backward; ep_fwd / ep_bwd: the exposed dispatch + combine all-to-alls of
    forward and of backward), from the dense layer's costs ``lc`` at the same shape (its attention core, attention
    projections (attn_gemm), kernel overhead and tp / cp terms are the MoE layer's too). Routed experts over ``e`` = ep
    ranks, each split over ``u`` = etp ranks: the etp group all-gathers the copies it received (u x as many rows at
    1 / u of the expert's width) and reduce-scatters the results, on the link its u consecutive ranks span (in ep_fwd
    / ep_bwd; ``etp_link``: that link's (bandwidth, latency) where the caller has it, as layer_costs's tp_link).
    ``fp8_dispatch`` (bool, per row): the dispatch direction (forward dispatch, and its mirror in backward: the
    combine's gradient sent to the experts) moves FP8_DISPATCH_BYTES an element, the combine direction 16 bits
    (Framework.fp8_dispatch). ``fp8_cast`` (per row): HBM bytes an element of an expert GEMM's input or output
    gradient its fp8 quantization moves (0: none; Framework.expert_fp8_cast_bytes on fp8 rows), its kernels counted
    too; ``shared_cast``: the dense layer's fp8 cast bytes, which the shared experts move (shared_expert_cast_s; None:
    none); ``host_sync`` (per row): dropless routing's wait on the host (HOST_S_PER_KERNEL; host_f: the host's time
    to launch the layer's forward kernels, 0 without the wait; host_x: what its expert phase's launches add to the
    forward's GPU time, expert_launch_excess, 0 without the wait or under the EP A2A overlap). ``overlap_ep``: the
    all-to-alls under the EP A2A overlap (overlapped_a2a_s; ``sm_frac`` the share of the SMs they hold). The
    heterogeneous evaluator passes as ``cluster`` a stage configuration's pool (gpu, gpus_per_node and the scale-up /
    scale-out links as arrays). ``bias_loop``: Framework.expert_bias_loop; the experts' element-wise work outside their
    fused kernels (expert_extra_terms) rides in xcast_f / xcast_b with the quantization, its kernels in the launches."""
    gpu = cluster.gpu
    h, E, fe = model.hidden, model.experts, model.expert_ffn
    mats, act = model.mlp_matrices, model.activation
    T = lc["T"]
    copies = routed_copies(model, T, t)
    local = E / e  # experts per GPU (each 1 / u of its width)
    rows = u * copies / local  # tokens per local expert's GEMM, after the etp all-gather
    fs = model.shared_experts * model.shared_expert_ffn  # the shared experts as one MLP
    split = np.where(sp, t, 1)
    router = gemm_s(T / t, E, h, peak, gpu)
    attn_gemm = lc["attn_gemm"] + router  # attention projections and the router
    mlp_gemm = local * (gemm_s(rows, (mats - 1) * fe / u, h, peak, gpu) + gemm_s(rows, h, fe / u, peak, gpu))
    if fs:  # the shared experts' FC1 and FC2
        shared_fc1, shared_fc2 = gemm_s(T, (mats - 1) * fs / t, h, peak, gpu), gemm_s(T, h, fs / t, peak, gpu)
        mlp_gemm = mlp_gemm + shared_fc1 + shared_fc2
    # element-wise bytes: the attention part with the router and the permutation (the attention node of the overlap),
    # the expert part with the sort by local expert and the activation
    permute, sort = permutation_elems(copies, T, t, u, local)  # (elements of h)
    attn_bytes = ACT_BYTES * (ELEM_TH_PER_LAYER * T * h / split + permute * h) + ROUTING_BYTES_PER_SCORE * T * E / t
    mlp_bytes = ACT_BYTES * (ELEM_TF_PER_LAYER[act] * (T * fs / t + copies * fe) + sort * h)
    quant = np.asarray(fp8_cast, dtype=np.float64)
    xcast_f, xcast_b = expert_cast_s(model, quant, copies, u, gpu)
    scast_f, scast_b = shared_expert_cast_s(model, T, t, gpu, shared_cast)
    extra_f, extra_b, extra_k, clamp_f = expert_extra_terms(model, copies, u, local, bias_loop)
    xcast_f = xcast_f + scast_f + hbm_s(ACT_BYTES * extra_f, gpu)
    xcast_b = xcast_b + scast_b + hbm_s(ACT_BYTES * extra_b, gpu)
    units = moe_launch_units(local, quant > 0, bool(fs), extra_k)
    overhead = lc["overhead"] * 0.5 * units  # lc["overhead"]: the dense layer's two sub-layer units
    a_d, a_c = one_way_a2a_s(model, cluster, copies, e, u, etp_link, fp8_dispatch, per_node)
    elem_a, elem_m = hbm_s(attn_bytes, gpu), hbm_s(mlp_bytes, gpu)
    if overlap_ep:
        ov_a, ov_m = lc["overhead"] * 0.5, lc["overhead"] * 0.5 * (units - 1.0)
        Af = attn_gemm + lc["attn"] + elem_a + ov_a
        Mf = mlp_gemm + elem_m + ov_m + xcast_f
        Ab = 2.0 * (attn_gemm + lc["attn"] + elem_a + ov_a)
        Mb = mlp_gemm + 2.0 * (elem_m + ov_m) + xcast_b
        exposed = 0.5 * overlapped_a2a_s(Af, Mf, Mb, mlp_gemm, Ab, a_d, a_c, sm_frac)
        unpaired = a_d + a_c - exposed  # what a pass no pair covers exposes more (unpaired_share)
    else:
        exposed = a_d + a_c
        unpaired = 0.0 * exposed
    host_f = np.where(host_sync, units * KERNELS_PER_SUBLAYER * HOST_S_PER_KERNEL, 0.0) + 0.0 * overhead  # (N,)
    # the expert phase (HOST_S_PER_KERNEL comment): its kernels, and their GPU time: the expert (and shared expert)
    # GEMMs, their element-wise kernels but the unsort after them, their fp8 quantization and their launches' share
    x_kernels = (EXPERT_PHASE_FIXED_KERNELS + SHARED_EXPERT_KERNELS * bool(fs)
                 + KERNELS_PER_LOCAL_EXPERT * local * (1.0 + (quant > 0)) + extra_k)  # (N,)
    gpu_x = (mlp_gemm + elem_m - 0.5 * hbm_s(ACT_BYTES * sort * h, gpu) + xcast_f
             + lc["overhead"] * 0.5 * x_kernels / KERNELS_PER_SUBLAYER)
    on = np.asarray(host_sync) & (not overlap_ep)
    host_x = np.where(on, expert_launch_excess(x_kernels, a_d, gpu_x), 0.0)
    # the backward's expert phase (backward_chunk_excess): its launches less its GPU time (dgrad and wgrad GEMMs, the
    # element-wise kernels and launches twice, the output gradients' quantization), and the combine's gradient
    # all-to-all before it; xb_on: 1.0 where priced
    xb_q = ELEM_BWD_FACTOR * x_kernels * HOST_S_PER_KERNEL - (
        2.0 * mlp_gemm + ELEM_BWD_FACTOR * (gpu_x - mlp_gemm - xcast_f) + xcast_b)
    # what Megatron-Core's selective recompute modules run again (costmodel._layer_terms.module_terms): "moe" the MoE
    # block's forward (router GEMM, expert and shared-expert GEMMs, routing, permutation, activation, their launches
    # and fp8 quantization; its all-to-alls: ep_fwd), "moe_act" the routed experts' activation kernel (read the FC1
    # output, write FC2's input: ELEM_TF_PER_LAYER elements of a copy's expert width), "shared_experts" their FC1,
    # activation and FC2
    perm_s = hbm_s(ACT_BYTES * permute * h + ROUTING_BYTES_PER_SCORE * T * E / t, gpu)
    moe_f = router + mlp_gemm + perm_s + elem_m + lc["overhead"] * 0.5 * (units - 1.0) + xcast_f
    act_f = hbm_s(ACT_BYTES * (ELEM_TF_PER_LAYER[act] * copies * fe + clamp_f), gpu)
    shared_f = (shared_fc1 + shared_fc2
                + hbm_s(ACT_BYTES * ELEM_TF_PER_LAYER[act] * T * fs / t, gpu) + scast_f) if fs else 0.0 * T
    return {**lc, "gemm": attn_gemm + mlp_gemm, "elem": elem_a + elem_m, "overhead": overhead, "xcast_f": xcast_f,
            "xcast_b": xcast_b, "ep_fwd": exposed, "ep_bwd": exposed, "ep_x": unpaired, "host_f": host_f,
            "host_x": host_x + 0.0 * overhead, "xb_q": np.where(on, xb_q, 0.0), "xb_a": a_c + 0.0 * overhead,
            "xb_on": np.where(on, 1.0, 0.0) + 0.0 * overhead,
            "moe_f": moe_f, "act_f": act_f, "shared_f": shared_f}


def unpaired_share(interleaved, p, m, v, j, group=None):
    """Share of stage ``j``'s forward passes, and of its backward passes, that Megatron-Core's EP A2A overlap runs
    alone, their all-to-alls exposed (arrays broadcasting). The overlap pairs one micro-batch's forward with another's
    backward only in the steady state of the combined 1F1B schedules (core_v0.16.0, 3bec9aa,
    pipeline_parallel/combined_1f1b.py): without a pipeline the first forward and the last backward run alone
    (combined_1f1b_schedule_for_no_pipelining), 1 of m; interleaved, the warm-up forwards and the cool-down backwards,
    w = (p - j - 1) 2 + (v - 1) N + 1 of m v (schedules.py get_pp_rank_microbatches: Megatron's warm-up count with
    microbatch_group_size_per_vp_stage N, ``group``, and the overlap's one extra forward; N = p where p divides m,
    costmodel._pipeline_terms.interleave_groups; None: p), at most all; a pipeline without
    interleaving is not overlapped at all (transformer_config.py: EP A2A overlap with pp > 1 needs
    virtual_pipeline_model_parallel_size; forward_backward_pipelining_without_interleaving has no combined path): 1."""
    p, m, v = (np.asarray(x, dtype=np.float64) for x in (p, m, v))
    paired = np.asarray(interleaved) | (p == 1)
    w = (p - j - 1.0) * 2.0 + (v - 1.0) * (p if group is None else np.asarray(group, dtype=np.float64)) + 1.0
    return np.where(paired, np.minimum(w / (m * v), 1.0), 1.0)


def one_way_a2a_s(model: Transformer, cluster: Cluster, copies, e, u, etp_link, fp8_dispatch, per_node):
    """(dispatch, combine) seconds of one MoE layer's all-to-all each way with the etp group's all-gather or
    reduce-scatter: the ``copies`` (h values each) over ``e`` ranks ``u`` apart (all_to_all_s; a per-node dispatcher
    sends each of the copies / k tokens once per other node holding one of its experts), the dispatch at
    FP8_DISPATCH_BYTES an element where ``fp8_dispatch``, the combine at 16 bits (moe_layer_costs)."""
    gpu, h = cluster.gpu, model.hidden
    remote = remote_nodes_per_token(model, e, cluster, u) if per_node else None

    def one_way(nbytes):  # one all-to-all of the copies at nbytes an element
        net = None if remote is None else nbytes * (copies / model.experts_per_token) * h * remote
        return all_to_all_s(nbytes * copies * h, e, cluster, gpu, net, stride=u)

    combine = one_way(ACT_BYTES)
    dispatch = one_way(np.where(fp8_dispatch, FP8_DISPATCH_BYTES, ACT_BYTES)) if np.any(fp8_dispatch) else combine
    if np.any(np.asarray(u) > 1):  # the etp group's all-gather (dispatch) and reduce-scatter (combine)
        etp_bw, etp_lat = tier(u, cluster, gpu) if etp_link is None else etp_link
        g = gather_s(ACT_BYTES * u * copies * h, u, etp_bw, etp_lat)
        dispatch, combine = dispatch + g, combine + g
    return dispatch, combine


def comm_sm_fraction(per_node, sms, nccl_ctas):
    """Share of the GPU's SMs (``sms``, costmodel._sms) the all-to-all kernels hold: DEEPEP_SMS for a per-node
    dispatcher (DeepEP, HybridEP counted as DeepEP); ``nccl_ctas`` (a2a_channels: the CTAs of NCCL's grouped
    send / recv) for NCCL's all-to-all. Arrays broadcast."""
    return np.where(per_node, DEEPEP_SMS, nccl_ctas) / np.asarray(sms, dtype=np.float64)


def _pow2_up(x):
    """The least power of two >= x (x >= 1; NCCL's pow2Up)."""
    return 2.0 ** np.ceil(np.log2(np.maximum(np.asarray(x, dtype=np.float64), 1.0)))


def _pow2_down(x):
    """The greatest power of two <= x, at least 1 (NCCL's pow2Down, floored at one channel)."""
    return 2.0 ** np.floor(np.log2(np.maximum(np.asarray(x, dtype=np.float64), 1.0)))


def a2a_channels(size, per_node, ring_one_node, ring_per_rank, net_Bps):
    """CTAs (one per p2p channel, each on an SM for the whole call) of NCCL's all-to-all over ``size`` ranks with
    ``per_node`` of them on a node (the rest across nodes), on a GPU whose ring channel table is (``ring_one_node``,
    ``ring_per_rank``: costmodel._nccl.ring_channel_table) and whose NIC carries ``net_Bps``. The derivation
    (P2P_* constants): p2p = pow2Up(the communicator's ring channels, costmodel._nccl.ring_channels); a round of the
    p2p schedule puts its peer's send / recv on consecutive channels from a base, and the kernel's grid is the union:
    inside one node the size rounds' bases are distinct, each op on pow2Down(p2p / size) channels; across nodes the
    rounds of a schedule group (gcd(8, per_node) ranks) share one base, each op on the per-peer network channels
    pow2Up(ceil(NIC GB/s / 14)) halved while they x ceil(size / 8) exceed p2p; at most p2p. Arrays broadcast.
    Assumes each peer's share is >= its channels x 128 KiB (any MoE layer's tokens past a few hundred: below that
    NCCL uses fewer channels per op and the union is smaller)."""
    size, per_node = (np.asarray(x, dtype=np.float64) for x in (size, per_node))
    across = size > per_node
    p2p = _pow2_up(ring_channels(across, per_node, ring_one_node, ring_per_rank))
    group = np.gcd(P2P_SCHEDULE_GROUP, np.maximum(per_node, 1).astype(np.int64))
    net = _pow2_up(np.ceil(np.asarray(net_Bps, dtype=np.float64) / (P2P_PER_CHANNEL_NET_GBps * 1e9)))
    per_op = np.where(across, np.minimum(net, _pow2_down(p2p / np.ceil(size / P2P_SCHEDULE_GROUP))),
                      _pow2_down(p2p / size))
    bases = np.where(across, np.ceil(size / group), size)
    return np.minimum(p2p, bases * per_op)


def moe_stage_layers(model: Transformer, table: StrategyTable, idx, n):
    """(N, k) MoE layers of each stage column (idx, n as _stages gives them): the stage covers
    layers [lo, lo + n), lo = idx * n for uniform stages, else the layers of the stages before."""
    if model.moe_layers == model.layers:  # every layer an MoE layer (Mixtral, Qwen3-MoE)
        return n
    lo = idx * n if table.stage_layers is None else np.cumsum(n, axis=1) - n
    return moe_layers_in(model, lo, n)


def layer_mix(n_d, a, n_m, b, first_only: bool = False):
    """n_d * a + n_m * b of stages holding n_d dense and n_m MoE layers; ``first_only``: (k, N)
    stage arrays whose n_d is zero past the first stage row (the dense layers all on stage 0), where
    n_m * b is one product and n_d * a is added on that row only (the same sums bit for bit:
    0 * a + x = x)."""
    if not first_only:
        return n_d * a + n_m * b
    out = n_m * b
    out[0] += n_d[0] * (a[0] if np.ndim(a) == 2 else a)
    return out


def moe_layers_in(model: Transformer, lo, n):
    """MoE layers among layers [lo, lo + n) (any broadcasting arrays), as floats."""
    if model.is_moe and model.moe_layer_freq == 1:  # every layer past the dense ones: that part of [lo, lo + n)
        return np.clip(lo + n - model.dense_layers, 0, n).astype(np.float64)
    return (model.moe_layers_before(lo + n) - model.moe_layers_before(lo)).astype(np.float64)


def expert_groups(table: StrategyTable):
    """(ep, edp, etp) columns: the expert-parallel degree, the expert-data-parallel ranks
    tp cp dp / (ep etp) and the expert-tensor-parallel degree (module docstring)."""
    e, u = table["ep"], table["etp"]
    return e, np.maximum(table["dp"] * table["cp"] * table["tp"] // (e * u), 1), u


def expert_exchange(rows, edp):
    """The expert-data-parallel exchange of a block's stages where dp keys no configuration (costmodel._block
    data_parallel; ``rows`` a costmodel._configurations.Rows, ``edp`` the stages' edp ranks): (ExchangeCoef per stage
    (k, N) or (1, N), the link's ``nodes`` and ``per_node`` there, for the exchange's SM share). Each stage's group
    is edp ranks ep etp apart on its pool (costmodel._collectives.pool_collective_link), its plan exchange_plan's of
    the routed experts at (tp, edp, overlap, pp, ep etp), priced by dp_exchange_coef once per distinct combination of
    what those read (ep etp, dp cp, tp, pool, ZeRO, pp; the overlap and the precision only where the framework's
    exchange reads them: a few thousand in a block of 40,000 rows) and gathered back; ZeRO-3's exchange per
    micro-batch times the row's m, ZeRO-2's reduce-scatter of each micro-batch past the first added (m - 1) times,
    as the dense exchange's costmodel._block.unkeyed_exchange prices it (the same sums: dp_exchange_coef at m is
    these at m = 1, ZeRO-3's times m)."""
    from costmodel._collectives import pool_collective_link
    from costmodel._data_parallel import (
        ExchangeCoef,
        dp_exchange_coef,
        exchange_plan,
        exchange_reads_precision,
        per_step_exchange,
    )
    from costmodel._distinct import distinct_rows

    fw = rows.fw
    eu, dc = rows.e * rows.u, rows.d * rows.c
    by_prec = exchange_reads_precision(fw)
    group = distinct_rows(eu, dc, rows.t, rows.pool)[1]  # the group's layout first (a small dense key), then the rest
    first, inv = distinct_rows(group, rows.zero, rows.p, *((rows.overlap,) if fw.dp_buckets_need_overlap else ()),
                               *((rows.prec,) if by_prec else ()))
    e_f, dc_f, t_f, pool_f, zero_f, p_f, ov_f, prec_f, edp_f = rows.at_first(
        first, inv, eu, dc, rows.t, rows.pool, rows.zero, rows.p, rows.overlap, rows.prec, edp)
    firsts = (e_f, dc_f, t_f, pool_f, zero_f, p_f, ov_f, prec_f, edp_f)

    def price(sel):  # the entries sel of the distinct combinations: the exchange's coefficients, its link's layout
        e, dc, t, pool, zero, p, ov, prec, g = (x if sel is None else x[sel] for x in firsts)
        link = pool_collective_link(rows.pa, pool, e, np.maximum(dc * t // e, 1))  # edp ranks ep etp apart
        plan = exchange_plan(fw, rows.model, t, g, ov, p, ep_etp=e)
        return (*dp_exchange_coef(zero, 1, g, link, fw=fw, prec=prec, plan=plan), link.nodes, link.per_node)

    keyed_by = [x for x, on in zip(firsts[:8], (1, 1, 1, 1, 1, 1, fw.dp_buckets_need_overlap, by_prec), strict=True)
                if on]  # (the columns the combinations are distinct in)
    *coef, nodes, per_node = price(None) if rows.memo is None else rows.memo.get("expert_exchange", keyed_by, price)
    back = lambda x: np.take(np.broadcast_to(x, first.shape), inv)  # noqa: E731  (U,) -> each stage's
    return (per_step_exchange(fw, ExchangeCoef(*coef), first.shape, inv, rows.zero, rows.m), back(nodes),
            back(per_node))
