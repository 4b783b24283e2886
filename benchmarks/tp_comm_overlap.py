"""Transformer Engine's tensor-parallel communication overlap (userbuffers) on the validation rows that ran it.

Each dense Megatron-family row with tp > 1 whose source shows the overlap on, priced without it (as the profiles
price it) and with it (costmodel._layer_compute.ub_layer_tp_s): Megatron-Bridge's Llama recipes
(CommOverlapConfig(tp_comm_overlap=True) with their userbuffers configuration, "bridge-bf16" / "bridge-fp8") and the
Megatron-LM README's table (--tp-comm-overlap among its benchmark's flags, Transformer Engine's defaults). The error
is the prediction's against the published figure, as `plansweep validate` reports it.

    PYTHONPATH=. python3 benchmarks/tp_comm_overlap.py
"""

from __future__ import annotations

import dataclasses

from costmodel._frameworks import with_tp_comm_overlap
from costmodel._validate import predict, read_runs

# rows whose source shows the overlap on (name prefixes): the profile's configuration, else Transformer Engine's defaults
RAN = ("bridge-", "mcore-gpt-")
# Megatron-Bridge's userbuffers configurations by precision (costmodel._layer_compute.UB_CONFIGS)
BRIDGE = ("bridge-bf16", "bridge-bf16", "bridge-fp8")


def main() -> None:
    runs = read_runs("tests/data/validation/published_runs.csv")
    print(f"{'row':44s} {'without':>8s} {'with':>8s}")
    for run in runs:
        if run.fixed["tp"] <= 1 or run.model.is_moe or not any(run.name.startswith(p) for p in RAN):
            continue
        base = predict(run)
        fw = (dataclasses.replace(run.profile(), tp_comm_overlap=BRIDGE) if run.name.startswith("bridge-")
              else with_tp_comm_overlap(run.profile(), True))
        on = _predict_with(run, fw)
        print(f"{run.name:44s} {base['error_pct']:+7.1f}% {on['error_pct']:+7.1f}%")


def _predict_with(run, fw):
    """predict() of ``run`` under the profile ``fw`` (its name kept)."""
    class _Run(type(run)):
        def profile(self):
            return fw
    return predict(_Run(**{f.name: getattr(run, f.name) for f in dataclasses.fields(run)}))


if __name__ == "__main__":
    main()
