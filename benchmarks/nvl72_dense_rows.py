"""Megatron-Bridge's dense Llama runs on GB200 and GB300 NVL72, priced as `plansweep validate` prices its rows.

    PYTHONPATH=. python3 benchmarks/nvl72_dense_rows.py

Not in the validation set (tests/data/validation/published_runs.csv): a check of the rack-scale parts' presets on the
published runs whose recipes add nothing the set's Megatron-Bridge Llama rows do not have. The set holds the 26.06
container's figure of the Llama 3.1 405B FP8 layout on 256 GB200 (bridge-26.06-llama3.1-405b-gb200-256gpu); the
26.02.01 figure of that layout below is a second container's. The figures are the
'26.02.01 NeMo Container' tables of NVIDIA-NeMo/Megatron-Bridge docs/performance-summary-archive.md (repo commit
067f987d; the layouts as the table lists them), each row built from the set's Megatron-Bridge Llama row of the same
model (its shape, the megatron-bridge profile, no recompute as the Llama recipes set none, sequence parallelism where
tp > 1, the distributed optimizer) with the GPU, layout and measured tokens/s replaced. NVLink domains of 64 GPUs: the
Slurm segment Megatron-Bridge's launcher asks for (16 trays of 4 at 64 and 256 GPUs; costmodel._hardware.rack_domain).
Left out: the FP8 rows of Llama 3 70B (Megatron FSDP with activations offloaded to the CPU, cpu_offloading_num_layers
20 and 40 in the v0.3.0 recipes: not priced) and GB300's MXFP8 Llama 3 70B row (micro-batch 2, PP 4 and no
interleaving in the table where the v0.3.0 recipe has micro-batch 1 and VP 5; as the table lists it, it does not fit
without recompute or offloading, which neither says).
"""

from __future__ import annotations

import csv
import statistics
import tempfile
from pathlib import Path

from costmodel._hardware import rack_domain
from costmodel._validate import predict, read_runs

CSV = Path(__file__).resolve().parents[1] / "tests/data/validation/published_runs.csv"
LLAMA70, LLAMA405 = "bridge-26.04-llama3-70b-64gpu", "bridge-25.11-llama3.1-405b-b200-128gpu"
# (base row, name, gpu, GPUs, precision as the table names it, tp, pp, cp, vp, micro-batch, global batch, tokens/s/GPU)
ROWS = (
    (LLAMA70, "gb200-llama3-70b-mxfp8", "gb200", 64, "MXFP8", 2, 4, 1, 5, 1, 256, 3837),
    (LLAMA405, "gb200-llama3.1-405b-mxfp8", "gb200", 256, "MXFP8", 4, 16, 1, 8, 1, 1536, 775),
    (LLAMA405, "gb200-llama3.1-405b-fp8", "gb200", 256, "FP8", 4, 16, 1, 4, 1, 1536, 818),
    (LLAMA405, "gb300-llama3.1-405b-mxfp8", "gb300", 256, "MXFP8", 2, 8, 2, 4, 1, 1536, 949),
    (LLAMA405, "gb300-llama3.1-405b-fp8", "gb300", 256, "FP8", 2, 8, 2, 4, 1, 1536, 1024),
)


def rows() -> list[dict]:
    with open(CSV, newline="") as fh:
        base = {r["name"]: r for r in csv.DictReader(fh)}
    out = []
    for src, name, gpu, n, prec, tp, pp, cp, vp, mb, gbs, tokens in ROWS:
        r = dict(base[src])
        r.update(name=name, gpu=gpu, num_gpus=str(n), gpus_per_node=str(rack_domain(n)), tp=str(tp), pp=str(pp),
                 cp=str(cp), vpp=str(vp), dp=str(n // (tp * pp * cp)), micro_batch=str(mb), global_batch=str(gbs),
                 sequence_parallel="true" if tp > 1 else "false", precision="fp8", stage_layers="",
                 measured_tokens_per_s_per_gpu=str(tokens), measured_tflops_per_gpu="", measured_iteration_time_s="",
                 page=f"26.02.01 NeMo Container, DGX-{gpu.upper()} row ({prec})")
        out.append(r)
    return out


def main() -> None:
    table = rows()
    with tempfile.NamedTemporaryFile("w", suffix=".csv", newline="", delete=False) as fh:
        w = csv.DictWriter(fh, fieldnames=list(table[0]))
        w.writeheader()
        w.writerows(table)
    by_gpu: dict[str, list[float]] = {}
    print(f"{'run':32s} {'layout':22s} {'tokens/s/GPU':>12s} {'predicted':>10s} {'step error':>10s}")
    for run, src in zip(read_runs(fh.name), table, strict=True):
        r = predict(run)
        layout = f"tp {src['tp']} pp {src['pp']} cp {src['cp']} vp {src['vpp']}"
        print(f"{run.name:32s} {layout:22s} {run.measured:12,.0f} {r['predicted_value']:10,.0f} "
              f"{r['error_pct']:+9.1f}%" + ("" if r["memory_fits"] else "  (out of memory)"))
        by_gpu.setdefault(src["gpu"], []).append(r["error_pct"])
    Path(fh.name).unlink()
    for gpu, errs in by_gpu.items():
        print(f"{gpu}: step time {min(errs):+.1f}% to {max(errs):+.1f}% (mean |error| "
              f"{statistics.mean(abs(e) for e in errs):.1f}%; + is the model slow)")


if __name__ == "__main__":
    main()
