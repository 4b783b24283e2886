"""Training frameworks as an input of the cost model: one table, one row per framework.

A profile says what the framework can run (pipeline schedules, ZeRO / FSDP sharding stages, sharding with a pipeline,
sequence parallelism, fp8), what it overlaps (the data-parallel gradient exchange), how its attention kernel keeps
activations, and what its published runs use when a source does not say. The evaluator reads these fields and nothing
else about the framework, so a new framework is a new row, not a branch in the arithmetic.

Pricing rules the fields drive (costmodel._layer_terms.framework_terms, costmodel._block, costmodel._feasibility):
    schedules, max_zero, sequence_parallel, fp8: a row asking for more is infeasible with reason
        ``framework_unsupported``
    max_zero_with_pp: ZeRO stage above it with pp > 1: reason ``zero_incompatible_pp``
    zero1: the framework shards the optimizer state alone (ZeRO-1: DeepSpeed's stage 1, Megatron's distributed
        optimizer); False for FSDP, which shards it only with the gradients (ZeRO-2: torchtitan's
        reshard_after_forward "never", FSDP1's SHARD_GRAD_OP) or the weights too (ZeRO-3): zero_stage 1 is
        ``framework_unsupported`` (torchtitan v0.2.2: data_parallel_shard_degree is FSDP, data_parallel_replicate_degree
        DDP or HSDP, nothing shards the optimizer alone; Composer's FSDP sharding strategies FULL_SHARD, SHARD_GRAD_OP,
        NO_SHARD, HYBRID_SHARD)
    tp_needs_sp: the framework's tensor parallelism always shards the sequence between blocks: tp > 1 without
        sequence parallelism is ``framework_unsupported`` (torchtitan v0.2.2 models/llama3/infra/parallelize.py
        apply_tp: the norms SequenceParallel, each block's input PrepareModuleInput from Shard(1))
    ep_in_sharded_dp: the experts fold into the FSDP-sharded, CP and TP ranks of a replica, not into DDP replicas: ep
        x etp must divide tp x cp, times dp only where FSDP shards it (ZeRO 2-3); else ``framework_unsupported``
        (torchtitan v0.2.2 parallel_dims.py: efsdp = dp_shard x cp x tp / (etp x ep), dp_shard 1 under DDP)
    shard_with_pp_once: ZeRO-2/3 with pp > 1 keeps the weights gathered from a step's first forward to its last backward
        and reduce-scatters the gradients once, at the last micro-batch: priced as ZeRO-1 (the same bytes, wire, peak)
    overlap_dp: the strategy's ``overlap_dp`` values it can run; one value: the framework decides, the column unread
    overlap_dp_usual: what `plansweep validate` assumes when a run does not say, per ZeRO stage 0-3
    uneven_chunks: interleaving splits a stage whose layers v does not divide into chunks one layer apart (else v must
        divide every stage's layers)
    interleaved_microbatches: the micro-batches per step m an interleaved schedule runs on pp p
        (INTERLEAVED_MICROBATCHES; a row asking for others is ``framework_unsupported``): "any"; "pp_multiple", m a
        multiple of p (Megatron-LM 2021); "at_least_pp", m >= p (Megatron-Core: a group size N in [p, m] is then
        always valid, N = m at worst); "pytorch_rounds", m < p (one round) or m a multiple of m // p rounds
        (torch.distributed.pipelining)
    expert_parallel: False: ep > 1 is ``framework_unsupported`` (the framework has no expert parallelism)
    expert_tensor_parallel: False: etp > 1 is ``framework_unsupported`` (only Megatron-Core has it)
    ep_fp16: False: fp16 with ep > 1 is ``framework_unsupported`` (Megatron-LM core_v0.15.0 megatron/training/
        arguments.py validate_args: "Expert parallelism is not supported with fp16 training.")
    ep_dispatch_per_node: a token goes once to each other node holding one of its experts, then over NVLink (DeepEP,
        HybridEP: Megatron-Core's flex dispatcher; DeepSeek-V3's own), not once per routed expert (alltoall dispatcher)
    fp8_dispatch: under fp8 the dispatch all-to-all (and its backward mirror) moves fp8 activations with 1 x 128 fp32
        scales, the combine stays 16-bit (DeepSeek-V3 report Sec. 3.3.2; DeepEP's "FP8 dispatching, BF16 combining")
    overlap_ep: the MoE token dispatch / combine all-to-alls hide under the compute of another micro-batch's layer
        (Megatron-Core --overlap-moe-expert-parallel-comm, DeepSeek-V3's DualPipe): a forward and a backward through a
        layer as one pair, its four all-to-alls on one stream (costmodel._experts.overlapped_a2a_s)
    overlap_ep_steady_only: the overlap pairs passes only in the steady state of Megatron-Core's combined 1F1B
        schedules: warm-up forwards and cool-down backwards run alone, and a pipeline without interleaving not at all
        (costmodel._experts.unpaired_share); False: every pass paired (DualPipe, priced as 1F1B)
    blocking_p2p: its 1F1B without interleaving waits on each pipeline hand-off before its next pass: a stage's steady
        state sends a forward's output and receives a backward's gradient in one batched call (and the reverse after
        the backward) and waits for it, so each steady-state period carries its hand-offs (Megatron-Core:
        BLOCKING_P2P_SOURCE; torch.distributed.pipelining's Schedule1F1B: TORCH_BLOCKING_P2P_SOURCE; DeepSpeed's
        TrainSchedule: DEEPSPEED_BLOCKING_P2P_SOURCE; costmodel._block.steady_handoffs_s, costmodel._pipeline's
        blocking); False: the sends overlap the next pass
    exchange_calls: with blocking_p2p, the calls a steady-state exchange makes one after the other, each waited on
        before the next: 1 a batched exchange (Megatron-Core's batch_isend_irecv, torch's _batch_p2p), its send and
        receive at once; 2 DeepSpeed's TrainSchedule, a dist.recv then a dist.send (or a send then a receive) with the
        same neighbour: the steady state's hand-offs counted that many times (costmodel._block.steady_handoffs_s's
        times exchange_calls; the fill and drain's single transfers as before)
    lockstep_interleaved: its interleaved schedule is torch.distributed.pipelining's ScheduleInterleaved1F1B, a grid of
        time steps each waited on: a step's pass, then one batched exchange of its sends and its neighbours' step
        outputs, before the next step (TORCH_LOCKSTEP_SOURCE; costmodel._pipeline.simulate_lockstep; the closed form's
        (2vm - 2) T_C and one chunk's forward more: costmodel._block.lockstep_handoffs_s), on rows whose m is a
        multiple of p (elsewhere the grid is not always a valid order and the hand-offs stay asynchronous); False: the
        interleaved hand-offs overlap the next pass (Megatron-Core's overlap_p2p_comm)
    expert_fp8_cast_bytes: under fp8, HBM bytes an element of an expert GEMM's input (forward) and of its output
        gradient (backward) the quantization before the grouped GEMM moves (Transformer Engine's GroupedLinear: read 2
        bytes, write row-wise and column-wise fp8 copies 1 + 1: 4; costmodel._experts), its kernels counted; 0: none
    moe_host_sync: dropless routing waits on the host for each MoE layer's token counts (Megatron-Core's token
        dispatchers without --moe-pad-expert-input-to-capacity): an MoE layer's passes run no faster than the host
        launches their kernels (costmodel._experts.HOST_S_PER_KERNEL), a forward's expert phase's launches the GPU does
        not cover before the rest of the layer (expert_launch_excess), and each backward pass starts behind a wait
        (backward_chunk_excess)
    expert_bias_loop: the routed experts' FC2 bias (an MoE model with biases: gpt-oss) is added after the grouped GEMM
        by a Python loop over the local experts (Megatron-Core's TEGroupedMLP._apply_bias): its element-wise passes and
        launches priced (costmodel._experts.EXPERT_BIAS_ELEMS_FWD); False: inside the GEMM, not priced
    fused_attention: True: a fused (flash) kernel keeps only per-row softmax statistics, no s x s scores (Dao et al.
        2022); False: the scores are stored (Korthikanti et al. 2022 Sec. 4.1, 5 a s^2 b bytes per layer) and pass
        through HBM in the softmax and the attention dropout (costmodel._layer_compute.UNFUSED_SCORE_BYTES)
    selective: recompute "selective": "attention", the attention core recomputed (Korthikanti et al. 2022 Sec. 5); "op",
        torchtitan's per-op policy: a layer keeps its input, every other matrix product's output (1st, 3rd, ...), the
        attention kernel's and tp reduce-scatters' outputs, recomputes the rest (products, norms, activations, gathers)
    recompute_modules: its layer code checkpoints Megatron-Core's named modules (transformer_config.py
        recompute_modules: core_attn, moe_act, layernorm, mla_up_proj, mlp, moe, shared_experts), so a row's
        ``recompute_modules`` column may name them (costmodel._layer_terms.module_terms); False: a row naming any is
        refused (InputError naming recompute_modules)
    attention_kernel: costmodel._hardware.ATTENTION_KERNELS: "standard", the whole s x s square at the GEMM constant;
        "flash2" (FlashAttention-2) or "cudnn", the causal half at the kernel's published rate (where one is published)
    fp8_cast_bytes: under fp8, HBM bytes its casts to fp8 move outside the GEMMs, per element of a linear layer's input,
        of a weight (forward), of its output gradient, of a weight (backward); zeros: none priced
    fp8_norm_cast_bytes: under fp8, HBM bytes per element of a linear layer's input that a norm wrote (QKV's, FC1's:
        Transformer Engine's LayerNormLinear, whose norm kernel can write the fp8 copy itself); None: as any input
        (fp8_cast_bytes[0]). Transformer Engine's counts per scaling recipe (TE_FP8_CAST_BYTES)
    fp8_recast_input_bytes: under fp8, HBM bytes per element of a linear layer's input in the backward, where the
        layer saved it in 16 bits and casts it again for the weight-gradient GEMM (torchao's eager float8 linear);
        0: none
    fp8_norm_input_casts: under fp8, how many times the attention's and the MLP's norm-written input is cast each pass
        (torchtitan's separate wq, wk, wv and w1, w3 as eager torchao float8 linear layers: each casts its own input,
        3 and 2); 1: once (a fused QKV or FC1 weight, or a compiled graph casting a tensor once)
    eager_elem_bytes: HBM bytes a layer forward eager element-wise code moves beyond the fused count (ELEM_TH_PER_LAYER,
        ELEM_TF_PER_LAYER), per element of the norms' input (T h, split like them), Q and K ((q + hk) / t: RoPE; LLM
        Foundry's unpadding), the MLP's intermediate (f / t); twice backward (ELEM_BWD_FACTOR), again where recompute
        repeats it; zeros: fused, or compiled code that inductor fuses. Dense layers only (an MoE layer's priced as
        fused)
    sp_copy_bytes: HBM bytes an element of the gathered activation (T h, the rank's whole sequence) each
        sequence-parallel all-gather and reduce-scatter copies outside the collective: DTensor gathers and scatters
        on the sequence dim (Shard(1)) through torch.distributed._functional_collectives, which all-gathers on dim 0
        and then torch.cat(torch.chunk(...), dim=1) (read 2, write 2), and chunks on dim 1 and cats on dim 0 before a
        reduce-scatter (4; all-gathers of fp8 data, torchao's float8 tensor parallelism: 2); a layer's 2 all-gathers
        and 2 reduce-scatters forward and their mirrors backward, priced with the tp collectives (tp_fwd: once
        forward, once backward, again where recompute repeats them; rows with tp > 1 and sequence parallelism); 0:
        none
    hp_grad_bytes: HBM bytes a parameter its bf16 optimizer moves adding each micro-batch's bf16 gradients into fp32
        ones (bf16, ZeRO 0-1; in each layer's backward; dense, embedding and head left out); 0: accumulated in the GEMMs
    kv_repeat_bytes: HBM bytes an element of T (q + hk) / t a GQA layer moves copying K and V to every query head for
        its kernel (forward; backward sums the copies' gradients, as many again); 0: the kernel reads the shared K, V
    xent_bytes: HBM bytes per logit (T V / t a micro-batch) its loss code moves, forward and backward, from the 16-bit
        logits to their 16-bit gradient (head_elem, at the HBM rate); 14: a fused kernel's (XENT_BYTES_PER_LOGIT)
    xent_peak_bytes: bytes a logit (T V / t a micro-batch) its loss code holds at once at its peak, forward or
        backward (the head's activation, beside the last stage's kept activations: head_act); 4: a fused loss's fp32
        logits (XENT_PEAK_BYTES_PER_LOGIT), where the framework's loss code is not counted
    grad_reduce_bytes: by precision (bf16, fp16, fp8), a gradient element's bytes in the dp reduction: 4 fp32, 2 16-bit
    weight_gather_bytes, all_reduce_then_gather: by precision, a weight element's bytes in ZeRO 1-3's all-gathers (1:
        fp8_param_gather, every weight priced so); ZeRO 0-1 all-reduce the gradients, then all-gather (BF16_Optimizer)
    overlap_param_gather: with overlap, ZeRO 1-2's weight all-gather (its bytes' share) hides under the next forward
    fsdp_unit_edges: FSDP1 and FSDP2 (pp 1, dense) at ZeRO 2-3: a unit's all-gather hides under the previous unit's
        forward, its reduce-scatter under the next unit's backward; the root's and block 0's (their parameters' share)
        are exposed: the step's first all-gathers have no forward before them, its last reduce-scatters no backward
        after them
    ring_attention_bytes: PyTorch's ring attention (cp > 1, not MLA): HBM bytes a rank's Q element (b s/c q/t), forward
        once and a further step, backward the same; its K, V q wide, all-gathered (bf16) behind step 0's attention,
        fp32 dK, dV passed on each step, the last exposed (framework_terms); zeros: the generic ring of hk blocks
    te_ring_attention: Transformer Engine's P2P ring attention (cp > 1, not MLA; Megatron-Core's cp_comm_type "p2p"):
        the K, V exchange exposed step by step against each step's attention, dK, dV travelling with K, V backward,
        the merges' HBM bytes and kernels (costmodel._layer_compute.te_ring_terms); False: the generic ring, its
        exchange against the whole attention core
    cp_sdpa_only: context parallelism runs only the framework's SDPA attention, so a model whose attention is
        windowed or chunked on some layer (those masks are FlexAttention's) has no cp > 1: framework_unsupported
        (torchtitan v0.2.2: llama4/model/args.py update_from_config raises NotImplementedError for cp > 1 with an
        attn_type other than "sdpa", the iRoPE flavors' chunks being "flex"; gpt_oss/model/args.py raises for any
        cp > 1, its windows flex-only)
    cp_all_gather: context parallelism by all-gathered K and V (cp > 1, not MLA): each layer's forward all-gathers
        the cp group's K and V before its attention and computes the rank's queries against all of them in one
        kernel, the gather exposed; the backward gathers them again and reduce-scatters their gradients, both exposed
        (costmodel._layer_compute.all_gather_cp_terms); no ring, no merges
    type_partition: pipeline stages as DeepSpeed's PipelineModule cuts them with partition_method 'type:' and this
        pattern (runtime/utils.py partition_balanced over unit weights: the first L mod pp stages one unit more):
        "transformer" over the transformer layers (Megatron-DeepSpeed's GPTModelPipe), "transformer|embedding" over
        the layers and the embedding and tied head as a unit each, which then leave the first and last stage one
        layer fewer (BigScience's Megatron-DeepSpeed, which trained BLOOM); other cuts framework_unsupported
        (costmodel._feasibility.type_partitions); "": any cut
    ep_in_dp: DeepSpeed's MoE: expert-parallel groups cut from the data-parallel ranks, so ep divides dp
        (deepspeed/utils/groups.py _create_expert_data_and_model_parallel: _ensure_divisibility(dp_world_size,
        expert_parallel_size_)), and no ZeRO-3 with an MoE model (runtime/engine.py: native DeepSpeed MoE is not
        supported with ZeRO stage 3); elsewhere framework_unsupported
    cp_ulysses: context parallelism by DeepSpeed-Ulysses (Megatron-DeepSpeed's --ds-sequence-parallel-size): the heads
        exchanged by all-to-all around the attention, Q, K, V and the output each way (costmodel._layer_compute.
        te_a2a_terms, the same exchanges), for every model; only at tp 1 and pp 1, with as many K, V heads as query
        heads, and not MLA (costmodel._feasibility.ulysses_refused): elsewhere framework_unsupported
    fp8_saved_inputs: under fp8 the QKV, projection, FC1 and FC2 inputs are kept for the weight-gradient GEMM in fp8 (1
        byte an element; Transformer Engine); False: in 16 bits (torchao's float8 linear saves the high-precision input)
    dp_bucket_elems: (floor, per rank): the data-parallel exchange's gradient reductions (and ZeRO 1-2's weight
        all-gathers) run one collective per bucket of max(floor, per rank x dp ranks) elements (Megatron-Core's DDP);
        floor 0: one per transformer layer's parameters (an FSDP unit); inf: one for the stage (a contiguous buffer)
    dp_buckets_need_overlap: buckets only with the dp overlap (Megatron-Core: bucket_size None without
        --overlap-grad-reduce), else one collective for the stage
    zero3_gathers: ZeRO-3's collectives per micro-batch (whole model on one stage): (all-gathers per transformer layer
        and pass, all-gathers outside the layers (embedding, head, an FSDP root), reduce-scatters per layer (plus the
        outside ones); 0: by dp_bucket_elems); (0, 1, 0): one all-gather per pass, reduce-scatters by buckets
    weight_gather_in_step: ZeRO 1-2's weight all-gather (and the bf16 optimizer's at ZeRO 0-1) runs inside the optimizer
        step, after the update, one all-gather of the whole flat group: exposed, whatever the dp overlap (DeepSpeed)
    weight_sync_broadcasts: with weight_gather_in_step, the weights are synced not by one all-gather but by one
        broadcast from each rank of the group of its updated shard (InternEvo's HybridZeroOptimizer): g collectives in
        a row, each a ring pipeline over the group paying its latency (n - 1 steps), the bytes those of one all-gather;
        with all_reduce_then_gather, only at ZeRO 1 (at ZeRO 0 every rank updates the whole model: nothing to sync)
    zero3_kept: what stays gathered from a micro-batch's forward to its backward, not gathered again: (layers, outside
        units, parameters) (torchtitan's last block and FSDP2's root; FSDP1's root; DeepSpeed's reuse distance)
    grad_buffer_bytes: by precision, the bytes a parameter's gradient holds in memory (ZeRO-2/3 shard it); None: the
        gradient buffer is the reduce buffer, grad_reduce_bytes (Megatron-Core's DDP: one dtype for both)
    layer_saves: whose code's saved tensors price a dense layer's activations (costmodel._memory_terms.LAYER_SAVES):
        "korthikanti" (Korthikanti et al. 2022's count, generalised), "te" (Megatron-Core with Transformer Engine
        modules), "torchtitan" (torchtitan's Llama block, eager autograd); the count's terms, each from the code, in
        te_saved_bytes and torchtitan_saved_bytes; MLA models and MLP stacks keep Korthikanti's
    dropout: hidden dropout on under "te" (two one-byte masks a token); "korthikanti" always counts them, torchtitan's
        model has no dropout
    optim_state_bytes: the optimizer's bytes a parameter, sharded from ZeRO-1 on: the master weight and Adam's two
        moments (12: all fp32); with_state_dtypes sets it from the dtypes a run keeps them in
    main_grad_bytes: the bytes of a gradient the optimizer step reads (4: fp32 main gradients)
    zero2_scatter_every_microbatch: ZeRO-2 reduce-scatters the gradients after every micro-batch's backward (m
        reduce-scatters a step, each of the stage's gradients at grad_reduce_bytes) and accumulates them sharded (the
        gradient memory / dp x cp, with a pipeline too where max_zero_with_pp allows it), the updated weights
        all-gathered once after the step (FSDP without no_sync / set_requires_gradient_sync(False); DeepSpeed's
        stage 2); False: one reduce-scatter a step, at the last micro-batch (costmodel._data_parallel)
    overlap_dp_min_zero: the lowest ZeRO stage whose data-parallel exchange the framework can overlap with the
        backward; a row below it is priced without overlap whatever its ``overlap_dp`` says (DeepSpeed: ZeRO 0 and,
        in the releases of 2021-07 to 2024-01, ZeRO-1 reduce after the backward pass); 0: every stage as the row says
    hp_grad_zero1_needs_pp: hp_grad_bytes priced at ZeRO 0, and at ZeRO-1 only with pp > 1 (DeepSpeed: bf16 under
        ZeRO-1 accumulates in bf16 by default and runs its ZeRO optimizer, no fp32 copy; its pipeline engine reads the
        bf16 optimizer's fp32 gradients, so pipelined bf16 runs configure it); False: at ZeRO 0-1 alike
    fp8_tp_gather: under fp8 with sequence parallelism and t > 1, torchao's float8 tensor parallelism (torchtitan's
        float8 TP plan): a layer's sequence-parallel all-gathers (forward: the attention's and the MLP's inputs;
        backward: the projection's and FC2's output gradients) move fp8, each after an all-reduce of its fp32 amax, the
        reduce-scatters 16 bits; those four tensors cast to fp8 on the rank's shard and the gathered fp8 copy
        transposed for the weight-gradient GEMM, in place of fp8_cast_bytes' per-linear cast (costmodel._layer_compute.
        FP8_TP_CAST_BYTES, fp8_tp_collectives_s); False: the collectives 16-bit, each linear casting its own input
    pp_grad_sync_after_backward: with fsdp_unit_edges and pp > 1 (dense models), the step's gradient reduce-scatter
        starts only once the stage's last backward has run and is waited for before the step goes on (torch.distributed.
        pipelining's PipelineStage runs FSDP's post-backward by hand after the last micro-batch): exposed whole; the
        weights' all-gather behind the next step's first forward (FSDP's per-unit pre-forward); False: the exchange
        behind the last backward (costmodel._data_parallel.last_exchange_parts)
    pp_grad_accum_bytes: HBM bytes a parameter (a layer's weights over t) its data-parallel sharding moves in every
        micro-batch's backward adding the micro-batch's 16-bit gradient into an unsharded fp32 one, where a pipeline
        turns gradient sync off until the last micro-batch (pp > 1, ZeRO 1-3 as framework_columns prices them; dense
        layers; embedding and head left out, as hp_grad_bytes): FSDP2's post-backward under
        set_requires_gradient_sync(False) with an fp32 reduce_dtype, fp32 += bf16 (read 4 + 2, write 4: 10; the first
        micro-batch's cast, read 2 write 4, counted as the others'); every precision (the weight gradients are
        16-bit under fp8 too); 0: none (costmodel._data_parallel.pp_grad_accum_rows)
    pre_reduce_copy_bytes: HBM bytes a gradient element moves in a copy on the computation stream, every micro-batch's
        backward, before the gradients are reduced, over the parameters a GPU holds unsharded in the backward (each
        dense layer's weights over t, the embedding on the first stage, the head and final norm on the last; the
        tied embedding once): FSDP1's flat parameter, whose module parameters are views of one flat tensor (split,
        then view), so autograd's backward of the split concatenates the views' 16-bit gradients into the flat
        gradient (read 2, write 2: 4); in the layer's and the edges' backward, at the HBM rate; dense models; 0: none
    ag_copy_out_bytes: HBM bytes a weight element moves on the computation stream after each of the data-parallel
        exchange's weight all-gathers: FSDP2's foreach_all_gather_copy_out, split_with_sizes_copy of the all-gather
        output into each parameter's unsharded tensor after the current stream waits for the all-gather (read 2,
        write 2: 4); as many as the exchange counts all-gathers (costmodel._data_parallel: ZeRO-3 every micro-batch's
        forward and backward but the share kept gathered, zero3_kept; ZeRO 1-2, and ZeRO 2-3 with pp > 1 under
        shard_with_pp_once, once a step), over the parameters a GPU holds unsharded (its stage's; the slowest stage's);
        at the HBM rate, in series with the step: nothing overlaps a copy on the computation stream (reported with the
        exposed exchange, dp_comm_s: where it runs inside the passes the exchange's window is not widened by it);
        costmodel._data_parallel.fsdp_copy_bytes; dense models; 0: none
    rs_copy_in_bytes: HBM bytes a gradient element moves on the computation stream before each of the exchange's
        gradient reduce-scatters (a micro-batch's 16-bit gradients, the unsharded fp32 accumulation where
        pp_grad_accum_bytes is priced): FSDP2's foreach_reduce copy-in, torch._chunk_cat of the unit's unsharded
        gradients into the reduce-scatter input in the reduce dtype before the reduce-scatter stream waits for the
        current stream (bf16 read 2, fp32 written 4: 6; the fp32 accumulation read 4: 8); as many as the exchange
        counts reduce-scatters (ZeRO-3 and, under zero2_scatter_every_microbatch, ZeRO-2: every micro-batch's backward;
        ZeRO-1 once a step), priced as ag_copy_out_bytes; dense models; zeros: none
    tp_comm_overlap: by precision (PRECISIONS), the name of Transformer Engine's userbuffers configuration the
        framework runs its tensor-parallel exchange with (costmodel._layer_compute.UB_CONFIGS: each sequence-parallel
        all-gather and reduce-scatter split and pipelined with the GEMM beside it, per GEMM by ring exchange,
        pipeline or bulk method, each with its SMs), "" where it runs without; priced on dense models with sequence
        parallelism at t > 1 (an MoE model's layers keep their exchange exposed). Megatron-Core runs it only when
        asked (--tp-comm-overlap, off by default: megatron/training/arguments.py); Megatron-Bridge's Llama
        pre-training recipes turn it on with a per-model configuration (v0.2.0 recipes/llama/llama3.py
        CommOverlapConfig(tp_comm_overlap=True, tp_comm_overlap_cfg=userbuffers_..._h100_h8192_tp4_...), kept by
        scripts/performance/configs through v0.5.0), but the profile leaves it off: priced so, its Llama rows move
        from 4-12% slow to 1-16% fast (benchmarks/tp_comm_overlap.py); with_tp_comm_overlap switches it for a run
        (on: the profile's configuration, else Transformer Engine's defaults; "bridge-bf16" and "bridge-fp8" name
        Megatron-Bridge's)
    handoff_gathers: with t > 1 the pipeline sends each hand-off (a stage's T h output, its T h input gradient) as a
        tp-shard, and the receiver all-gathers the whole 16-bit tensor (T h / t under sequence parallelism, a rank's
        sequence shard) over the tp group before the pass that reads it, on the computation stream: (all-gathers in the
        forward of every
        stage but the first, in the backward of every stage but the last), each priced as the model's tp all-gathers
        (gather_s of the T h tensor at the tp link) plus handoff_gather_copy_bytes an element of T h at the HBM rate
        (costmodel._layer_compute.handoff_gather_s), added to the pass (the stage's time, not the hand-off) and to the
        tp column (its copies to the computation); DeepSpeed's pipeline engine (1, 2): DEEPSPEED_HANDOFF_GATHER_SOURCE;
        zeros: no gather priced. The hand-off itself is priced at T h / t bytes in every profile (costmodel._block
        handoffs)
    handoff_gather_copy_bytes: HBM bytes an element of the gathered T h tensor each of those all-gathers moves in
        copies on the computation stream (DeepSpeed's PartitionedTensor.full with torch's list all_gather: 10)
    tp_backward_async: a dense layer's backward runs its column-parallel linears' collectives asynchronously beside
        their GEMMs (costmodel._layer_compute.async_tp_backward_s): under sequence parallelism QKV's and FC1's inputs
        all-gathered again beside their data-gradient GEMMs and their data gradients reduce-scattered beside their
        weight-gradient GEMMs, the projection's and FC2's output gradients all-gathered before their GEMMs (exposed);
        without it, QKV's and FC1's data gradients all-reduced beside their weight-gradient GEMMs and nothing for the
        row-parallel ones; each hidden collective's kernel holding its ring channels' SMs (Megatron-Core with
        Transformer Engine or its own layers, InternEvo through flash-attn's fused dense layers). False: the
        backward's exchange is the forward's, exposed (Megatron-LM 2021's copy_to_tensor_model_parallel_region, an
        all-reduce after the linear's whole backward; Megatron-DeepSpeed's the same; DTensor's redistributions, each
        waited on before the GEMM that reads it). Dense layers of non-MLA transformers at t > 1 (an MoE layer, an MLA
        layer and an MLP stack keep the forward's); userbuffers (tp_comm_overlap) prices its own rows
    te_fp8_gather: under fp8 with sequence parallelism at t > 1, Transformer Engine's linear layers all-gather fp8
        data (costmodel._layer_compute.fp8_tp_collectives_s, async_tp_backward_s): the QKV and FC1 inputs forward
        (LayerNormLinear's ln_out, cast on the rank's shard), the same saved fp8 shards again for the weight gradients,
        the projection's and FC2's output gradients (cast on the shard, then gathered): 1 byte an element, the
        reduce-scatters 16 bits. "delayed": the scales from the amax history, no collective more; "current": each
        cast of an input or output gradient before its gather all-reduces its amax over the tp group first (the
        re-gathered saved shards need none). Dense models of non-MLA transformers (an MoE model's layers, an MLA
        layer and an MLP stack keep 16-bit exchanges); userbuffers (tp_comm_overlap) prices its own rows; the casts
        are fp8_cast_bytes' (TE_FP8_CAST_BYTES). "": every exchange in 16 bits (TE_FP8_GATHER_SOURCE)

Efficiency constants stay per GPU (costmodel._hardware); a profile chooses one kernel speed, its attention kernel's.
"""

