"""What the EP all-to-all overlap gains: the model's gain against the published pairs that measure it.

    PYTHONPATH=. python3 benchmarks/ep_overlap_gain.py

Every run of tests/data/validation/published_runs.csv priced under a profile with the EP A2A overlap
(Framework.overlap_ep: Megatron-Core's --overlap-moe-expert-parallel-comm, DeepSeek's DualPipe) is priced again
under the same profile without it (megatron-core-a2a-overlap -> megatron-core, megatron-core-deepep-a2a-overlap and
hai-llm -> megatron-core-deepep), everything else as `plansweep validate` prices it. Printed per run: the published
step, the predicted step with and without the overlap, the model's gain (without / with - 1), the exposed expert
all-to-all of each (ep_comm_s), and the row's error.

Two pairs in the set measure the gain on the same code, model, GPUs and layout: the Megatron-MoE-ModelZoo's
Qwen3-235B on 256 H100 at TP 2 x EP 32 x PP 8, DeepEP, without and with "+1f1b overlap" (19.7 s and 17.6 s), and
Megatron-Bridge's matched A/B of Qwen3-30B-A3B on 16 H100 at TP 1 x EP 16, HybridEP (24.71 s and 20.99 s). For each
the script also prints the measured gain and the share of the model's exposed all-to-all (without the overlap) that
the measured gain hides, if the model's no-overlap step and its all-to-all were right. For reading only: no constant
is chosen from it.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from costmodel._validate import read_runs

CSV = Path(__file__).resolve().parents[1] / "tests/data/validation/published_runs.csv"
WITHOUT = {"megatron-core-a2a-overlap": "megatron-core", "megatron-core-deepep-a2a-overlap": "megatron-core-deepep",
           "hai-llm": "megatron-core-deepep"}
PAIRS = (("zoo-qwen3-235b-h100-256gpu-deepep-ep32", "zoo-qwen3-235b-h100-256gpu-deepep-ep32-1f1b-overlap"),
         ("bridge-ab-qwen3-30b-a3b-h100-16gpu-hybridep", "bridge-ab-qwen3-30b-a3b-h100-16gpu-hybridep-ep-overlap"))


def priced(run) -> tuple[dict, float]:
    """`plansweep validate`'s result for the run and the predicted exposed expert all-to-all of the setting it chose
    (benchmarks/validation_breakdown.py parts)."""
    from validation_breakdown import parts  # the benchmarks folder is on the path when run as a script

    res, p = parts(run)
    return res, p["ep_comm_s"]


def main() -> None:
    runs = {r.name: r for r in read_runs(CSV)}
    print(f"{'run':56s} {'meas s':>8s} {'pred s':>8s} {'w/o s':>8s} {'gain':>7s} {'ep exp':>7s} {'w/o ep':>7s} "
          f"{'err%':>7s}")
    for name, run in runs.items():
        if run.framework not in WITHOUT:
            continue
        bare = dataclasses.replace(run, framework=WITHOUT[run.framework])
        (res, ep), (res_bare, ep_bare) = priced(run), priced(bare)
        t, t0 = res["predicted_iteration_time_s"], res_bare["predicted_iteration_time_s"]
        print(f"{name:56s} {res['measured_iteration_time_s']:8.3f} {t:8.3f} {t0:8.3f} {t0 / t - 1:+7.1%} "
              f"{ep:7.3f} {ep_bare:7.3f} {res['error_pct']:+7.1f}")
    for pair in PAIRS:
        no, ov = (runs[n] for n in pair)
        (r_no, ep_no), (r_ov, _) = priced(no), priced(ov)
        m_no, m_ov = r_no["measured_iteration_time_s"], r_ov["measured_iteration_time_s"]
        p_no, p_ov = r_no["predicted_iteration_time_s"], r_ov["predicted_iteration_time_s"]
        print(f"\n{ov.name}: measured {m_no:.2f} s -> {m_ov:.2f} s, gain {m_no / m_ov - 1:+.1%} "
              f"({m_no - m_ov:.2f} s); the model {p_no:.2f} s -> {p_ov:.2f} s, gain {p_no / p_ov - 1:+.1%} "
              f"({p_no - p_ov:.2f} s)")
        print(f"  the model's exposed all-to-all without the overlap {ep_no:.2f} s: the model hides "
              f"{(p_no - p_ov) / ep_no:.0%} of it, the measured gain {(m_no - m_ov) / ep_no:.0%}")


if __name__ == "__main__":
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    main()
