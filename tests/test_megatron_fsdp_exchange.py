"""Megatron FSDP's data-parallel exchange (--use-custom-fsdp / --use-megatron-fsdp with
--data-parallel-sharding-strategy optim_grads_params: ZeRO-3) as the megatron-core profiles price it, against a
hand calculation from the code.

What the code does each step (Megatron-LM 1e057005, 2025-05-24, megatron/core/distributed/custom_fsdp/
fully_sharded_data_parallel.py and param_and_grad_buffer.py; the same in d98e8a6's
megatron/core/distributed/fsdp/src/megatron_fsdp/megatron_fsdp.py):
  - the FSDP units are the TransformerLayers (fsdp_unit_modules = [TransformerLayer] under optim_grads_params);
  - each micro-batch, a unit is all-gathered in its forward pre-hook (one unit prefetched ahead) and released in its
    forward post-hook; all-gathered again in its backward pre-hook and released after its backward; under full
    recompute the re-run forward finds the unit gathered (the module state PRE_BACKWARD) and gathers nothing more;
  - its gradients are reduce-scattered after every backward (grad_reduce_every_bprop for optim_grads_params; no_sync
    does not defer them), from the main-gradient buffer, fp32 under --bf16 (grad_reduce_in_fp32 from
    accumulate_allreduce_grads_in_fp32, which --bf16 turns on unless --grad-reduce-in-bf16);
  - expert parameters (allreduce=False) are their own buckets, sharded and exchanged over the expert-data-parallel
    group (get_expert_data_parallel_group), one coalesced collective per layer and pass.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from costmodel import FRAMEWORKS, model_preset
from costmodel._collectives import collective_link
from costmodel._data_parallel import dp_exchange_coef, exchange_plan

US = 1e-6


@pytest.mark.parametrize("name", ["megatron-core", "megatron-core-deepep"])
def test_megatron_fsdp_units_gathered_twice_and_reduce_scattered_once_a_micro_batch(name):
    # Qwen3-235B-A22B, 94 TransformerLayers: 94 unit all-gathers in forward, 94 again in backward (nothing of a unit
    # kept from forward to backward), 94 reduce-scatters; plus one each for the modules outside the units (the
    # embedding, the final norm, the output layer). The code gathers those once a step and keeps them until
    # finish_grad_sync (AllGatherPipeline.reset); the profile prices them per pass: 2m - 1 calls of the dense group
    # too many a step, their bytes ((151936 x 4096 x 2 + 4096) / tp of 28.4e9 + 4e9 parameters) under 2% of it.
    fw, model = FRAMEWORKS[name], model_preset("qwen3-235b-a22b")
    plan = exchange_plan(fw, model, 2, 128, True)
    got = (plan.gathers_fwd, plan.gathers_bwd, plan.scatters, plan.kept)
    assert tuple(float(x) for x in got) == (95.0, 95.0, 95.0, 0.0)


@pytest.mark.parametrize("name", ["megatron-core", "megatron-core-deepep"])
def test_megatron_fsdp_expert_exchange_of_the_qwen3_235b_layout_by_hand(name):
    # The ModelZoo layout: 256 H100 (32 nodes of 8, 50 GB/s of network a GPU, 450 GB/s NVLink, 5 / 10 us a step inside
    # / across nodes, links at 0.8), EP 8 inside a node, ETP 1, so the expert-data-parallel group is 32 ranks 8 apart:
    # one a node, each of the node's 8 groups on its own GPU's NIC: 50 x 0.8 = 40 GB/s.
    # A GPU's routed experts: 94 layers x 128 experts x 3 x 4096 x 1536 / ep 8 = 227,096,395,776 / 8 =
    # 28,387,049,472 parameters. Per micro-batch: all-gathered in bf16 for forward and again for backward, the
    # gradients reduce-scattered in fp32: 2 + 2 + 4 = 8 bytes a parameter, 31/32 of it through each rank's link:
    #   28,387,049,472 x 8 x 31/32 / 40e9 = 5.499990835 s a micro-batch.
    # Calls: 95 all-gathers a pass and 95 reduce-scatters (the first test), each a unit's 28.39e9 / 95 x 2 = 598 MB or
    # x 4 = 1.2 GB: ring Simple, 8.4 us + 31 network steps of 10 us (3 us of proxy overhead under it) = 318.4 us
    # (LL128 would be 14 + 31 x 10 x 4 / 14 = 102.6 us at 0.92 x 40 GB/s: slower past
    # 215.8 us / (31/32 x (1/36.8 - 1/40) / GB/s) = 102 MB; PAT's 0.75 x 40 GB/s slower still).
    #   per micro-batch 5.499990835 + 285 x 318.4e-6 = 5.590734835 s; GA 4: 22.36293934 s.
    # The published step is 17.6 s: this exchange alone at the full 50 GB/s (880 GB a GPU) would take 17.6 s.
    fw, model = FRAMEWORKS[name], model_preset("qwen3-235b-a22b")
    P = model.moe_layers * model.moe_layer_expert_params() / 8
    assert P == 28_387_049_472
    link = collective_link(np.array(8), np.array(32), 8, 450e9, 50e9, 5 * US, 10 * US, 0.8)
    assert float(link.bw) == pytest.approx(40e9)
    plan = exchange_plan(fw, model, 2, 32, True, pp=1, ep_etp=8)
    a, b = dp_exchange_coef(np.array(3), 4, 32, link, fw=fw, prec=0, plan=plan)[:2]
    assert float(a * P + b) == pytest.approx(4 * (P * 8 * 31 / 32 / 40e9 + 285 * 318.4 * US), rel=1e-9)
    # the same with gradients reduced in bf16 (--grad-reduce-in-bf16): 6 bytes a parameter, 4.124993126 s + the same
    # calls a micro-batch
    fw16 = dataclasses.replace(fw, grad_reduce_bytes=(2.0, 2.0, 2.0))
    a, b = dp_exchange_coef(np.array(3), 4, 32, link, fw=fw16, prec=0, plan=plan)[:2]
    assert float(a * P + b) == pytest.approx(4 * (P * 6 * 31 / 32 / 40e9 + 285 * 318.4 * US), rel=1e-9)