from __future__ import annotations

import dataclasses
import math

from costmodel._codes import SCHEDULES, name_words
from costmodel._dtypes import GRAD_BYTES, OPTIM_BYTES, WEIGHT_BYTES
from costmodel._errors import InputError

# What an interleaved schedule asks of the micro-batches per step m on pp p, per framework (Framework.
# interleaved_microbatches; costmodel._feasibility.interleaving_runs):
#   "any": every m (plansweep's own model: the simulator prices m < p).
#   "pp_multiple": m % p == 0. Megatron-LM d750965 (2021-06-29) megatron/training.py line 366 asserts it ("number of
#       microbatches is not divisible by pipeline-parallel size when using interleaved schedule"); Megatron-Core's
#       schedules.py raised the same until 4295be1 (2024-11-01, the tunable schedule).
#   "at_least_pp": m >= p. Megatron-LM d98e8a6 megatron/core/pipeline_parallel/schedules.py lines 1160-1180: the group
#       size N (--microbatch-group-size-per-virtual-pipeline-stage, p by default) must lie in [p, m] and m % N be 0 or
#       at least p; for m < p no N does, for m >= p N = m always does (costmodel._pipeline.interleave_group_size takes
#       the smallest).
#   "pytorch_rounds": m < p, or m a multiple of r = m // p. pytorch 1fd7abc torch/distributed/pipelining/schedules.py,
#       ScheduleInterleaved1F1B.__init__: number_of_rounds = max(1, m // p), ValueError unless m % number_of_rounds
#       == 0 (p = 4: m = 3, 6, 7, 10 run, m = 9 does not).
INTERLEAVED_MICROBATCHES = ("any", "pp_multiple", "at_least_pp", "pytorch_rounds")


