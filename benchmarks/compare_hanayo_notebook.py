"""plansweep's Hanayo against seed 003's simulator, case by case: op orders and total times.

The seed notebook's simulator lives in C-TC/Megatron-LM (branch crossdc,
megatron/core/pipeline_parallel/cdc_scheduler/pp_generator/); it is not part of this
repository. Point --pp-generator at that folder of a checkout:

    PYTHONPATH=. python benchmarks/compare_hanayo_notebook.py --pp-generator PATH/pp_generator

Cases: D in 2, 3, 4, 6, 8, 16, 32; m = D, 2D, 3D; chunks 2, 4, 6; per-device T_F, T_B drawn
at random (seed 0), T_C 0 and 0.05. The notebook takes chunk times, plansweep stage times (a
chunk runs its stage's time / v), so plansweep gets T x v.
"""

from __future__ import annotations

import argparse
import pathlib
import sys
import types

import numpy as np

from costmodel._pipeline import _hanayo, simulate


def notebook(pp_generator: pathlib.Path):
    sys.path.insert(0, str(pp_generator.parent))
    sys.modules.setdefault("drawsvg", types.ModuleType("drawsvg"))  # used only by its SVG drawing
    from pp_generator import pipeline  # noqa: PLC0415
    from pp_generator.pipeline_config import SystemConfig  # noqa: PLC0415

    def run(D, m, v, tf, tb, tc):
        T_C = np.full((D, D), tc)
        np.fill_diagonal(T_C, 0.0)
        cfg = SystemConfig(T_F=list(tf), T_B=list(tb), T_W=[0] * D, T_C=T_C, num_devices=D,
                           num_microbatches=m, num_chunks=v)
        pl = pipeline.Hanayo1F1BPipeline(cfg)
        pl.schedule()
        pl.solve_dependencies()
        total = max(t.completion_time for dev in pl.device_scheduled_tasks for t in dev)
        orders = [[("FB".index(t.task_type), t.microbatch_id, t.chunk_id) for t in dev]
                  for dev in pl.device_scheduled_tasks]
        return total, orders

    return run


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pp-generator", type=pathlib.Path, required=True)
    args = ap.parse_args()
    run = notebook(args.pp_generator)
    rng = np.random.default_rng(0)
    cases = same_order = same_time = 0
    worst = 0.0
    for D in (2, 3, 4, 6, 8, 16, 32):
        for k in (1, 2, 3):
            for v in (2, 4, 6):
                if D * k * v > 384:
                    continue
                for tc in (0.0, 0.05):
                    m = k * D
                    tf, tb = rng.uniform(0.5, 1.5, D), rng.uniform(1.0, 3.0, D)
                    total, orders = run(D, m, v, tf, tb, tc)
                    ours = float(simulate("hanayo", D, m, v, tf=tf * v, tb=tb * v, tc=tc).total_time[0])
                    rel = abs(ours / total - 1.0)
                    worst = max(worst, rel)
                    cases += 1
                    same_order += orders == _hanayo(D, m, v)
                    same_time += rel <= 1e-12
    print(f"{cases} cases: same op order in {same_order}, same total (1e-12) in {same_time}, "
          f"largest relative difference {worst:.2e}")


if __name__ == "__main__":
    main()
