"""LLM Foundry's rows split by activation checkpointing, and what PyTorch's checkpoint early stop would move.

    PYTHONPATH=. python3 benchmarks/llm_foundry_recompute.py

Analysis only: nothing here changes the shipped model. It prices the LLM Foundry rows of the validation set
(tests/data/validation/published_runs.csv, source mosaicml/) and of the A100 calibration set
(tests/data/validation/llm_foundry_calibration.csv) as `plansweep validate` does (costmodel._validate.predict), and
prints the mean error per README table and activation checkpointing, twice:

- shipped:    full recompute priced as the whole forward again (costmodel._layer_terms.layer_terms).
- early-stop: the recompute less the MLP's last GEMM (fc2, "down_proj"). LLM Foundry wraps every MPTBlock in
              torch's checkpoint_wrapper, non-reentrant (llm-foundry b2a43a147 modeling_mpt.py
              activation_checkpointing_fn: isinstance(module, MPTBlock); yamls/pretrain/mpt-*.yaml
              activation_checkpointing_reentrant: false). torch.utils.checkpoint's non-reentrant variant "stops
              recomputation as soon as all needed intermediate activations have been recomputed" (its docstring;
              set_checkpoint_early_stop, on by default). The block's last saved tensors are down_proj's input and
              weight, packed before its product runs (autograd saves a function's inputs before calling it); the
              residual add after it saves nothing and MPT's resid_pdrop is 0 (dropout at p 0 returns its input), so
              the recompute stops before down_proj. For MPT's shapes (heads x head dim = hidden, GELU, ffn 4 x hidden)
              that product is 4h^2 of the layer's 12h^2 weight FLOPs a token: a third of the layer's GEMM time (the
              tile factors of up_proj and down_proj are the same on these shapes, so the FLOP share is the time share).

Which runs had early stop depends on their torch: the A100 40GB table dates from 300cc5c58 (2023-05, setup.py
torch==1.13.1, whose non-reentrant checkpoint reran the whole function), the A100 80GB table from b2a43a147 (2023-10,
torch >= 1.13.1, < 2.1.1) and the H100 table from 5e85bd62d (2024-01, torch >= 2.1, < 2.1.1). Whether torch 2.0
(allowed by the A100 80GB table's pin) had early stop is not checked here. The script prints every
table under both, and says so; it does not choose.
"""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np

import costmodel._block as blk
import costmodel._stages as st
from costmodel._validate import predict, read_runs

DATA = Path(__file__).resolve().parents[1] / "tests" / "data" / "validation"
SETS = {"validation": DATA / "published_runs.csv", "calibration": DATA / "llm_foundry_calibration.csv"}
DOWN_SHARE = 1.0 / 3.0  # fc2's FLOPs over the layer's GEMM FLOPs: 4h^2 / (3h^2 + h^2 + 4h^2 + 4h^2) (MPT shapes)


def _early_stop(layer_terms):
    """layer_terms with a full recompute less DOWN_SHARE of the layer's GEMM time (the columns it reports and B)."""
    def wrapped(lc, full, sel):
        out = layer_terms(lc, full, sel)
        cut = np.where(full, DOWN_SHARE * lc["gemm"], 0.0)
        return {**out, "B": out["B"] - cut, "recompute": out["recompute"] - cut}
    return wrapped


def _mpt_rows(path: Path) -> tuple[list, dict]:
    meta = {r["name"]: r for r in csv.DictReader(path.open()) if r["source"].startswith("mosaicml")}
    for r in meta.values():  # the shapes DOWN_SHARE assumes
        h, f = int(r["hidden"]), int(r["ffn_hidden"])
        assert f == 4 * h and r["activation"] == "gelu" and r["kv_heads"] == r["heads"], r["name"]
    return [run for run in read_runs(path) if run.name in meta], meta


def _table(meta_row: dict) -> str:
    page = meta_row["page"]
    return page[page.index("'") + 1:page.index("'", page.index("'") + 1)]


def errors() -> dict:
    """{(set, table, recompute): {what-if: [error %]}} for every LLM Foundry row of both sets."""
    out: dict = {}
    shipped = blk.layer_terms
    for what, fn in (("shipped", shipped), ("early-stop", _early_stop(shipped))):
        blk.layer_terms = fn
        st._pool_arrays.cache_clear()
        try:
            for name, path in SETS.items():
                runs, meta = _mpt_rows(path)
                for run in runs:
                    m = meta[run.name]
                    key = (name, _table(m), m["recompute"])
                    out.setdefault(key, {}).setdefault(what, []).append(predict(run)["error_pct"])
        finally:
            blk.layer_terms = shipped
            st._pool_arrays.cache_clear()
    return out


def main() -> None:
    res = errors()
    print("| set | README table | recompute | rows | mean error, shipped | early stop |")
    print("| --- | --- | --- | ---: | ---: | ---: |")
    for (name, table, rc), e in sorted(res.items()):
        a, b = np.array(e["shipped"]), np.array(e["early-stop"])
        print(f"| {name} | {table} | {rc} | {len(a)} | {a.mean():+.1f}% (|{np.abs(a).mean():.1f}%|) | "
              f"{b.mean():+.1f}% (|{np.abs(b).mean():.1f}%|) |")
    for what in ("shipped", "early-stop"):
        v = np.concatenate([np.array(e[what]) for (name, _, _), e in res.items() if name == "validation"])
        print(f"validation rows, {what}: {len(v)} rows, mean |error| {np.abs(v).mean():.2f}%, mean {v.mean():+.2f}%")


if __name__ == "__main__":
    main()