@dataclasses.dataclass(frozen=True)
class Framework:
    name: str
    what: str
    schedules: tuple[str, ...]
    max_zero: int
    max_zero_with_pp: int
    shard_with_pp_once: bool
    overlap_dp: tuple[bool, ...]
    overlap_dp_usual: tuple[bool, bool, bool, bool]  # by ZeRO stage
    fused_attention: bool
    fp8_saved_inputs: bool
    selective: str
    sequence_parallel: bool
    uneven_chunks: bool
    fp8: bool
    sources: tuple[str, ...]
    expert_parallel: bool = True
    expert_tensor_parallel: bool = True
    ep_fp16: bool = True
    overlap_ep: bool = False
    ep_dispatch_per_node: bool = False
    blocking_p2p: bool = False
    exchange_calls: int = 1
    lockstep_interleaved: bool = False
    fp8_dispatch: bool = False
    expert_fp8_cast_bytes: float = 0.0
    overlap_ep_steady_only: bool = False
    moe_host_sync: bool = False
    expert_bias_loop: bool = False
    attention_kernel: str = "standard"
    fp8_cast_bytes: tuple[float, float, float, float] = (0.0, 0.0, 0.0, 0.0)
    fp8_norm_cast_bytes: float | None = None
    fp8_recast_input_bytes: float = 0.0
    fp8_norm_input_casts: tuple[float, float] = (1.0, 1.0)
    eager_elem_bytes: tuple[float, float, float] = (0.0, 0.0, 0.0)
    sp_copy_bytes: float = 0.0
    hp_grad_bytes: float = 0.0
    xent_bytes: float = 4 + 8 + 2
    xent_peak_bytes: float = 4.0  # XENT_PEAK_BYTES_PER_LOGIT (module docstring)
    kv_repeat_bytes: float = 0.0
    grad_reduce_bytes: tuple[float, float, float] = (2.0, 2.0, 2.0)  # by PRECISIONS; 2: GRAD_COMM_BYTES
    weight_gather_bytes: tuple[float, float, float] = (2.0, 2.0, 2.0)  # by PRECISIONS; 2: WEIGHT_BYTES
    all_reduce_then_gather: tuple[bool, bool, bool] = (False, False, False)  # by PRECISIONS
    overlap_param_gather: bool = False
    fsdp_unit_edges: bool = False
    ring_attention_bytes: tuple[float, float, float, float] = (0.0, 0.0, 0.0, 0.0)
    te_ring_attention: bool = False
    cp_sdpa_only: bool = False
    zero1: bool = True
    tp_needs_sp: bool = False
    ep_in_sharded_dp: bool = False
    cp_all_gather: bool = False
    cp_ulysses: bool = False
    ep_in_dp: bool = False
    type_partition: str = ""
    dp_bucket_elems: tuple[float, float] = (math.inf, 0.0)
    dp_buckets_need_overlap: bool = False
    zero3_gathers: tuple[float, float, float] = (0.0, 1.0, 0.0)
    zero3_kept: tuple[float, float, float] = (0.0, 0.0, 0.0)
    weight_gather_in_step: bool = False
    weight_sync_broadcasts: bool = False
    grad_buffer_bytes: tuple[float, float, float] | None = None  # by PRECISIONS; None: grad_reduce_bytes
    layer_saves: str = "korthikanti"  # costmodel._memory_terms.LAYER_SAVES
    recompute_modules: bool = False  # Megatron-Core's --recompute-modules (module docstring)
    dropout: bool = False  # hidden dropout on (layer_saves "te": the bias-dropout-adds' masks)
    optim_state_bytes: float = float(OPTIM_BYTES)
    main_grad_bytes: float = float(GRAD_BYTES)
    interleaved_microbatches: str = "any"  # INTERLEAVED_MICROBATCHES (module docstring)
    zero2_scatter_every_microbatch: bool = False  # ZeRO-2's reduce-scatter each micro-batch (module docstring)
    overlap_dp_min_zero: int = 0  # the lowest ZeRO stage whose exchange can overlap (module docstring)
    hp_grad_zero1_needs_pp: bool = False  # hp_grad_bytes at ZeRO-1 only with pp > 1 (module docstring)
    fp8_tp_gather: bool = False  # torchao's float8 tensor parallelism: fp8 all-gathers, casts on the shard (docstring)
    pp_grad_sync_after_backward: bool = False  # pp > 1: the reduce-scatter after the last backward (docstring)
    pp_grad_accum_bytes: float = 0.0  # pp > 1: unsharded fp32 gradient accumulation per micro-batch (docstring)
    pre_reduce_copy_bytes: float = 0.0  # a gradient element's copy before the reduction, per micro-batch (docstring)
    ag_copy_out_bytes: float = 0.0  # a weight element's copy after each all-gather, FSDP2's copy-out (docstring)
    rs_copy_in_bytes: tuple[float, float] = (0.0, 0.0)  # before each reduce-scatter, FSDP2's copy-in (docstring)
    tp_comm_overlap: tuple[str, str, str] = ("", "", "")  # by PRECISIONS: userbuffers' configuration, "": off
    handoff_gathers: tuple[float, float] = (0.0, 0.0)  # tp all-gathers of a tp-sharded hand-off (docstring)
    handoff_gather_copy_bytes: float = 0.0  # HBM bytes an element of each such gather's tensor copies (docstring)
    tp_backward_async: bool = False  # the backward's column-parallel collectives beside its GEMMs (docstring)
    te_fp8_gather: str = ""  # TE_FP8_GATHERS: Transformer Engine's fp8 sequence-parallel all-gathers (docstring)

    def grad_memory_bytes(self) -> float | tuple[float, float, float]:
        """Bytes a parameter's gradient buffer holds, by precision (PRECISIONS): grad_buffer_bytes, or, where the
        framework keeps its gradients in the dtype it reduces them in (None: one setting for both, Megatron-Core's
        DDP grad_reduce_in_fp32), grad_reduce_bytes; one number where every precision has the same."""
        b = self.grad_reduce_bytes if self.grad_buffer_bytes is None else self.grad_buffer_bytes
        return b[0] if b[0] == b[1] == b[2] else b

    def adam_bytes_touched(self) -> float:
        """HBM bytes the Adam step moves per (sharded) parameter: reads the master weight, the two moments and the
        main gradient, writes the master weight, the moments and the 16-bit working copy: 2 x optim_state_bytes +
        main_grad_bytes + WEIGHT_BYTES (30 with every state in fp32: read 16, write 12 + 2)."""
        return 2.0 * self.optim_state_bytes + self.main_grad_bytes + WEIGHT_BYTES


# Transformer Engine's quantization outside its fp8 GEMMs (TransformerEngine d0067d0), HBM bytes an element, per scaling
# recipe: (fp8_cast_bytes, fp8_norm_cast_bytes). On Hopper an fp8 GEMM takes both operands K-major, so the forward
# GEMM's input is also written transposed for the weight-gradient GEMM and the output gradient twice for the data- and
# weight-gradient GEMMs (pytorch/module/linear.py _Linear.forward: input_quantizer.set_usage(rowwise=True,
# columnwise=backward_needs_input); backward: grad_output_quantizer.set_usage(rowwise=True, columnwise=True)).
# Delayed scaling (Megatron-Core's --fp8-recipe default, NeMo 1.0's): one cast-transpose kernel reads the 16-bit tensor
# and writes both fp8 copies, the amax taken in the same pass (csrc/quantizer.cpp Float8Quantizer::quantize, one
# nvte_quantize_v2): 2 + 1 + 1 = 4 an input and an output gradient; after a norm (layernorm_linear.py
# with_quantized_norm; csrc/extensions/normalization.cpp Impl::FULLY_FUSED for Float8Quantizer) the norm writes the fp8
# copy in place of its 16-bit output (1 byte less than the element-wise count's write) and the transposed copy is one
# more pass (read 1, write 1): 1. Current scaling (Megatron-Bridge's FP8-CS recipes): the amax is a pass of its own
# before the cast (Float8CurrentScalingQuantizer::quantize_impl: nvte_compute_amax_with_config, then
# nvte_quantize_v2): 2 + 4 = 6; after a norm (Impl::FUSED_NORM_AMAX_FP8) the norm writes its 16-bit output with the
# amax and the cast follows: 4. Weights: cast once a step and cached for the step's other micro-batches (Megatron-LM
# d98e8a6 core/extensions/transformer_engine.py: is_first_microbatch, passed to TE's forward, False after the first),
# 0 a micro-batch. The current-scaling amax's all-reduce over the tp group for sequence-parallel inputs (one value) is
# priced with the fp8 all-gathers it precedes (te_fp8_gather, TE_FP8_GATHERS). Not priced: MXFP8's (Blackwell) 1 x 32
# block scales (2 / 32 bytes more an element; its norms unfused: 4 + 1 / 16).
TE_FP8_CAST_BYTES = {"delayed": ((4.0, 0.0, 4.0, 0.0), 1.0), "current": ((6.0, 0.0, 6.0, 0.0), 4.0)}

# Transformer Engine's fp8 sequence-parallel all-gathers (te_fp8_gather), the same in every release the profiles' rows
# ran (NeMo 24.07: TE 1.8.0.dev0, NeMo Framework user guide, software component versions; NeMo 24.03: an earlier 1.x;
# Megatron-Bridge 25.11-26.06: TE 2.x). v1.3, v1.4 and v1.9 pytorch/module/
# layernorm_linear.py: under fp8 the norm writes ln_out as uint8 (ln_out_dtype) and gather_along_first_dim gathers it;
# backward gathers the saved fp8 ln_out again (async_op=True) for the weight gradient; base.py grad_output_preprocess,
# "FP8 case with gather": cast_to_fp8 of the rank's output-gradient shard, gather_along_first_dim of the uint8 tensor,
# then fp8_transpose. v2.0-v2.18 and d0067d0 the same through quantizers: layernorm_linear.py gathers ln_out with
# quantizer=input_quantizer (the norm quantizes it, with_quantized_norm) and again in backward; base.py
# grad_output_preprocess gathers with quantizer=grad_output_quantizer; distributed.py gather_along_first_dim ->
# _all_gather_fp8 (Float8Quantizer, Float8CurrentScalingQuantizer: quantize the shard, rowwise, then all_gather_into_
# tensor of its uint8 _data; the transpose made on the gathered tensor). Current scaling: linear.py and layernorm_
# linear.py set with_amax_reduction over the tp group on the column-parallel input's and the row-parallel output
# gradient's quantizer under sequence parallelism (v2.9 _customize_quantizers_float8_current_scaling; d0067d0
# _common.py set_quantizer_amax_reduction_group) (csrc/quantizer.cpp
# Float8CurrentScalingQuantizer::quantize_impl: the amax all-reduced before the cast). MXFP8 (_all_gather_mxfp8) gathers
# 1 + 1 / 32 bytes an element, row-wise and column-wise data both where both are used: not priced (no profile runs it).
TE_FP8_GATHERS = ("", "delayed", "current")
TE_FP8_GATHER_SOURCE = (
    "TransformerEngine v1.3, v1.4, v1.9, v2.0, v2.9, v2.12 and d0067d0 pytorch/module/layernorm_linear.py, base.py "
    "grad_output_preprocess, distributed.py gather_along_first_dim / _all_gather_fp8: under fp8 with sequence "
    "parallelism the column-parallel input (the norm's fp8 output), its backward re-gather and the row-parallel output "
    "gradient are all-gathered as fp8 (uint8) data, cast on the shard; current scaling all-reduces each cast's amax "
    "over the tp group first (with_amax_reduction): te_fp8_gather")

# Megatron-Core's pipeline without interleaving waits on every hand-off (Framework.blocking_p2p): Megatron-LM d98e8a6
# megatron/core/pipeline_parallel/schedules.py forward_backward_pipelining_without_interleaving runs, in the steady
# state, forward -> send_forward_recv_backward -> backward -> send_backward_recv_forward (the warm-up and cool-down:
# recv, pass, send), each p2p_communication.py _communicate a torch.distributed.batch_isend_irecv whose requests it
# waits on, then torch.cuda.synchronize() (batch_p2p_comm and batch_p2p_sync, True by default in
# model_parallel_config.py); megatron/training/arguments.py sets overlap_p2p_comm False without a virtual pipeline and
# argument_utils.py batch_p2p_comm = not overlap_p2p_comm (1e057005 and core_r0.16.0 alike; Megatron-Bridge 067f987
# training/comm_overlap.py: pp > 1 without vpp, overlap_p2p_comm False and batch_p2p_comm True). Megatron-LM d750965
# megatron/p2p_communication.py the same (batch_isend_irecv, wait, torch.cuda.synchronize()). The interleaved schedule
# overlaps its hand-offs (overlap_p2p_comm, on by default with a virtual pipeline) and is priced as before.
BLOCKING_P2P_SOURCE = ("Megatron-LM d98e8a6 megatron/core/pipeline_parallel/schedules.py "
                       "forward_backward_pipelining_without_interleaving and p2p_communication.py _communicate: each "
                       "steady-state hand-off a batched isend / irecv waited on, then torch.cuda.synchronize() "
                       "(batch_p2p_comm, batch_p2p_sync True; overlap_p2p_comm False without a virtual pipeline, "
                       "arguments.py; Megatron-Bridge 067f987 comm_overlap.py the same): blocking_p2p")

# torch.distributed.pipelining's Schedule1F1B waits on its hand-offs as Megatron-Core's 1F1B does (blocking_p2p):
# pytorch 1fd7abc torch/distributed/pipelining/schedules.py Schedule1F1B._step_microbatches runs min(m, p - i) warm-up
# forwards (the last one's send held back), then the "1B1F" loop: _wait_batch_p2p(_batch_p2p(fwd_sends + bwd_recvs))
# before each backward and _wait_batch_p2p(_batch_p2p(bwd_sends + fwd_recvs)) before each forward: the same op order
# as Megatron's p - i - 1 warm-ups and forward / exchange / backward / exchange, each exchange one batched isend /
# irecv with the neighbour the compute stream waits on (ProcessGroupNCCL's Work.wait). The mid-2024 text (the
# pipelining package as torch 2.4 shipped it: `if fuse_work := _batch_p2p(...): fuse_work.wait()`) is the same; the
# torchtitan rows ran torch 1963fc8 (2024-12-23), between the two, not read. Its ScheduleInterleaved1F1B (a
# PipelineScheduleMulti in both texts) runs a time-step grid: each step's pass, then one batched exchange of that
# step's sends and the neighbours' step outputs, waited on: blocking too, priced apart (lockstep_interleaved: the
# grid's steps, read in the torch 2.6.0 text, TORCH_LOCKSTEP_SOURCE; blocking_p2p covers 1F1B without
# interleaving only).
TORCH_BLOCKING_P2P_SOURCE = ("pytorch 1fd7abc torch/distributed/pipelining/schedules.py Schedule1F1B: warm-up "
                             "min(m, p - i) forwards, then each backward after _wait_batch_p2p(_batch_p2p(fwd_sends + "
                             "bwd_recvs)) and each forward after _wait_batch_p2p(_batch_p2p(bwd_sends + fwd_recvs)) "
                             "(the mid-2024 text alike; the rows' 1963fc8 between them): blocking_p2p")
TORCH_LOCKSTEP_SOURCE = ("torch 2.6.0 (git 2236df1, the release nearest the rows' 1963fc8 of 2024-12-23, which was "
                         "not read) torch/distributed/pipelining/schedules.py: ScheduleInterleaved1F1B."
                         "_calculate_single_rank_operations and _get_1f1b_rank_ops build the time-step grid; "
                         "PipelineScheduleMulti._step_microbatches runs each step's pass, then _batch_p2p(its sends + "
                         "the neighbours' step receives).wait()")
