"""The loss's memory peak (Framework.xent_peak_bytes) against a hand count of the framework's loss code."""

import dataclasses

import numpy as np

from costmodel import evaluate
from costmodel._memory import memory_screen
from costmodel._validate import _candidates, read_runs

ROW = "tt-llama3.1-8b-8gpu-fsdp2-bf16"  # torchtitan 9dec370, seq 8192, vocab 128,256, tp 1, pp 1


def _run():
    return next(r for r in read_runs("tests/data/validation/published_runs.csv") if r.name == ROW)


def test_torchtitan_eager_loss_peak_counted_by_hand():
    """torchtitan 9dec370 train.py loss_fn, cross_entropy(pred.flatten(0, 1).float(), labels), uncompiled; after
    'del pred' the backward of cross_entropy holds, per logit: log_softmax's saved fp32 output (4 bytes),
    nll_loss's dense fp32 gradient (4) and _log_softmax_backward_data's fp32 result (4): 12 bytes, the peak (the
    forward's is 2 + 4 + 4 = 10). The stage's activations are all held then (the loss ends the forward), so the
    memory of the one stage (pp 1) is the same as with no loss but 12 T V bytes, T = micro-batch x 8192 tokens."""
    run = _run()
    table = _candidates(run)
    fw = run.profile()
    no_loss = dataclasses.replace(fw, xent_peak_bytes=0.0)
    with_loss = evaluate(run.model, run.cluster, table, framework=fw)
    without = evaluate(run.model, run.cluster, table, framework=no_loss)
    T = table["micro_batch"] * 8192.0  # tokens a micro-batch (cp 1)
    expected = (4 + 4 + 4) * T * 128256  # 12 bytes a logit; at micro-batch 2: 25.2 GB
    got = with_loss.mem_total_bytes - without.mem_total_bytes
    np.testing.assert_allclose(got, expected, rtol=1e-9)
    # the memory-only screening prices it the same
    screened = memory_screen(run.model, run.cluster, table, fw)[0] - memory_screen(run.model, run.cluster, table,
                                                                                  no_loss)[0]
    np.testing.assert_allclose(screened, expected, rtol=1e-9)


def test_reserved_peak_bounds_the_prediction():
    """torchtitan logs the caching allocator's reserved peak (DeviceMemoryMonitor: reserved_bytes.all.peak), which
    holds at least the live tensors: the row, with its loss's peak, is predicted at or under its 82.4 GiB."""
    run = _run()
    from costmodel._validate import predict

    res = predict(run)
    assert run.memory_measure == "reserved"
    assert res["predicted_memory_gb"] <= 82.4 * 2**30 / 1e9