# DeepSpeed's pipeline engine waits on every hand-off (blocking_p2p): deepspeed/runtime/pipe/schedule.py TrainSchedule
# yields 2 (m + p - 1) steps, each a stage's exchange with one neighbour then its pass (forward steps: RecvActivation
# then SendGrad with the previous stage; backward steps: SendActivation then RecvGrad with the next; 1F1B's op order;
# a stage's forward steps fall on the steps its neighbours' backward steps do, so each pair's calls meet in the same
# step); engine.py _exec_recv_activations / _exec_send_grads / _exec_send_activations / _exec_recv_grads call p2p.py
# send / recv once a tensor, which assert async_op False and call dist.send / dist.recv: torch's NCCL process group
# waits on each on the compute stream, and an ncclSend "is blocking for the GPU" until the peer's ncclRecv (NCCL user
# guide, point-to-point: operations that must progress together are fused in a group, which these are not). The two
# transfers of a steady-state exchange therefore run one after the other (exchange_calls 2): under that op order,
# each transfer completing h after both stages reach it, a step on uniform stages is (m + p - 1)(f + b) + 2 (p - 1) h
# + 2 (2m - 3) h (p >= 3; 2 (m - 1) h at p = 2) while h <= f, the fill and drain's transfers single, each steady
# exchange 2h (tests/test_pipeline_blocking.py, p = 4, m = 8 by hand). With tp > 1 the engine sends a tp-shard
# (is_pipe_partitioned = is_model_parallel: PartitionedTensor, 1 / tp of the activation and a small meta tensor) and
# the receiver all-gathers it over the tp group (PartitionedTensor.full), the model's T h / t bytes a hand-off; the
# all-gathers are priced in the passes (handoff_gathers: DEEPSPEED_HANDOFF_GATHER_SOURCE). DeepSpeed 735406e,
# 2022-06, the BLOOM runs' era; 38327e0 the same, each step's two calls in the other order (the same step time).
DEEPSPEED_BLOCKING_P2P_SOURCE = ("DeepSpeed 735406e (2022) and 38327e0 deepspeed/runtime/pipe/schedule.py "
                                 "TrainSchedule (each step: the exchange with one neighbour, then the pass) and "
                                 "p2p.py send / recv (dist.send / dist.recv, async_op refused; NCCL's ncclSend "
                                 "blocking for the GPU until the peer's receive): blocking_p2p, each steady-state "
                                 "exchange's two transfers one after the other (exchange_calls 2); engine.py "
                                 "is_pipe_partitioned: a tp-shard sent, all-gathered by the receiver")

# DeepSpeed's partitioned hand-offs (Framework.handoff_gathers, handoff_gather_copy_bytes), DeepSpeed 735406e
# (2022-06-20) deepspeed/runtime/pipe/engine.py: is_pipe_partitioned = is_grad_partitioned = is_model_parallel (tp > 1,
# lines 133-134). _exec_forward_pass on a stage past the first rebuilds its received input,
# PartitionedTensor.from_meta(...).full() (line 648), before super().forward; a stage before the last replaces its
# output by a tp-shard to send and keeps only its graph (first_output.data = torch.zeros(1), line 680).
# _exec_backward_pass on a stage before the last (the last returns after backward(loss), lines 720-723) all-gathers
# that output back (part_output.full(), line 741) and the received gradient (part_grad.full(), line 755) before
# torch.autograd.backward: per micro-batch 0 + 2 all-gathers on the first stage, 1 + 2 on a middle one, 1 + 0 on the
# last: (1, 2), each of the whole b s h activation in the training dtype. deepspeed/runtime/utils.py PartitionedTensor
# .full (lines 708-736): torch.zeros of the whole tensor (write 2 bytes an element), the rank's part copied in,
# dist.all_gather(partition_tensors, ...) over get_slice_parallel_group() (topology.py: the 'model' axis, the tp
# group), synchronous, so the computation stream waits for it; torch's list all_gather in ProcessGroupNCCL gathers into
# a flat buffer of its own (flatten_for_scatter_gather), then copies each part out to the list (read 2, write 2; the
# pytorch 0007e75 text and a 1.x one alike; the computation stream waits for these too); .clone() of the result (read
# 2, write 2): 2 + 4 + 4 = 10 bytes an element of T h, the rank's 1 / t part copied in (4 / t) not counted.
# Megatron-DeepSpeed's GPTModelPipe (bigscience 0035f06 gpt_model.py) hands one tensor between stages, the attention
# mask kept aside (args.attn_mask): the hidden states alone are partitioned. Not priced: each from_meta's
# meta.tolist() (a host sync, 3 a micro-batch), the sender's and receiver's 1 / t copies (_partition_tensor's clone,
# the receive buffer's clone).
DEEPSPEED_HANDOFF_GATHER_SOURCE = ("DeepSpeed 735406e deepspeed/runtime/pipe/engine.py is_pipe_partitioned = "
                                   "is_model_parallel: _exec_forward_pass all-gathers its received input "
                                   "(PartitionedTensor.full) on every stage but the first, _exec_backward_pass its "
                                   "output and the received gradient on every stage but the last (handoff_gathers "
                                   "(1, 2)); runtime/utils.py PartitionedTensor.full: torch.zeros, dist.all_gather "
                                   "over the tp group into a list (torch's copy-out), .clone(): 10 bytes an element "
                                   "(handoff_gather_copy_bytes)")
# The backward's tensor-parallel collectives beside its GEMMs (tp_backward_async; costmodel._layer_compute.
# async_tp_backward_s). Megatron-Core's GPT layer with Transformer Engine (Megatron-LM d98e8a6 megatron/core/models/gpt/
# gpt_layer_specs.py: linear_qkv and linear_fc1 TELayerNormColumnParallelLinear, a te.pytorch.LayerNormLinear;
# linear_proj and linear_fc2 TERowParallelLinear, a te.pytorch.Linear; core/extensions/transformer_engine.py passes
# sequence_parallel and the tp group to TE, which runs the collectives itself). Megatron-LM 2021 (d750965 megatron/mpu/
# layers.py) had none of it: ColumnParallelLinear's input passes copy_to_tensor_model_parallel_region, whose backward
# all-reduces after F.linear's whole backward; the asynchronous all-reduce came in September 2021 (cf7efd4), the
# sequence-parallel all-gather and reduce-scatter in March 2022 (02bb1f5). bigscience-workshop/Megatron-DeepSpeed
# (0035f06, BLOOM's; 8387ae1 the same) keeps the 2021 layers. torchtitan 9dec370 parallelize_llama.py apply_tp runs
# DTensor's ColwiseParallel / RowwiseParallel with PrepareModuleInput(Shard(1) -> Replicate) and
# RowwiseParallel(output_layouts=Shard(1)): the backward mirrors each redistribution (a reduce-scatter for each
# all-gather, an all-gather for each reduce-scatter), each waited on where its result is read, the GEMM after it; its
# async TP (torch._inductor.config._micro_pipeline_tp) is the fsdp2-async-tp profile's, not priced apart.
TP_BACKWARD_ASYNC_SOURCE = (
    "TransformerEngine v1.9 and v2.8 transformer_engine/pytorch/module/linear.py and layernorm_linear.py backward "
    "(without userbuffers): a column-parallel linear under sequence parallelism gathers its input again "
    "(gather_along_first_dim, async_op=True) beside the dgrad GEMM, then reduce-scatters the dgrad "
    "(reduce_scatter_along_first_dim, async_op=True) beside the wgrad GEMM, waited after it; without it the dgrad's "
    "allreduce(async_op=True) beside the wgrad GEMM; a row-parallel one gathers its output gradient first "
    "(base.py grad_output_preprocess, synchronous) and has no collective without it. Megatron-LM d98e8a6, "
    "core_r0.8.0 and core_r0.16.0 megatron/core/tensor_parallel/layers.py LinearWithGradAccumulationAndAsync"
    "Communication.backward the same; d98e8a6 megatron/training/arguments.py asserts CUDA_DEVICE_MAX_CONNECTIONS=1 "
    "with tp > 1 before Blackwell, so each collective is queued before its GEMM: tp_backward_async")

_MEGATRON_CORE = Framework(
    name="megatron-core",
    what="Megatron-Core: 1F1B and interleaved, distributed optimizer (ZeRO-1) with pipelines, Megatron FSDP "
         "(ZeRO-3) without, --overlap-grad-reduce / --overlap-param-gather, fused attention, SP, fp8",
    schedules=("1f1b", "interleaved"), max_zero=3, max_zero_with_pp=1, shard_with_pp_once=False,
    overlap_dp=(False, True), overlap_dp_usual=(True,) * 4, fused_attention=True, fp8_saved_inputs=True,
    selective="attention", sequence_parallel=True, uneven_chunks=True, fp8=True, attention_kernel="cudnn",
    xent_bytes=52.0, xent_peak_bytes=2.0 + 4.0, grad_reduce_bytes=(4.0, 2.0, 4.0), overlap_param_gather=True,
    layer_saves="te", dropout=False, expert_fp8_cast_bytes=2.0 + 1.0 + 1.0,
    fp8_cast_bytes=TE_FP8_CAST_BYTES["delayed"][0], fp8_norm_cast_bytes=TE_FP8_CAST_BYTES["delayed"][1],
    te_ring_attention=True, moe_host_sync=True, expert_bias_loop=True, recompute_modules=True,
    interleaved_microbatches="at_least_pp", blocking_p2p=True, dp_bucket_elems=(40e6, 1e6),
    dp_buckets_need_overlap=True, zero3_gathers=(1.0, 1.0, 1.0),
    tp_backward_async=True, te_fp8_gather="delayed", ep_fp16=False,
    sources=(TP_BACKWARD_ASYNC_SOURCE, TE_FP8_GATHER_SOURCE,
             "Megatron-LM core_v0.16.0 (3bec9aa) megatron/core/transformer/moe/experts.py TEGroupedMLP.forward: FC1's "
             "bias inside Transformer Engine's GroupedLinear, FC2's (skip_bias_add) added by _apply_bias, torch.split "
             "of the output and the probabilities by tokens per expert, t + b * p per local expert, torch.cat "
             "(expert_bias_loop)",
             "Megatron-LM d98e8a6 megatron/core/distributed/distributed_data_parallel.py: bucket_size = max(40000000, "
             "1000000 x dp size) elements, None (one bucket) without overlap_grad_reduce; the distributed optimizer "
             "reduce-scatters and all-gathers per bucket (a stage past the first, pp_rank > 0, runs one bucket: "
             "priced as the first stage's)",
             "Megatron-LM d98e8a6 megatron/core/distributed/fsdp/mcore_fsdp_adapter.py: Megatron FSDP's units are the "
             "TransformerLayers (fsdp_unit_modules): one all-gather a layer per pass and one reduce-scatter a layer "
             "per micro-batch ('optim_grads_params'), the rest of the model one more",
             "Megatron-LM 1e057005 megatron/core/distributed/custom_fsdp/fully_sharded_data_parallel.py (and d98e8a6 "
             "fsdp/src/megatron_fsdp/megatron_fsdp.py): each micro-batch a unit is all-gathered in its forward "
             "pre-hook (the next one prefetched), released after its forward, gathered again in its backward "
             "pre-hook (not by full recompute's re-run forward), released after its backward; its gradients "
             "reduce-scattered after every backward (grad_reduce_every_bprop; no_sync defers nothing), from the "
             "main-gradient buffer (fp32 under --bf16, param_and_grad_buffer.py grad_reduce_in_fp32); expert "
             "parameters over the expert-data-parallel group; the modules outside the units (embedding, final norm, "
             "output layer) gathered once a step and kept to finish_grad_sync, priced per pass: 2m - 1 of their "
             "gathers too many a step, 0.8% of the exchange's bytes on Qwen3-235B at tp 2 and 4 micro-batches, up to "
             "6.5% on Llama 3 8B (its embedding and head 13% of its parameters)",
             "Megatron-LM d98e8a6 with TransformerEngine d0067d0: TELayerNormColumnParallelLinear, "
             "TEDotProductAttention (cuDNN fused attention), TERowParallelLinear, fused bias-SwiGLU and "
             "bias-dropout-add; what each saves: costmodel._memory_terms.te_saved_bytes",
             "dropout off: NVIDIA's recipes run without it (Megatron-Bridge gpt_provider.py GPTProvider175B "
             "hidden_dropout = attention_dropout = 0.0, its Llama providers the same; Megatron-LM examples/llama "
             "--hidden-dropout 0.0); Megatron-Core's library default is 0.1 (transformer_config.py:188, 191)",
             "Megatron-LM d98e8a6 megatron/core/distributed/distributed_data_parallel.py:924 grad_dtype = "
             "torch.float if grad_reduce_in_fp32 else param.dtype: the gradient buffer is the reduce buffer (one "
             "setting, memory and wire: grad_buffer_bytes None); megatron/training/training.py:2635 sets it from "
             "--accumulate-allreduce-grads-in-fp32, which --bf16 turns on (arguments.py:1204-1216): 4 bytes bf16 and "
             "fp8, 2 fp16 (core_r0.8.0 baf94af distributed_data_parallel.py:108 the same)",
             "Megatron-LM core_r0.8.0 (baf94af) megatron/training/arguments.py: --bf16 sets accumulate_allreduce_grads_"
             "in_fp32 (DDP grad_reduce_in_fp32: 4 bytes), --fp16 does not (2); fp8 runs with --bf16",
             "Megatron-LM core_r0.8.0 (baf94af) core/tensor_parallel/cross_entropy.py, unfused (arguments.py "
             "--cross-entropy-loss-fusion store_true; ModelParallelConfig.cross_entropy_loss_fusion False at d98e8a6): "
             ".float() (read 2, write 4 bytes a logit), max (4), in-place subtract (4, 4), exp (4, 4), sum (4), div_ "
             "(4, 4); backward mul_ (4, 4) and autograd's cast of the fp32 gradient to the logits' 16-bit dtype "
             "(validate_outputs: 4, 2): 52; language_module.py transposes the labels, not the logits",
             "its loss's peak (xent_peak_bytes 6), the same code (00611e6 alike): forward, the caller's 16-bit logits "
             "(2 bytes a logit) and the .float() copy (4), which the in-place sub_, exp and div_ turn into the softmax "
             "saved for backward (the Function saves not its input); backward, the gradient written in place in that "
             "buffer (4) and autograd's 16-bit cast of it (2): 6 at either peak, 4 held between them",
             BLOCKING_P2P_SOURCE,
             "Megatron-LM megatron/core/pipeline_parallel/schedules.py (1F1B, with and without interleaving); d98e8a6 "
             "lines 1160-1180: interleaving needs a group size N in [pp, m] with m % N 0 or >= pp, so m >= pp",
             "Megatron-LM docs, distributed optimizer (docs/source/api-guide/dist_optimizer.md)",
             "Megatron-LM README, Performance Benchmarking: runs with --overlap-grad-reduce and --overlap-param-gather;"
             " core_r0.8.0 distrib_optimizer.py: each bucket's weight all-gather waited on in the forward pre-hook",
             "Transformer Engine DotProductAttention: get_attention_backend prefers cuDNN FusedAttention to "
             "FlashAttention on Hopper 'for performance reasons' (one release left the preference out)",
             "Transformer Engine transformer_engine/pytorch/module/linear.py and layernorm_linear.py, _Linear.forward: "
             "under fp8 the quantized input (column-wise data only) is what is saved for the backward pass",
             "Megatron-LM arguments --pipeline-model-parallel-layout, --decoder-first/last-pipeline-num-layers "
             "(chunks of any whole-layer size)",
             "Megatron-LM megatron/core/transformer/moe/README.md: --expert-model-parallel-size, MoE Parallel "
             "Folding, alltoall dispatcher; --overlap-moe-expert-parallel-comm off by default",
             "TransformerEngine v2.11 (c188b53) pytorch/module/grouped_linear.py: under fp8 tex.split_quantize of the "
             "input (row-wise and, for the weight gradient, column-wise: read 2, write 1 + 1 bytes an element) and of "
             "the output gradient in backward; one quantization and one cuBLAS GEMM per expert (common/gemm/"
             "cublaslt_gemm.cu multi_stream_cublas_gemm)",
             "Megatron-LM d98e8a6 megatron/training/arguments.py --fp8-recipe (default 'delayed'); TransformerEngine "
             "d0067d0 pytorch/module/linear.py, layernorm_linear.py, csrc/quantizer.cpp, csrc/extensions/"
             "normalization.cpp: the casts outside the fp8 GEMMs (TE_FP8_CAST_BYTES, delayed scaling)",
             "Megatron-LM d98e8a6 megatron/training/arguments.py --cp-comm-type (default ['p2p']); "
             "TransformerEngine d0067d0 pytorch/attention/dot_product_attention/context_parallel.py "
             "AttnFuncWithCPAndKVP2P: the ring's steps, exchange and merges (costmodel._layer_compute.TE_RING_BYTES)"),
)

FRAMEWORKS: dict[str, Framework] = {f.name: f for f in (
    Framework(
        name="generic",
        what="plansweep's model before framework profiles (cost model version 3): every schedule, overlap as "
             "the strategy says, ZeRO-2/3 only without a pipeline, attention scores stored",
        schedules=SCHEDULES, max_zero=3, max_zero_with_pp=1, shard_with_pp_once=False,
        overlap_dp=(False, True), overlap_dp_usual=(False,) * 4, fused_attention=False, fp8_saved_inputs=False,
        selective="attention", sequence_parallel=True, uneven_chunks=False, fp8=True, grad_buffer_bytes=(4.0,) * 3,
        sources=("costmodel/_evaluate.py module docstring",
                 "gradients kept in fp32 (costmodel._dtypes GRAD_BYTES: Megatron's 18 bytes a parameter)"),
    ),
    Framework(
        name="megatron-2021",
        what="Megatron-LM as in Narayanan et al. 2021 and Korthikanti et al. 2022: 1F1B and interleaved 1F1B, "
             "no optimizer sharding, gradient all-reduce after the backward pass, unfused attention",
        schedules=("1f1b", "interleaved"), max_zero=0, max_zero_with_pp=0, shard_with_pp_once=False,
        overlap_dp=(False,), overlap_dp_usual=(False,) * 4, fused_attention=False, fp8_saved_inputs=False,
        selective="attention", sequence_parallel=True, uneven_chunks=False, fp8=False, expert_parallel=False,
        expert_tensor_parallel=False, xent_bytes=52.0, xent_peak_bytes=2.0 + 4.0, grad_reduce_bytes=(4.0, 2.0, 4.0),
        grad_buffer_bytes=(4.0,) * 3,
        interleaved_microbatches="pp_multiple", blocking_p2p=True,
        sources=("Narayanan et al. 2021, Sec. 2.2 (schedules) and Sec. 4 (implementation)",
                 "Megatron-LM d750965 megatron/p2p_communication.py _communicate: batch_isend_irecv, each request "
                 "waited on, then torch.cuda.synchronize(); megatron/schedules.py forward_backward_pipelining_without_"
                 "interleaving: send_forward_recv_backward, send_backward_recv_forward (blocking_p2p)",
                 "Megatron-LM d750965 megatron/training.py line 366: interleaving asserts micro-batches % pp == 0",
                 "gradients kept at 4 bytes a parameter at every precision, the papers' 18 bytes a parameter "
                 "(Megatron-LM d750965 megatron/model/distributed.py would keep fp16 runs' main_grad in fp16 without "
                 "--accumulate-allreduce-grads-in-fp32: the profile keeps the count its validation was set on)",
                 "Megatron-LM d750965 arguments.py: --bf16 forces accumulate_allreduce_grads_in_fp32 (4), fp16 not (2)",
                 "Megatron-LM d750965 (2021-06-29) megatron/model/gpt_model.py post_language_model_processing "
                 "(output.float(): 2, 4 bytes a logit) and megatron/mpu/cross_entropy.py (the megatron-core profile's "
                 "count after the cast, the cast's own backward 4, 2): 52; its peak, the 16-bit output the caller "
                 "still holds (2) and its fp32 copy turned into the saved softmax in place (4), backward that buffer "
                 "(4) and the cast (2): 6 (xent_peak_bytes)",
                 "Korthikanti et al. 2022, Sec. 4 (SP, selective recompute; 5 a s^2 b bytes of scores a layer)"),
    ),
    _MEGATRON_CORE,
    dataclasses.replace(
        _MEGATRON_CORE, name="megatron-bridge", xent_bytes=2 + 2 + 2 + 2 + 2, xent_peak_bytes=2.0,
        grad_reduce_bytes=(2.0, 2.0, 2.0),
        weight_gather_bytes=(2.0, 2.0, 1.0),
        fp8_cast_bytes=TE_FP8_CAST_BYTES["current"][0], fp8_norm_cast_bytes=TE_FP8_CAST_BYTES["current"][1],
        te_fp8_gather="current",  # FP8-CS: the amax all-reduced before each fp8 gather's cast
        what="Megatron-Core as NVIDIA's Megatron-Bridge runs it: as megatron-core, the loss fused (Transformer "
             "Engine's Triton cross-entropy)",
        sources=("Megatron-Bridge src/megatron/bridge/models/gpt_provider.py (067f987) cross_entropy_loss_fusion = "
                 "True; scripts/performance/utils/overrides.py: cross_entropy_fusion_impl = 'te'",
                 "TransformerEngine transformer_engine/pytorch/triton/cross_entropy.py (1b2b4a8): online_softmax_"
                 "kernel reads the 16-bit logits (2 bytes a logit), cross_entropy_kernel reads them again and writes "
                 "the gradient in place (2, 2), backward element_mul_kernel scales it in place (2, 2) unless the "
                 "incoming gradient is 1 (per-token losses: it is not): 10; the gradient written over the logits "
                 "(in place) and per-row statistics only: 2 bytes a logit at the peak (xent_peak_bytes)",
                 "Megatron-Bridge v0.2.0 (25.11) scripts/performance/configs/llama3/llama3_llm_pretrain.py, 067f987 "
                 "perf_recipes/_common.py: grad_reduce_in_fp32 = False (2 bytes; bf16_mixed's default is fp32)",
                 "Megatron-Bridge 067f987 scripts/performance: H100 FP8 runs as 'fp8_cs' (Float8CurrentScaling): the "
                 "casts outside the fp8 GEMMs at TE_FP8_CAST_BYTES['current']",
                 "Megatron-Bridge v0.2.0, 067f987 performance fp8_cs: fp8_param_gather = True; Megatron-LM 0d8e071 DDP "
                 "and megatron_fsdp gather Float8Tensor weights as uint8 (1 byte); comm_overlap.py: overlap on, dp > 1",
                 "the megatron-core profile's sources"),
    ),
    *(dataclasses.replace(_MEGATRON_CORE, name=name, **{flag: True, "overlap_ep_steady_only": flag == "overlap_ep"},
                          what=what,
                          sources=(source, "the megatron-core profile's sources"))
      for name, flag, what, source in (  # Megatron-Core's MoE options, one each
          ("megatron-core-a2a-overlap", "overlap_ep",
           "Megatron-Core as above with EP A2A overlap (--overlap-moe-expert-parallel-comm --delay-wgrad-compute): "
           "the MoE dispatch / combine all-to-alls of one micro-batch hide under another's compute",
           "Megatron-LM megatron/core/transformer/moe/README.md: EP A2A Overlap, '--overlap-moe-expert-"
           "parallel-comm --delay-wgrad-compute' (default False); MoE Parallel Folding (etp x ep x edp)"),
          ("megatron-core-deepep", "ep_dispatch_per_node",
           "Megatron-Core as above with the flex dispatcher (DeepEP / HybridEP backend: a token crosses the "
           "network once per destination node, then NVLink), no EP A2A overlap",
           "Megatron-LM core/transformer/moe/README.md: 'FlexDispatcher with DeepEP backend: removes redundant "
           "tokens during cross-node communication' (--moe-token-dispatcher-type flex, backend deepep|hybridep)"))),
    dataclasses.replace(
        _MEGATRON_CORE, name="megatron-core-deepep-a2a-overlap", overlap_ep=True, ep_dispatch_per_node=True,
        overlap_ep_steady_only=True,
        what="Megatron-Core with the flex dispatcher (per-node dispatch) and EP A2A overlap (hai-llm adds "
             "DeepSeek-V3's fp8 dispatch to it)",
        sources=("the megatron-core-deepep and megatron-core-a2a-overlap profiles' sources",
                 "DeepSeek-AI 2024 arXiv:2412.19437 Sec. 3.2.2: tokens sent by IB once to each target node "
                 "and forwarded by NVLink; DualPipe overlaps the all-to-alls with computation"),
    ),
    dataclasses.replace(
        _MEGATRON_CORE, name="hai-llm", overlap_ep=True, ep_dispatch_per_node=True, fp8_dispatch=True,
        tp_backward_async=False,  # its layer code is not published: the backward's exchange the forward's
        te_fp8_gather="",  # its layer code is not published: 16-bit exchanges
        blocking_p2p=False,  # DualPipe's code is not Megatron-Core's pipeline: hand-offs left as 1F1B's
        attention_kernel="standard", xent_bytes=4 + 8 + 2, xent_peak_bytes=4.0,  # not published: generic's
        grad_reduce_bytes=(2.0,) * 3,
        overlap_param_gather=False, grad_buffer_bytes=(4.0,) * 3, layer_saves="korthikanti", recompute_modules=True,
        fp8_cast_bytes=(0.0,) * 4, fp8_norm_cast_bytes=None,  # its dense layers' quantization kernels not published
        what="DeepSeek's HAI-LLM as the DeepSeek-V3 report describes it: DeepEP dispatch (once per destination node, "
             "then NVLink), the all-to-alls overlapped with compute, under fp8 an fp8 dispatch and a 16-bit "
             "combine; otherwise priced as megatron-core-deepep-a2a-overlap (DualPipe is priced as 1F1B)",
        sources=("DeepSeek-AI 2024 arXiv:2412.19437 Sec. 3.2 (HAI-LLM), Sec. 3.2.1 (DualPipe overlaps the "
                 "all-to-alls with computation), Sec. 3.2.2 (IB once per target node, NVLink forwarding), Sec. "
                 "3.3.3 (activations quantised to FP8 before the MoE dispatch, combine kept in BF16; 'the master "
                 "weights ... and gradients (used for batch size accumulation) are still retained in FP32': "
                 "grad_buffer_bytes 4); its layer code is not published: Korthikanti et al.'s activation count",
                 "DeepSeek-AI 2024 arXiv:2412.19437 Sec. 3.2.3 ('we recompute all RMSNorm operations and MLA "
                 "up-projections during back-propagation') and Sec. 3.3.2 (the SwiGLU operator's inputs cached, its "
                 "output recomputed in the backward pass): the recomputations Megatron-Core names layernorm, "
                 "mla_up_proj and moe_act, so a row may name them (recompute_modules)",
                 "deepseek-ai/DeepEP docs/legacy.md, DeepSeek-V3/R1 pre-training: 'top-4 groups, top-8 experts, FP8 "
                 "dispatching and BF16 combining'; buffer.py dispatch: [tokens, hidden] fp8 e4m3, hidden / 128 scales",
                 "the megatron-core-deepep-a2a-overlap profile's sources"),
    ),
    Framework(
        name="deepspeed",
        what="DeepSpeed (Megatron-DeepSpeed): ZeRO 1-3, its pipeline engine (1F1B only) with ZeRO-0/1 only, "
             "overlap_comm on by default for ZeRO-3 only, unfused attention",
        schedules=("1f1b",), max_zero=3, max_zero_with_pp=1, shard_with_pp_once=False,
        overlap_dp=(False, True), overlap_dp_usual=(False, False, False, True), fused_attention=False,
        fp8_saved_inputs=False, selective="attention", sequence_parallel=True, uneven_chunks=False, fp8=False,
        expert_tensor_parallel=False, hp_grad_bytes=18.0, xent_bytes=60.0, xent_peak_bytes=4.0 + 4.0,
        grad_reduce_bytes=(2.0, 2.0, 2.0),
        all_reduce_then_gather=(True, False, False), dp_bucket_elems=(5e8, 0.0), zero3_gathers=(4.0, 2.0, 0.0),
        zero3_kept=(0.0, 0.0, 5e8), weight_gather_in_step=True, grad_buffer_bytes=(4.0,) * 3,
        zero2_scatter_every_microbatch=True, overlap_dp_min_zero=2, hp_grad_zero1_needs_pp=True, blocking_p2p=True,
        exchange_calls=2, handoff_gathers=(1.0, 2.0), handoff_gather_copy_bytes=2.0 + 4.0 + 4.0,
        cp_ulysses=True, ep_in_dp=True, type_partition="transformer",
        sources=(DEEPSPEED_BLOCKING_P2P_SOURCE, DEEPSPEED_HANDOFF_GATHER_SOURCE,
                 "deepspeedai/Megatron-DeepSpeed 4efb479 megatron/model/gpt_model.py GPTModelPipe: "
                 "partition_method='type:transformer' (type_partition; DeepSpeed runtime/pipe/module.py, runtime/"
                 "utils.py partition_balanced, run on GPTModelPipe's layer list: 70 layers over 12 stages 6 x 10, 5, "
                 "5; 80 over 6 14, 14, 13 x 4; 61 over 8 8 x 5, 7 x 3)",
                 "deepspeedai/Megatron-DeepSpeed 4efb479 (cp_ulysses): megatron/core/parallel_state.py "
                 "initialize_model_parallel asserts tensor and pipeline parallel size 1 with --ds-sequence-parallel-"
                 "size > 1 ('DeepSpeed's sequence parallel does not work with tensor parallel or pipeline parallel'); "
                 "megatron/model/transformer.py ParallelAttention asserts num_attention_heads divisible by it and "
                 "projection_size == kv_projection_size (no grouped K, V heads) and wraps the attention in DeepSpeed's "
                 "DistributedAttention (deepspeed/sequence/layer.py: one all_to_all_single each for Q, K, V and the "
                 "output, the sequence gathered and the heads scattered, their gradients the same way back)",
                 "DeepSpeed 38327e0 deepspeed/runtime/zero/config.py: reduce_bucket_size and allgather_bucket_size 5e8 "
                 "elements; stage3.py reduce_independent_p_g_buckets_and_remove_grads: a reduce-scatter "
                 "(reduce_scatter_coalesced, one call) per full bucket, every micro-batch",
                 "DeepSpeed 38327e0 zero/partitioned_param_coordinator.py fetch_sub_module: one all_gather_coalesced "
                 "(partition_parameters.py: one collective) per module's parameters, prefetches up to "
                 "stage3_prefetch_bucket_size (5e7) within stage3_max_live_parameters (1e9): past 1e9 parameters "
                 "about one a module as each release frees room; parameters under stage3_param_persistence_threshold "
                 "(1e5: norms, biases) never gathered. Megatron-DeepSpeed's layer: query_key_value, dense, "
                 "dense_h_to_4h (SwiGLU fused), dense_4h_to_h: 4 a layer; the embedding and the head: 2",
                 "DeepSpeed 38327e0 __params_to_release: a module's parameters stay gathered when their next use is "
                 "within stage3_max_reuse_distance (1e9) elements of traversal: the forward's last modules, whose "
                 "next use is the backward's first, 2 x their size apart: 5e8 parameters not gathered again",
                 "DeepSpeed 38327e0 zero/stage_1_and_2.py step() and bf16_optimizer.py update_lp_params: after the "
                 "optimizer update, all_gather_dp_groups (runtime/utils.py: all_gather_into_tensor_dp_groups, one "
                 "all_gather_into_tensor of each flat bf16 group) gathers the updated weights: after the backward, "
                 "before the next forward, not overlapped",
                 "DeepSpeed engine.py communication_data_type (v0.6.0-v0.7.0 and v0.16.4): the training dtype (2); "
                 "ZeRO 1-3 reduce in it, BF16_Optimizer casts its fp32 gradients to it (allreduce_bucket)",
                 "bigscience-workshop/Megatron-DeepSpeed megatron/model/gpt_model.py (0035f06) GPTModelPipe: "
                 "float16_to_fp32 after the logits (2, 4 bytes a logit; CrossEntropy's .float() then a no-op); "
                 "megatron/mpu/cross_entropy.py (17e4536) clones the fp32 logits (4, 4), then Megatron's max, sub_, "
                 "exp, sum, div_ (32) and backward mul_ (8), the cast back (4, 2): 60; its peak, the fp32 logits "
                 "the loss is called on (4; the 16-bit ones dropped as the pipe's layers hand on their output) and the "
                 "clone turned into the saved softmax (4): 8 (xent_peak_bytes; backward 4 and the cast's 2)",
                 "DeepSpeed deepspeed/runtime/pipe/schedule.py (TrainSchedule: 1F1B)",
                 "DeepSpeed v0.16.4 engine.py _do_optimizer_sanity_check (BF16_Optimizer for bf16 with ZeRO 0, or ZeRO "
                 "1 with fp32 gradient accumulation), pipe/engine.py _exec_backward_pass (update_hp_grads after every "
                 "micro-batch's backward), bf16_optimizer.py _update_hp_grad (hp_grad.add_(lp.grad.to(float32)): 2 + "
                 "4, 8 + 4 bytes the add); _bf16_reduce_grads all-reduces, step() all-gathers bf16 weights (v0.6.4 so)",
                 "DeepSpeed deepspeed/runtime/pipe/engine.py (ZeRO-2/3 refused with pipeline parallelism)",
                 "DeepSpeed deepspeed/runtime/zero/config.py, overlap_comm_valid: overlap_comm defaults to stage == 3",
                 "DeepSpeed 38327e0 engine.py backward (line 2152) calls allreduce_gradients (2048-2062) after the "
                 "backward pass: ZeRO 0 (and the bf16 optimizer) all-reduce then, never beside it; ZeRO-1 reduces "
                 "there unless overlap_comm installs backward hooks (stage_1_and_2.py 527-528), and _configure_zero_"
                 "optimizer forced overlap_comm (and contiguous_gradients) off at stage 1 from 6ae756c03 (2021-07-26, "
                 "'ignore overlap/contiguous_gradients if using zero 1') to af033831f (2024-01-06, first in v0.13.0): "
                 "the releases the published DeepSpeed runs used (overlap_dp_min_zero 2; v0.13.0 on can overlap "
                 "ZeRO-1). With contiguous_gradients off, stage 1 reduces each bucket by buffered_reduce_fallback -> "
                 "allreduce_no_retain -> allreduce_bucket: a dist.all_reduce in the communication dtype (v0.12.0 "
                 "stage_1_and_2.py 1445-1464), the all_reduce_then_gather bytes",
                 "DeepSpeed v0.9.0-38327e0 engine.py get_data_types: grad_accum_dtype defaults to the model dtype "
                 "when ZeRO is on, fp32 only without it; _do_optimizer_sanity_check picks BF16_Optimizer for bf16 "
                 "at ZeRO-1 only with fp32 accumulation: a ZeRO-1 run without a pipeline accumulates its gradients "
                 "in bf16 (autograd's, not priced) and no hp_grad_bytes; v0.10.0 pipe/engine.py 239-249 reads "
                 "weight._hp_grad under bf16 (BF16_Optimizer's): pipelined bf16 runs at ZeRO 0-1 run it "
                 "(hp_grad_zero1_needs_pp)",
                 "ZeRO-2's gradient reductions priced as reduce-scatters: the bytes of v0.4.4-v0.12.3's stage_1_and_2.py "
                 "average_tensor (one dist.reduce per owner's slice of a bucket: each element once through a ring); "
                 "from v0.12.4 (2afa1c7f2, use_multi_rank_bucket_allreduce on by default) each bucket is all-reduced "
                 "(allreduce_and_scatter: twice those bytes), not priced here",
                 "DeepSpeed 38327e0 zero/stage_1_and_2.py lines 1424-1426 reduce_ready_partitions_and_remove_grads: "
                 "the backward hooks (create_reduce_and_remove_grad_hooks, lines 527-528 and 904-917) reduce each "
                 "bucket 'if self.partition_gradients or self.is_gradient_accumulation_boundary': ZeRO-2 every "
                 "micro-batch, ZeRO-1 at the last; engine.py 2051-2053 ('ZeRO stage >= 2 communicates during non "
                 "gradient accumulation boundaries as well') and 2073 (no_sync refused under ZeRO 2-3)",
                 "gradient memory kept at 4 bytes a parameter (fp32 high-precision gradients, bf16_optimizer.py "
                 "_update_hp_grad; the 16-bit model gradients beside them and ZeRO 1-2's 16-bit partitions not "
                 "re-derived)"),
    ),
    Framework(
        name="fsdp2",
        what="PyTorch FSDP2 as torchtitan runs it: FSDP (ZeRO-2/3) also with pipelines (weights kept gathered "
             "and gradients reduce-scattered once per step when pp > 1), prefetch overlap always on, "
             "torch.distributed.pipelining schedules, SDPA flash attention, float8, per-op selective checkpointing",
        schedules=("gpipe", "1f1b", "interleaved", "zb-v"), max_zero=3, max_zero_with_pp=3, shard_with_pp_once=True,
        zero1=False, tp_needs_sp=True, ep_in_sharded_dp=True, overlap_dp=(True,), overlap_dp_usual=(True,) * 4,
        fused_attention=True, fp8_saved_inputs=False, selective="op", sequence_parallel=True, uneven_chunks=True,
        fp8=True, expert_tensor_parallel=False,
        attention_kernel="flash2", fp8_cast_bytes=(6.0, 5.0, 6.0, 3.0), xent_bytes=48.0,
        xent_peak_bytes=4.0 + 4.0 + 4.0, kv_repeat_bytes=4.0,
        fsdp_unit_edges=True, grad_reduce_bytes=(4.0, 4.0, 4.0), ring_attention_bytes=(20.0, 46.0, 84.0, 60.0),
        dp_bucket_elems=(0.0, 0.0), zero3_gathers=(1.0, 1.0, 1.0), zero3_kept=(1.0, 1.0, 0.0),
        grad_buffer_bytes=(4.0,) * 3, interleaved_microbatches="pytorch_rounds", zero2_scatter_every_microbatch=True,
        eager_elem_bytes=(0.0, 15.0, 0.0), sp_copy_bytes=4.0, fp8_tp_gather=True, pp_grad_sync_after_backward=True,
        pp_grad_accum_bytes=10.0, ag_copy_out_bytes=2.0 + 2.0, rs_copy_in_bytes=(2.0 + 4.0, 4.0 + 4.0),
        blocking_p2p=True, lockstep_interleaved=True, cp_sdpa_only=True,
        sources=(TORCH_BLOCKING_P2P_SOURCE, TORCH_LOCKSTEP_SOURCE + ": lockstep_interleaved",
                 "FSDP2's copies beside its collectives (ag_copy_out_bytes 4, rs_copy_in_bytes 6 and 8): pytorch "
                 "torch/distributed/fsdp/_fully_shard/_fsdp_collectives.py (read at 8fc2039; the copy-in on the "
                 "current stream since pytorch's 'Ran reduce-scatter copy-in in default stream', 2024-06, before the "
                 "torchtitan rows' torch 1963fc8) foreach_reduce: torch._chunk_cat of the unit's unsharded gradients "
                 "into the reduce-scatter input allocated in the reduce dtype (torchtitan's mixed_precision_reduce "
                 "float32), then reduce_scatter_stream.wait_stream(current_stream): bf16 read 2, fp32 written 4; "
                 "_fsdp_param_group.py post_backward (the late-2025 text) hands it the unit's "
                 "unsharded_accumulated_grad (fp32, read 4) where an earlier backward did not reduce (the pipeline's "
                 "accumulation); "
                 "foreach_all_gather_copy_out: current_stream().wait_event(all_gather_event), then "
                 "split_with_sizes_copy of the bf16 all-gather output into each parameter's unsharded tensor (read "
                 "2, write 2); one each per collective the unit runs (FSDPParamGroup.unshard / post_backward), "
                 "counted as the exchange counts them; the all-gather copy-in (_foreach_copy_ of the shard, 1 / dp "
                 "of the bytes) not priced",
                 "the unsharded fp32 gradient accumulation with a pipeline (pp_grad_accum_bytes 10): torch.distributed."
                 "pipelining's PipelineStage runs every micro-batch's backward after set_requires_gradient_sync(False) "
                 "and set_reshard_after_backward(False) (stage.py backward_maybe_with_nosync), so each FSDP unit's "
                 "post_backward (torch/distributed/_composable/fsdp/_fsdp_param_group.py, the late-2024 text; the "
                 "rows' torch 1963fc8 not read) skips the reduce-scatter and runs, per parameter, _fsdp_param.py "
                 "accumulate_unsharded_grad_if_needed (unsharded_accumulated_grad += grad: fp32 += bf16, read 4 + 2, "
                 "write 4) and, the first micro-batch, to_accumulated_grad_if_needed (grad.to(reduce_dtype): read 2, "
                 "write 4); torchtitan 9dec370 mixed_precision_reduce float32: the stage's unsharded weights, 10 "
                 "bytes each a micro-batch, on the compute stream inside the backward",
                 "the gradients' reduce-scatter with a pipeline (pp_grad_sync_after_backward): pytorch torch/distributed/"
                 "pipelining/stage.py backward_maybe_with_nosync (read at 0138610, 2025; the torchtitan rows ran torch "
                 "1963fc8, 2024-12-23, not read here, assumed alike): every micro-batch's backward under "
                 "set_requires_gradient_sync(False), then, "
                 "after the last one, run_post_backward calls each FSDP param group's post_backward (the reduce-"
                 "scatters) and _root_post_backward_final_callback, which waits for them: nothing of the stage's "
                 "backward left to hide them behind",
                 "float8 tensor parallelism (fp8_tp_gather): torchtitan 9dec370 parallelize_llama.py apply_tp takes "
                 "torchao's Float8ColwiseParallel, Float8RowwiseParallel and PrepareFloat8ModuleInput under "
                 "float8.enable_float8_linear (its docs/float8.md: 'we cast sharded input into float8 and perform "
                 "float8 all-gather'); pytorch/ao eab345c (the benchmarks' torchao, 2024-12-23) torchao/float8/"
                 "float8_tensor_parallel.py: the input cast on the Shard(1) DTensor before redistribute to Replicate, "
                 "wo's and w2's output gradients cast on the shard (NoopFwToFloat8BwDynamic after the output "
                 "redistribute) before the backward all-gather; float8_ops.py allgather_fp8; the reduce-scatters "
                 "carry the GEMMs' 16-bit outputs and input gradients (float8_linear.py)",
                 "torch.compile'd RoPE (eager_elem_bytes 15 an element of q + hk): torchtitan's apply_rotary_emb "
                 "(models/llama/model.py 9dec370; llama3/model.py until 2026) multiplies complex tensors, and inductor "
                 "leaves every op on a complex tensor to eager ATen (pytorch torch/_inductor/lowering.py "
                 "unsupported_input_tensor: t.is_complex(), the fallback since pytorch PR 98155, 2023; the warning "
                 "torchtitan issue 15 reports): benchmarks/inductor_block_bytes.py (torch 2.14.1, inductor's CPU "
                 "backend, the lowering the same on CUDA) counts per element of Q and of K: xq.float() a kernel (read "
                 "2, write 4), the complex product eager (4, 4), type_as a kernel (4, 2): 20 bytes forward, the same "
                 "chain "
                 "on the gradient 20 backward, 20 again where per-op checkpointing recomputes it (the torchtitan rows "
                 "in view all recompute): 60, priced as eager code's 15 (x forward, 2 x backward, x again: 4 x 15); "
                 "the rest of the compiled block (norms, residual adds, SwiGLU, repeat_kv) counted within the fused "
                 "count and kv_repeat_bytes (the CPU count 13 bytes a token and h under them, the CUDA scheduler's "
                 "looped row reductions at h >= 4096 and its separate norm-weight reductions not counted on CPU: "
                 "left as they are)",
                 "DTensor sequence parallelism's copies (sp_copy_bytes 4): torchtitan parallelize_llama.py (9dec370) "
                 "apply_tp: SequenceParallel norms on Shard(1), PrepareModuleInput Shard(1) -> Replicate before "
                 "attention and feed_forward (2 all-gathers), RowwiseParallel(output_layouts=Shard(1)) on wo and w2 "
                 "(2 reduce-scatters); pytorch torch/distributed/tensor/placement_types.py Shard._to_replicate_tensor "
                 "and _reduce_shard_tensor call torch/distributed/_functional_collectives.py all_gather_tensor("
                 "gather_dim=1), which gathers on dim 0 then torch.cat(torch.chunk(res, group_size, dim=0), dim=1) "
                 "(pytorch PR 113324, 2023; in later torch, 2.14, a view where the dims before the gather dim are 1: "
                 "_maybe_view_chunk_cat), and reduce_scatter_tensor(scatter_dim=1), which cats the dim-1 chunks on dim "
                 "0 before the NCCL call: each a copy of the rank's b s h activation (read 2, write 2 bytes); "
                 "backward, "
                 "DTensor's Redistribute mirrors them (a reduce-scatter for each all-gather, an all-gather for each "
                 "reduce-scatter); per-op checkpointing keeps the reduce-scatters' outputs and runs the all-gathers "
                 "again (sel_tp). The rows in view: micro-batches of 12 and 16 sequences, so the copies are not views",
                 "PyTorch torch/distributed/fsdp/_fully_shard/_fsdp_collectives.py (8fc2039) foreach_reduce: the "
                 "reduce-scatter output cast to orig_dtype, the sharded parameter's (fp32 under torchtitan's "
                 "MixedPrecisionPolicy param_dtype bf16), and set as sharded_param.grad: 4 bytes, whatever the reduce "
                 "dtype (FSDP1 the same: _cast_grad_to_param_dtype, so also the llm-foundry profiles and PURE)",
                 "torchtitan 9dec370 torchtitan/parallelisms/parallelize_llama.py apply_fsdp: fully_shard per "
                 "TransformerBlock and the model (the root: embedding, final norm, output): one all-gather and one "
                 "reduce-scatter a unit per micro-batch; reshard_after_forward False for the last block; pytorch "
                 "325b98f torch/distributed/_composable/fsdp/_fsdp_state.py _lazy_init: the root not resharded "
                 "after forward (post_forward_mesh_info None): L - 1 all-gathers in backward",
                 "pytorch tensor/experimental/_attention.py (0123248; the end-2024 nightly unstored), rank c - 1: K, V"
                 " contiguous 8, K/V cat 8 (c - 1 times), fp32 merge 6 + 32, cast 6: 20 + 46 (c - 1); backward: fp32 "
                 "zeros 12, contiguous 8, step 0's += 30, dK/dV cat 16 a step, then dK, dV _partial_update 26, dQ += "
                 "10, K/V cat 8, casts 18: 84 + 60 (c - 1); K, V ALL_GATHER (torchtitan 9dec370's), dK, dV ALL_TO_ALL",
                 "pytorch 005da46 torch/distributed/_composable/fsdp/_fsdp_state.py: _root_pre_forward makes the "
                 "all-gather streams wait for the current stream (the optimizer step) before the first all-gathers "
                 "(the root's, then block 0's as its pre-forward reaches them: nothing under either); _pre_backward "
                 "prefetches the next unit's all-gather; _root_post_backward_final_callback waits for the last "
                 "reduce-scatter (block 0's, then the root's: embedding, final norm, output) on the compute stream: "
                 "the root's and block 0's collectives exposed (fsdp_unit_edges, as FSDP1's)",
                 "torchtitan 9dec370 / e7c0cae --training.mixed_precision_reduce: float32, the only choice (4 bytes)",
                 "torchtitan models/llama/model.py (9dec370) Attention.forward: repeat_kv(xk), repeat_kv(xv) (expand, "
                 "reshape: a copy) before SDPA, each reading hk columns and writing q (2 bytes an element): 4 bytes an "
                 "element of q + hk; backward sums the copies' gradients",
                 "torchtitan train.py (9dec370) loss_fn: cross_entropy(pred.float()), uncompiled ('compiling loss "
                 "function causes CUDA errors'): .float() (2, 4 bytes a logit), log_softmax (PyTorch 000cace "
                 "SoftMax.cu, cunn_SoftMaxForward for a row over sharedMemPerBlock / 4: reads 3 x 4 for the max, the "
                 "sum of exp and the output, writes 4); backward nll_loss's dense fp32 gradient (Loss.cu 00e3254: "
                 "zero_, 4), cunn_SoftMaxBackward (gradient read twice, output once, 4 written), the cast (4, 2): 48",
                 "its loss's peak (xent_peak_bytes 12), the same loss_fn: forward the 16-bit logits (2 bytes a "
                 "logit), the .float() copy (4) and log_softmax's output (4): 10; the copy freed when loss_fn returns "
                 "(ToCopyBackward keeps no tensor), train.py's 'del pred' frees the logits, log_softmax's output "
                 "stays (LogSoftmaxBackward saves its result); backward, nll_loss's fp32 gradient (4), then "
                 "_log_softmax_backward_data's (4) while both and the saved output live: 12, then the cast (4, 2): 6. "
                 "With a pipeline the stage keeps its output (the logits, 2) to the backward: 14 there, not priced",
                 "torchtitan torchtitan/distributed/fsdp.py get_fsdp_reshard_after_forward_policy: with PP the "
                 "default does not reshard after forward, 'to avoid per-microbatch all-gathers' (commit b5bcd76c6)",
                 "torch.distributed.pipelining schedules: ScheduleGPipe, Schedule1F1B, ScheduleInterleaved1F1B, "
                 "ScheduleZBVZeroBubble; PipelineStage syncs FSDP gradients on the last micro-batch only",
                 "pytorch 1fd7abc torch/distributed/pipelining/schedules.py ScheduleInterleaved1F1B: max(1, m // pp) "
                 "rounds of micro-batches, a ValueError unless they divide m; ScheduleZBVZeroBubble any m",
                 "torch.nn.functional.scaled_dot_product_attention (flash / memory-efficient kernels); its "
                 "flash backend is FlashAttention-2 (aten/src/ATen/native/transformers/cuda/flash_attn)",
                 "torchtitan torchtitan/parallelisms/parallelize_llama.py (commit 9dec370) _save_list and "
                 "_apply_ac_to_transformer_block: per-op selective checkpointing saves mm (every other one), "
                 "SDPA and reduce_scatter outputs; train_configs/llama3_*.toml selective_ac_option = 'op'",
                 "torchao torchao/float8/float8_linear.py, matmul_with_hp_or_float8_args.forward saves the "
                 "high-precision input and weight for the backward pass",
                 "torchao testing/training/roofline_utils.py get_tensor_memory_traffic_ovhd_s, tensorwise, unfused "
                 "(float8_roofline.py's default): an input or output gradient read for its max (2), read again and "
                 "written twice in fp8 (2 + 1 + 1); a weight read for its max (2), cast forward (2 + 1), back (2 + 1)",
                 "torchtitan config/configs.py pipeline_parallel_layers_per_stage (stages split at any layer)",
                 "FSDP2 without set_requires_gradient_sync(False) reduce-scatters every micro-batch's backward and "
                 "accumulates the sharded gradients (pytorch PR 126166's description: 'FSDP2 offers (1) without any "
                 "intervention'); torchtitan keeps that for gradient accumulation ('doing it by default makes the code "
                 "simpler', torchtitan PR 1710 review, 2025-09): ZeRO-2 at pp 1 every micro-batch; with pp the "
                 "PipelineStage defers it to the last (shard_with_pp_once)"),
    ),
)}


def _derive(base: str, name: str, **fields) -> None:
    """Registers profile ``name``: profile ``base`` with ``fields`` changed."""
    FRAMEWORKS[name] = dataclasses.replace(FRAMEWORKS[base], name=name, **fields)


_derive("deepspeed", "deepspeed-flash2", fused_attention=True, attention_kernel="flash2",
    what="DeepSpeed as the deepspeed profile, attention by FlashAttention-2 (Megatron-DeepSpeed "
         "--use-flash-attn-v2, or HF transformers' attn_implementation='flash_attention_2'): no s x s scores "
         "stored, the causal half at FlashAttention-2's rate where one is published (Hopper), else the standard "
         "formula",
    sources=("microsoft/Megatron-DeepSpeed megatron/model/transformer.py ParallelAttention: use_flash_attn for causal "
             "self-attention under --use-flash-attn-v2, FlashAttention-2's flash_attn_varlen_func (its output and "
             "per-row softmax statistics kept, no scores); ParallelMLP: dense_h_to_4h 2 f wide under --swiglu",
             "Dao 2023, FlashAttention-2 (arXiv:2307.08691): the attention matrix never written to HBM",
             "the deepspeed profile's sources"),
)
_derive("deepspeed", "deepspeed-bigscience", type_partition="transformer|embedding",
    what="BigScience's Megatron-DeepSpeed fork, which trained BLOOM: as the deepspeed profile, its pipeline stages cut "
         "with partition_method 'type:transformer|embedding' (the embedding and the tied head a layer each, on the "
         "first and last stage)",
    sources=("bigscience-workshop/bigscience train/tr11-176B-ml/tr11-176B-ml.slurm (e726b15), BLOOM's training "
             "script: --pp-partition-method 'type:transformer|embedding' (the fork's option; its default "
             "'type:transformer'); BLOOM's 70 layers over 12 stages then 5, 6 x 10, 5 (72 units of 6)",
             "the deepspeed profile's sources"),
)
_derive("fsdp2", "fsdp2-eager", eager_elem_bytes=(64.0, 20.0, 4.0), layer_saves="torchtitan",
    # torchao's float8 linear layers run eagerly (sources): a cast 33 bytes an element; input 33 forward and 33 + 2
    # backward, each norm output cast by each of wq, wk, wv (3) and w1, w3 (2); weight 33 forward, 33 + 2 backward;
    # output gradient 2 x 33 + 2
    fp8_cast_bytes=(33.0, 33.0, 2 * 33.0 + 2.0, 33.0 + 2.0), fp8_recast_input_bytes=33.0 + 2.0,
    fp8_norm_input_casts=(3.0, 2.0),
    what="torchtitan without torch.compile (FSDP2 as the fsdp2 profile): its model code's norms, RoPE and "
         "SwiGLU run as eager PyTorch ops, each reading and writing HBM, and so do torchao's float8 casts",
    sources=("torchtitan torchtitan/models/norms.py (commit 9dec370) RMSNorm.forward: x.float() (read 2, write 4 "
             "bytes an element), pow(2) (4, 4), mean (4), x * rsqrt (4, 4), type_as (4, 2), * weight (2, 2): 36 "
             "bytes where a fused norm moves 4, so 32 more for each of a block's two norms (64 per element of T h)",
             "torchtitan models/llama/model.py (9dec370) apply_rotary_emb: xq.float() (2, 4), the complex product "
             "(4, 4), type_as (4, 2): 20 bytes an element of Q and of K, otherwise not counted; FeedForward: "
             "F.silu(w1(x)) (2, 2) * w3(x) (2 + 2, 2): 10 bytes an element of the intermediate, fused count's 6 + 4",
             "torchtitan parallelize_llama.py (9dec370): torch.compile per block only with training.compile (false in "
             "train_configs/llama3_8b.toml)",
             "activations: what eager autograd saves of torchtitan's Llama block (costmodel._memory_terms."
             "torchtitan_saved_bytes); compiled (fsdp2), the partitioner chooses a subset (torch/_functorch/"
             "partitioners.py min-cut), not derived: fsdp2 keeps Korthikanti et al.'s count",
             "fp8 casts, torchao 0.18.0 eager, tensorwise: float8_scaling_utils.py hp_tensor_to_float8_dynamic -> "
             "float8_utils.py tensor_to_amax torch.max(torch.abs(x)) (read 2, write 2; read 2), float8_training_tensor"
             ".py _ToFloat8ConstrFunc x.to(float32) * scale (2, 4; 4, 4), to_fp8_saturated clamp (4, 4) and .to(fp8) "
             "(4, 1): 33 bytes an element of a 16-bit tensor; float8_linear.py matmul_with_hp_or_float8_args: the "
             "forward casts input and weight, the backward the output gradient twice (grad_input's and "
             "grad_weight's), the weight and the saved 16-bit input again; float8_ops.py preprocess_addmm copies "
             "the weight for the input gradient's GEMM and the output gradient and the input for the weight "
             "gradient's into the layouts torch._scaled_mm takes (fp8: read 1, write 1); torchtitan's Attention "
             "and FeedForward (wq, wk, wv; w1, w3 separate nn.Linear layers, each converted) cast the same norm "
             "output each. Measured against: tests/data/h200_modern_layers_measured.csv's fp8 rows",
             "the fsdp2 profile's sources"),
)
_derive("fsdp2", "llm-foundry", cp_sdpa_only=False, tp_needs_sp=False, xent_bytes=4 + 8 + 2, xent_peak_bytes=4.0,
    kv_repeat_bytes=0.0,
    blocking_p2p=False, lockstep_interleaved=False,  # no pipeline in its code: torch's schedules' waits not claimed
    ring_attention_bytes=(0.0,) * 4,
    sp_copy_bytes=0.0, fp8_tp_gather=False, pp_grad_sync_after_backward=False,  # no torchao float8 TP, no pipelining
    pp_grad_accum_bytes=0.0, pre_reduce_copy_bytes=2.0 + 2.0,  # FSDP1's flat gradient: read 2, write 2 (sources)
    ag_copy_out_bytes=0.0, rs_copy_in_bytes=(0.0, 0.0),  # FSDP1 all-gathers into the flat parameter: no copy-out
    # eager: 20 bytes an element of q + hk, a third forward; FSDP1 keeps only its root gathered for backward
    eager_elem_bytes=(0.0, 20 / 3, 0.0), fsdp_unit_edges=True, zero3_kept=(0.0, 1.0, 0.0),
    what="LLM Foundry (Composer FSDP, MPT, attn_impl flash): as fsdp2 but its fused loss and its unpadding copies",
    sources=("composer 28cc4caf6 / eb4fbd081 get_mixed_precision: DEFAULT (the tables' mode) reduces in fp32",
             "llm-foundry 8c8dd48 llmfoundry/models/mpt/modeling_mpt.py ComposerMPTCausalLM: loss_fn defaults to "
             "'fused_crossentropy' (flash_attn.losses.cross_entropy; yamls/pretrain/mpt-*.yaml do not set it); that "
             "kernel is not counted here: the fused count kept (xent_bytes, xent_peak_bytes)",
             "llmfoundry/models/layers/attention.py (8c8dd48): "
             "should_repeat_kv_for_gqa = not is_flash_v2_installed() (FlashAttention-2 reads GQA's shared K and V)",
             "llm-foundry attention.py flash_attn_fn (b2a43a147, 5e85bd62d: the tables' code) unpads Q, K, V (bert_"
             "padding index_first_axis: torch.gather, 2 + 2 bytes an element), pads the output (zeros, index_put: 2 + "
             "2 + 2); backward the pad's gather (2 + 2), for Q, K, V zeros and scatter_ (2 + 2 + 2): 20 bytes an "
             "element of q and of hk (K and V as one: 2 x 10), 20 / 3 a forward (eager_elem_bytes: twice backward)",
             "torch FSDP1 _runtime_utils.py: _pre_forward_unshard waits for its unit's all-gather, then prefetches the "
             "next unit's; _post_forward_reshard keeps the root and SHARD_GRAD_OP units gathered; _post_backward_hook "
             "reduce-scatters on the post_backward stream, frees the unit where _sync_gradients (pytorch 3ade90a: "
             "every FULL_SHARD unit but the root resharded after forward, gathered again for backward); llm-foundry "
             "5e85bd62d sweep.py: forward_prefetch true, backward_prefetch BACKWARD_PRE, limit_all_gathers true, accum 1",
             "FSDP1's flat gradient (pre_reduce_copy_bytes 4): pytorch torch/distributed/fsdp/_flat_param.py (read "
             "at 01caf79) FlatParameter: the original parameters are views into the flat parameter made with "
             "torch.split() (_use_unsharded_views), so autograd's backward of the split (split_with_sizes_backward: "
             "at::cat) concatenates the views' gradients into one flat "
             "gradient, a new tensor of the unit's unsharded size (bf16 under Composer's DEFAULT and PURE param "
             "dtype: read 2, write 2 bytes an element), on the computation stream in the backward, every micro-batch "
             "(no no_sync); _runtime_utils.py _post_backward_hook then reduce-scatters it on the post-backward stream "
             "(its fp32 cast under DEFAULT and its pre-divide run there, beside the next unit's backward: not priced)",
             "composer dist_strategy.py ddp_sync_context: returns at once unless the model is DistributedDataParallel, "
             "so FSDP (SHARD_GRAD_OP: ZeRO-2) reduce-scatters after every micro-batch's backward "
             "(zero2_scatter_every_microbatch, as fsdp2)",
             "attn_impl flash is FlashAttention-2 (attention_kernel flash2, inherited): llm-foundry 5e85bd62d (the "
             "H100 table's commit) submit_benchmarks.py installs '.[gpu-flash2]' (setup.py: flash-attn==2.4.2)",
             "full recompute priced as the whole forward: torch's non-reentrant checkpoint (MPTBlock, yamls' "
             "activation_checkpointing_reentrant false) stops early, before down_proj, where torch has "
             "set_checkpoint_early_stop (2.1 at 5e85bd62d's setup.py; torch 1.13 reran the whole block); not priced "
             "(benchmarks/llm_foundry_recompute.py, docs/validation.md)",
             "the fsdp2 profile's sources"),
)
_derive("llm-foundry", "llm-foundry-triton", attention_kernel="triton", eager_elem_bytes=(0.0,) * 3,
    what="LLM Foundry, attn_impl triton: as llm-foundry, Triton FlashAttention (A100: calibrated; else standard)",
    sources=("llm-foundry b2a43a147 scripts/train/benchmarking/submit_benchmarks.py: --attn_impl defaults to 'triton' "
             "(sweep.sh passes none: the A100 tables); 5e85bd62d sweep.py: --attn_impl triton for 13b and 30b",
             "attention.py triton_flash_attn_fn (b2a43a147): Q, K, V rearranged as views, no unpadding; llm-foundry "
             "v0.3.0 flash_attn_triton.py lines 129 and 302: causal, the key blocks above the diagonal skipped; no "
             "published rate (Dao 2023, arXiv:2307.08691 Fig. 4's 'Triton' is triton.ops' kernel)",
             "the llm-foundry profile's sources"),
)
_derive("llm-foundry-triton", "llm-foundry-triton-pure", grad_reduce_bytes=(2.0, 2.0, 2.0),
    what="LLM Foundry, attn_impl triton, FSDP mixed_precision PURE: as llm-foundry-triton, gradients reduced in bf16",
    sources=("composer 28cc4caf6 / eb4fbd081 get_mixed_precision: PURE reduces in the precision's dtype (bf16: 2); "
             "llm-foundry 8c8dd48 benchmarking/README.md: 'bf16 | PURE' rows", "llm-foundry-triton's sources"),
)
# InternEvo (InternLM's training code) as its published 7B scaling runs ran it: the Megatron-Core profile's layer and
# kernel fields (a stand-in: InternEvo's flash-attention layer is not priced on its own), its ZeRO-1 exchange from the
# code of the commit that published the table (fa7337b).
_derive("megatron-core", "internevo", max_zero=1, fp8=False, blocking_p2p=False,  # its pipeline code not read
        grad_reduce_bytes=(2.0, 2.0, 2.0),
    all_reduce_then_gather=(True, True, True), overlap_param_gather=False, weight_gather_in_step=True,
    weight_sync_broadcasts=True, dp_bucket_elems=(512 * 1024 * 1024, 0.0), dp_buckets_need_overlap=False,
    expert_parallel=False, expert_tensor_parallel=False, recompute_modules=False,
    te_fp8_gather="",  # not Transformer Engine's layers (its fp8 off besides: nothing priced either way)
    what="InternEvo (InternLM) hybrid ZeRO-1: gradients all-reduced in the training dtype by buckets behind the "
         "backward, the updated weights synced after the step by one broadcast from each shard's owner, waited; "
         "layers and kernels priced as megatron-core's",
    sources=("InternLM/InternEvo fa7337b (the commit that published doc/en/train_performance.md's table) "
             "internlm/solver/optimizer/hybrid_zero_optim.py: _attach_reduction_hook sets reduce_rank = None, so "
             "_reduce_and_copy's reduce_tensor (utils.py) all-reduces each bucket over the data-parallel group in the "
             "parameters' dtype (bf16: 2 bytes), on the last micro-batch only (no_pipeline_scheduler.py "
             "skip_grad_reduce); buckets of reduce_bucket_size = 512 x 1024 x 1024 elements (configs/7B_sft.py)",
             "the same file, step(): after the update, broadcast_params(overlap=False) ('TODO: support broadcast "
             "overlap'): for each rank of the ZeRO1 group one dist.broadcast of its flat fp16 shard, every handle "
             "waited before the step returns",
             "the same file: the ZeRO1 group is zero1 ranks of the data-parallel group (zero1 <= 0: all of them; a "
             "group smaller than dp, e.g. 8 within a node, is not a strategy here: ZeRO-1 shards over all dp ranks)",
             "InternEvo fa7337b internlm/model/multi_head_attention.py and linear.py: Wqkv, w1, w2 flash-attn's "
             "ColumnParallelLinear, out_proj, w3 its RowParallelLinear (flash-attn v1.0.5, its install guide's; "
             "flash_attn/ops/fused_dense.py FusedDenseFunc.backward: the dgrad's all_reduce_raw(async_op=True) beside "
             "the wgrad GEMM, waited after it; without sequence parallelism the row-parallel forward's all_reduce has "
             "an identity backward): tp_backward_async, its gated MLP's two column-parallel linears priced as one "
             "FC1 (two all-reduces of T h beside halves of its wgrad GEMM in its code)",
             "the megatron-core profile's sources (layers, kernels, schedules)"),
)
# Meta's Llama 3 training stack as the Llama 3 paper describes it in words (Dubey et al. 2024, arXiv:2407.21783,
# Sec. 3.3.2, text only): PyTorch's FSDP with pipelines, sharding the optimizer states and the gradients but keeping
# the weights gathered from forward to backward (ZeRO-2), the gradients accumulated and reduce-scattered in fp32 every
# micro-batch; interleaved 1F1B. Its layers and kernels are priced as fsdp2's (torch's), which the paper's stack is
# built on.
_derive("fsdp2", "llama3-fsdp", cp_sdpa_only=False, tp_needs_sp=False, max_zero_with_pp=2, shard_with_pp_once=False,
    zero2_scatter_every_microbatch=True,
    # its tensor parallelism and pipelines as the paper describes them, not torchao's or torch.distributed.pipelining
    # (its gradients reduce-scattered every micro-batch and accumulated sharded: no unsharded fp32 accumulation)
    eager_elem_bytes=(0.0,) * 3, sp_copy_bytes=0.0, fp8_tp_gather=False, pp_grad_sync_after_backward=False,
    pp_grad_accum_bytes=0.0, xent_peak_bytes=4.0,  # its loss code not published: the fused count
    blocking_p2p=False, lockstep_interleaved=False,  # its pipeline code not published: hand-offs left asynchronous
    ag_copy_out_bytes=0.0, rs_copy_in_bytes=(0.0, 0.0),  # nor FSDP2's copies: the paper
    # describes its FSDP in words, not which code runs it
    ring_attention_bytes=(0.0,) * 4, cp_all_gather=True,  # its context parallelism all-gathers K and V: no ring
    what="Meta's Llama 3 stack (PyTorch FSDP + pipelines, as the Llama 3 paper describes it): ZeRO-2 also with "
         "pipelines, the gradients reduce-scattered in fp32 after every micro-batch's backward and accumulated "
         "sharded, the weights kept gathered from forward to backward and all-gathered once after the step; "
         "context parallelism by all-gathered K and V, exposed; "
         "otherwise as fsdp2 (torch.distributed.pipelining schedules with interleaved 1F1B, SDPA flash attention)",
    sources=("Dubey et al. 2024, The Llama 3 Herd of Models (arXiv:2407.21783), Sec. 3.3.2, text: FSDP shards the "
             "model, optimizer and gradients; the weights are not resharded after forward (no second all-gather in "
             "backward: ZeRO-2, max_zero_with_pp 2); gradients accumulated over micro-batches and reduce-scattered "
             "across data-parallel ranks in fp32 (grad_reduce_bytes, grad_buffer_bytes 4); interleaved schedule; a "
             "layer taken off the first and the last pipeline stages (--stage-layers)",
             "FSDP without set_requires_gradient_sync(False) reduce-scatters each backward (the fsdp2 profile's "
             "sources): m reduce-scatters a step, the accumulated gradient held as a shard "
             "(zero2_scatter_every_microbatch)",
             "Dubey et al. 2024 Sec. 3.3.2, text, context parallelism: the sequence in 2 x cp chunks, two a rank; "
             "'an all-gather based method where we first all-gather the key (K) and value (V) tensors, and then "
             "compute attention output for the local query (Q) tensor chunk'; 'the all-gather communication latency "
             "is exposed in the critical path' (cp_all_gather). The backward is not described: priced as gathering K "
             "and V again (only the rank's own are kept, as the activation count has them) and reduce-scattering "
             "their gradients in 16 bits, both exposed",
             "the fsdp2 profile's sources"),
)
# Registered last, so that the codes of the profiles before it stay what they were.
_derive("fsdp2", "fsdp2-async-tp", sp_copy_bytes=0.0,
    what="torchtitan with async tensor parallelism (FSDP2 and torch.compile as the fsdp2 profile): Inductor's "
         "micro-pipelined TP replaces each sequence-parallel all-gather with the matmuls it feeds, and each "
         "reduce-scatter with the matmul feeding it, by fused ops that gather and scatter a shard at a time: no copy "
         "of the whole gathered activation around the collective (sp_copy_bytes 0); the collectives' overlap with "
         "the matmuls is not priced (exposed as layer_costs counts them)",
    sources=("torchtitan parallelize_llama.py (9dec370) apply_tp: enable_async_tp sets torch._inductor.config."
             "_micro_pipeline_tp and enables symmetric memory for the tp group (needs training.compile)",
             "pytorch torch/_inductor/fx_passes/micro_pipeline_tp.py: the all-gather (with its chunk / cat on the "
             "gather dim) matched and replaced by fused_all_gather_matmul, the matmul and the reduce-scatter (with "
             "its chunk / cat) by fused_matmul_reduce_scatter; torch/distributed/_symmetric_memory/__init__.py: the "
             "gather dim moved to the front as a view, the shard copied into the symmetric buffer (1 / tp of the "
             "gathered activation, not counted)",
             "the fsdp2 profile's sources"),
)
# Registered after fsdp2-async-tp, so that the codes of the profiles before it stay what they were.
_derive("fsdp2", "fsdp2-compiled-loss", xent_peak_bytes=2.0 + 2.0,
    what="torchtitan with torch.compile from 2025 on (as the fsdp2 profile), its loss compiled too: the logits "
         "and their 16-bit gradient at the loss's peak, no fp32 copy",
    sources=("torchtitan e7c0cae torchtitan/components/loss.py build_cross_entropy_loss: with training.compile the "
             "loss (cross_entropy(pred.flatten(0, 1).float(), ...)) is torch.compile'd; pytorch torch/_functorch/"
             "partitioners.py min_cut_rematerialization_partition: the cast, subtract and exp are pointwise and "
             "recomputed in the backward, the row reductions (max, sum of exp) are saved, so the cut keeps the 16-bit "
             "input (2 bytes a logit, 'del pred' in train.py then frees nothing) rather than the fp32 log_softmax; "
             "the backward is one fused kernel writing the 16-bit gradient (2): 4 (xent_peak_bytes; counted from "
             "the partitioner's rules, not measured); its HBM traffic (xent_bytes) not re-derived: fsdp2's kept",
             "the fsdp2 profile's sources"),
)
# Names users type for a profile (framework_preset reads them in any case, with spaces or underscores for hyphens).
# Megatron-LM's training loop has run on Megatron-Core since 2023 (and NeMo's and Megatron-Bridge's on the same
# library), so the bare names mean megatron-core; a run of the 2021-2022 code names megatron-2021.
FRAMEWORK_ALIASES = {
    "megatron-lm-2021": "megatron-2021", "mcore": "megatron-core", "megatron": "megatron-core", "megatron-deepspeed": "deepspeed",
    "megatron-lm": "megatron-core", "nemo": "megatron-core",
    "torchtitan": "fsdp2", "fsdp2-compile": "fsdp2", "torchtitan-eager": "fsdp2-eager", "fsdp": "fsdp2",
    "torchtitan-async-tp": "fsdp2-async-tp", "pytorch-fsdp": "fsdp2", "deepspeed-zero": "deepspeed",
}
# The profile of every command and of evaluate() where none is named: Megatron-Core, the code the large
# published runs train with (GPT-3 and Llama 3 scale on thousands of GPUs; docs/frameworks.md).
DEFAULT_FRAMEWORK = "megatron-core"


# The dtypes a run keeps its gradients and optimizer state in, bytes an element (with_state_dtypes). Megatron-LM
# d98e8a6 megatron/training/arguments.py: --grad-reduce-in-bf16 and the precision-aware optimizer's --main-grads-dtype
# {fp32, bf16}, --main-params-dtype {fp32, fp16}, --exp-avg-dtype / --exp-avg-sq-dtype {fp32, fp16, bf16, fp8}; NeMo
# 1.0's distributed Adam (NVIDIA/NeMo nemo/collections/nlp/models/language_modeling/megatron_base_model.py
# setup_optimization, Apex apex/contrib/optimizers/distributed_fused_adam.py): grad_sync_dtype, and an optimizer dtype
# that keeps no master copy when it equals the model's (store_params False: "none") or, fp32 under a bf16 model, only
# the 16 low bits of each fp32 master beside the bf16 weight (store_param_remainders: "remainder"); the DeepSeek-V3
# report (arXiv:2412.19437, Sec. 3.3.3): BF16 moments beside FP32 master weights and gradients.
GRAD_DTYPE_BYTES = {"fp32": 4.0, "bf16": 2.0}
MAIN_PARAMS_DTYPE_BYTES = {"fp32": 4.0, "fp16": 2.0, "bf16": 2.0, "remainder": 2.0, "none": 0.0}
MOMENTS_DTYPE_BYTES = {"fp32": 4.0, "bf16": 2.0, "fp16": 2.0, "fp8": 1.0}


def with_state_dtypes(fw: Framework, *, grad: str | None = None, main_params: str | None = None,
                      moments: str | None = None, arguments: tuple[str, str, str] = (
                          "--grad-dtype", "--main-params-dtype", "--moments-dtype")) -> Framework:
    """``fw`` with its gradients and optimizer state kept in the dtypes named (None: the profile's own). ``grad``
    (GRAD_DTYPE_BYTES): the gradient buffer, its data-parallel reduction and the optimizer's read of it, at every
    precision; ``main_params`` (MAIN_PARAMS_DTYPE_BYTES) and ``moments`` (MOMENTS_DTYPE_BYTES, each of Adam's two):
    optim_state_bytes = main params + 2 x a moment, the others fp32 where one is named. The profile keeps its name:
    the same framework run with other settings. ``arguments``: the names an InputError gives each of the three."""
    picks = []
    for value, table, arg in zip((grad, main_params, moments),
                                 (GRAD_DTYPE_BYTES, MAIN_PARAMS_DTYPE_BYTES, MOMENTS_DTYPE_BYTES), arguments, strict=True):
        if value is not None and str(value).lower() not in table:
            raise InputError(arg, "one of " + ", ".join(table), value)
        picks.append(None if value is None else table[str(value).lower()])
    g, main, mom = picks
    changes = {}
    if g is not None:
        changes.update(grad_reduce_bytes=(g,) * 3, grad_buffer_bytes=(g,) * 3, main_grad_bytes=g)
    if main is not None or mom is not None:
        changes["optim_state_bytes"] = (MAIN_PARAMS_DTYPE_BYTES["fp32"] if main is None else main) + 2.0 * (
            MOMENTS_DTYPE_BYTES["fp32"] if mom is None else mom)
    return dataclasses.replace(fw, **changes) if changes else fw


def with_tp_comm_overlap(fw: Framework, on: bool) -> Framework:
    """``fw`` with Transformer Engine's tensor-parallel communication overlap on or off (Framework.tp_comm_overlap):
    on keeps the profile's configuration where it has one, else Transformer Engine's defaults (Megatron-LM's
    --tp-comm-overlap without --tp-comm-overlap-cfg: costmodel._layer_compute.UB_CONFIGS "te-default"). The profile
    keeps its name."""
    if not on:
        return dataclasses.replace(fw, tp_comm_overlap=("", "", ""))
    return fw if all(fw.tp_comm_overlap) else dataclasses.replace(fw, tp_comm_overlap=("te-default",) * 3)


def state_optim_bytes(state_dtypes: dict) -> float:
    """The optimizer's bytes a parameter under ``state_dtypes`` (with_state_dtypes' keywords; every profile keeps
    an fp32 master and fp32 moments by default, so the dtypes alone fix it)."""
    return with_state_dtypes(FRAMEWORKS[DEFAULT_FRAMEWORK], **state_dtypes).optim_state_bytes


def framework_names() -> list[str]:
    return list(FRAMEWORKS)


def framework_preset(name: str | Framework | None, argument: str = "--framework") -> Framework:
    """The profile named ``name`` (or an alias: FRAMEWORK_ALIASES); None is the default."""
    if isinstance(name, Framework):
        return name
    if name is None or name == "":
        return FRAMEWORKS[DEFAULT_FRAMEWORK]
    key = "-".join(name_words(name))
    key = FRAMEWORK_ALIASES.get(key, key)
    if key not in FRAMEWORKS:
        raise InputError(argument, "one of " + ", ".join([*FRAMEWORKS, *FRAMEWORK_ALIASES]), name)
    return FRAMEWORKS[key]
