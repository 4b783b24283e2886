"""HeteroTable: N strategies whose pipeline stages each have a pool, degrees and layers.

Global columns (N,): pp, microbatches (m, the same for every stage), global_batch (B), cp,
vpp, schedule, recompute, sequence_parallel, zero_stage, precision, overlap_dp, and for a
mixture-of-experts model ep and etp (default 1, as in StrategyTable): the MoE layers of every
stage fold its tp x cp x dp ranks into etp x ep x edp (Megatron-Core's parallel folding, per
stage: ep x etp must divide each stage's tp cp dp; costmodel._evaluate, "Expert parallelism").
Per-stage columns (N, S), S >= max pp, padded past pp (pool 0, dp 1, tp 1, layers 0):
    pool      index into HeteroCluster.pools
    dp, tp    the stage's own data- and tensor-parallel degrees
    layers    transformer layers on the stage (sum = the model's layers)
    order     rank order inside the stage's GPUs: 0 = Megatron's (tp innermost, then cp,
              then dp: tp inside a node); 1 = dp innermost, then tp, then cp (tp strided
              across nodes: a tp group of size <= nodes has one rank per node)
    recompute (optional) recompute code per stage, overriding the global one
    pool2, dp2  a stage split across two pools (HetPipe's virtual workers, a data-parallel
              group spanning pools): dp2 of the stage's dp replicas run on pool2, the other
              dp - dp2 on ``pool`` (0 <= dp2 < dp; dp2 = 0, or pool2 = pool, is no split).
              Every replica holds the same micro-batch share b_i, so synchronous data
              parallelism waits for the slower pool's replica, and the stage's gradient
              all-reduce crosses the inter-pool link (costmodel._evaluate).

How micro-batches flow when dp differs between stages (HetPipe / Metis style): every stage
runs the same m micro-batches per iteration, and every stage sees the whole global batch,
so micro-batch j is B/m sequences everywhere, split over the stage's dp replicas: stage i's
replicas each hold b_i = B / (dp_i * m) sequences (B must be a multiple of dp_i * m). At a
boundary the activations of micro-batch j are re-sharded from dp_i x tp_i senders to
dp_{i+1} x tp_{i+1} receivers: each sender sends its 1/(dp_i tp_i) share and each receiver
takes its 1/(dp_{i+1} tp_{i+1}) share, so the hand-off costs the larger share over the link
between the two stages (costmodel._evaluate). With equal degrees this is Megatron's
scatter/gather hand-off of T h / t bytes per GPU.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

import numpy as np

from costmodel._errors import InputError
from costmodel._strategy import CODE_COLUMNS, RECOMPUTE, StrategyTable, decode, encode, typed_columns

GLOBAL_INT = ("pp", "microbatches", "global_batch", "cp", "vpp", "zero_stage", "ep", "etp")
GLOBAL_CODE = ("schedule", "recompute", "precision")
GLOBAL_BOOL = ("sequence_parallel", "overlap_dp")
GLOBAL_COLUMNS = GLOBAL_INT + GLOBAL_CODE + GLOBAL_BOOL
STAGE_COLUMNS = ("pool", "dp", "tp", "layers", "order", "pool2", "dp2")
ORDERS = ("tp-inner", "tp-across")

GLOBAL_DEFAULTS: dict[str, object] = {
    "cp": 1, "vpp": 1, "zero_stage": 0, "schedule": "1f1b", "recompute": "none", "precision": "bf16",
    "sequence_parallel": False, "overlap_dp": True, "microbatches": 1, "ep": 1, "etp": 1,
}
_STAGE_PAD = {"pool": 0, "dp": 1, "tp": 1, "layers": 0, "order": 0, "pool2": 0, "dp2": 0}


@dataclasses.dataclass(frozen=True)
class HeteroTable:
    """N heterogeneous strategies. Build with :meth:`from_columns`; do not mutate arrays."""

    columns: Mapping[str, np.ndarray]  # global, (N,)
    stages: Mapping[str, np.ndarray]  # per stage, (N, S)
    stage_recompute: np.ndarray | None = None  # (N, S) codes or None

    @classmethod
    def from_columns(cls, *, pool, dp, tp, layers, order=None, pool2=None, dp2=None, stage_recompute=None,
                     **cols) -> HeteroTable:
        unknown = set(cols) - set(GLOBAL_COLUMNS)
        if unknown:
            raise InputError("strategy", "global keys among " + ", ".join(GLOBAL_COLUMNS), sorted(unknown)[0])
        st = {"pool": pool, "dp": dp, "tp": tp, "layers": layers}
        st.update({k: v for k, v in (("order", order), ("pool2", pool2), ("dp2", dp2)) if v is not None})
        arrs = {}
        for k, v in st.items():
            a = np.asarray(v)[None, :] if np.ndim(v) == 1 else np.asarray(v)
            if a.ndim != 2:
                raise InputError(k, "one value per stage, (N, S)", np.shape(v))
            if a.dtype.kind not in "iu" and not (a.dtype.kind == "f" and np.all(a == np.round(a))):
                raise InputError(k, "integers per stage", a.ravel()[:4].tolist())
            arrs[k] = a.astype(np.int64)
        shapes = {a.shape for a in arrs.values()}
        n_rows = {s[0] for s in shapes} - {1}
        widths = {s[1] for s in shapes}
        if len(n_rows) > 1 or len(widths) > 1:
            raise InputError("strategy", "per-stage columns of one shape (N, S)", sorted(shapes))
        lengths = {np.size(v) for v in cols.values() if np.ndim(v) > 0} | n_rows
        if len(lengths) > 1:
            raise InputError("strategy", "columns of one length", sorted(lengths))
        n = lengths.pop() if lengths else 1
        S = widths.pop()
        stages = {k: np.ascontiguousarray(np.broadcast_to(a, (n, S))) for k, a in arrs.items()}
        for k in ("order", "pool2", "dp2"):
            stages.setdefault(k, np.zeros((n, S), dtype=np.int64))
        merged = {**GLOBAL_DEFAULTS, **cols}
        if "pp" not in merged:
            merged["pp"] = (stages["layers"] > 0).sum(axis=1)
        if "global_batch" not in merged:
            raise InputError("global_batch", "the global batch in sequences", None)
        out = typed_columns(merged, n, ints=GLOBAL_INT, codes=GLOBAL_CODE, bools=GLOBAL_BOOL)
        if n and out["pp"].max() > S:
            raise InputError("pp", f"at most the {S} stage columns given", int(out["pp"].max()))
        d2 = stages["dp2"]
        for k, bad, what in (*((k, stages[k] < 1, "degrees >= 1 on every stage") for k in ("dp", "tp")),
                             ("layers", stages["layers"] < 0, "layer counts >= 0"),
                             *((k, stages[k] < 0, "pool indices >= 0") for k in ("pool", "pool2")),
                             ("dp2", (d2 < 0) | ((d2 >= stages["dp"]) & (d2 > 0)),
                              "0 <= dp2 < the stage's dp (replicas on the second pool)"),
                             ("order", (stages["order"] < 0) | (stages["order"] >= len(ORDERS)),
                              "0 (tp-inner) or 1 (tp-across)")):
            if np.any(bad):
                raise InputError(k, what, int(stages[k][bad][0]))
        sr = None
        if stage_recompute is not None:
            sr = encode("recompute", stage_recompute)
            sr = np.ascontiguousarray(np.broadcast_to(sr if sr.ndim == 2 else sr[None, :], (n, S)))
        return cls(columns=out, stages=stages, stage_recompute=sr)

    @classmethod
    def from_homogeneous(cls, table: StrategyTable, layers: int) -> HeteroTable:
        """The same strategies with every stage on pool 0 (m = B / (dp b), rounded down)."""
        c = table.columns
        p = c["pp"]
        S = int(p.max())
        active = np.arange(S)[None, :] < p[:, None]
        if table.stage_layers is not None:
            sl = table.stage_layers[:, :S]
        else:
            sl = np.where(active, (layers // p)[:, None], 0)
        m = np.maximum(c["global_batch"] // (c["dp"] * c["micro_batch"]), 1)
        sr = None if table.stage_recompute is None else table.stage_recompute[:, :S]
        glob = {k: c[k] for k in GLOBAL_COLUMNS if k in c}
        return cls.from_columns(
            pool=np.zeros((len(table), S), dtype=np.int64),
            dp=np.where(active, c["dp"][:, None], 1), tp=np.where(active, c["tp"][:, None], 1),
            layers=sl, stage_recompute=sr, microbatches=m, **glob)

    def __len__(self) -> int:
        return len(self.columns["pp"])

    def __getitem__(self, name: str) -> np.ndarray:
        return self.columns[name] if name in self.columns else self.stages[name]

    @property
    def num_stages(self) -> int:
        return self.stages["pool"].shape[1]

    def take(self, idx) -> HeteroTable:
        num = isinstance(idx, np.ndarray) and idx.dtype.kind in "iu"  # rows by number: np.take, faster on (N, S)
        rows = (lambda v: np.take(v, idx, axis=0)) if num else (lambda v: v[idx])  # noqa: E731
        sr = None if self.stage_recompute is None else rows(self.stage_recompute)
        return HeteroTable({k: rows(v) for k, v in self.columns.items()}, {k: rows(v) for k, v in self.stages.items()},
                           sr)

    def row(self, i: int, pool_names: list[str] | None = None) -> dict[str, object]:
        """Row i as plain Python: global keys and a ``stages`` list of per-stage dicts."""
        r: dict[str, object] = {}
        for k, v in self.columns.items():
            x = v[i]
            r[k] = str(decode(k, x)) if k in CODE_COLUMNS else x.item()
        stages = []
        for j in range(int(self.columns["pp"][i])):
            pi = int(self.stages["pool"][i, j])
            st = {"pool": pool_names[pi] if pool_names and pi < len(pool_names) else pi,
                  "dp": int(self.stages["dp"][i, j]), "tp": int(self.stages["tp"][i, j]),
                  "layers": int(self.stages["layers"][i, j]), "order": ORDERS[int(self.stages["order"][i, j])]}
            d2, p2 = int(self.stages["dp2"][i, j]), int(self.stages["pool2"][i, j])
            if d2 > 0 and p2 != pi:
                st["pool2"] = pool_names[p2] if pool_names and p2 < len(pool_names) else p2
                st["dp2"] = d2
            if self.stage_recompute is not None:
                st["recompute"] = RECOMPUTE[int(self.stage_recompute[i, j])]
            stages.append(st)
        r["stages"] = stages
        return r

    @staticmethod
    def concat(tables: list[HeteroTable]) -> HeteroTable:
        S = max(t.num_stages for t in tables)

        def pad(a, k):
            return np.pad(a, ((0, 0), (0, S - a.shape[1])), constant_values=_STAGE_PAD[k])

        cols = {k: np.concatenate([t.columns[k] for t in tables]) for k in GLOBAL_COLUMNS}
        stages = {k: np.concatenate([pad(t.stages[k], k) for t in tables]) for k in STAGE_COLUMNS}
        if any(t.stage_recompute is not None for t in tables):
            parts = [t.stage_recompute if t.stage_recompute is not None
                     else np.broadcast_to(t.columns["recompute"][:, None], (len(t), t.num_stages)) for t in tables]
            sr = np.concatenate([np.pad(x, ((0, 0), (0, S - x.shape[1]))) for x in parts])
        else:
            sr = None
        return HeteroTable(cols, stages, sr)


def hetero_from_mapping(data: Mapping, pool_names: list[str], argument: str = "--strategy") -> HeteroTable:
    """One strategy from a file: global keys plus ``stages``: [{pool, dp, tp, layers[, order,
    recompute, pool2, dp2]}, ...]; pools by name (or index); dp2 of the stage's dp replicas run
    on pool2."""
    stages = data.get("stages")
    if not isinstance(stages, list) or not stages:
        raise InputError(f"{argument}.stages", "a non-empty list of {pool, dp, tp, layers}", stages)
    allowed = {"pool", "dp", "tp", "layers", "order", "recompute", "pool2", "dp2"}
    cols = {k: [] for k in ("pool", "dp", "tp", "layers", "order", "recompute", "pool2", "dp2")}
    for j, st in enumerate(stages):
        where = f"{argument}.stages[{j}]"
        if not isinstance(st, Mapping):
            raise InputError(where, "a mapping with pool, dp, tp, layers", st)
        bad = set(st) - allowed
        if bad:
            raise InputError(where, "keys among " + ", ".join(sorted(allowed)), sorted(bad)[0])
        for req in ("pool", "layers"):
            if req not in st:
                raise InputError(f"{where}.{req}", "a value", None)
        for key in ("pool", "pool2"):
            pool = st.get(key, st["pool"])
            if isinstance(pool, str):
                if pool not in pool_names:
                    raise InputError(f"{where}.{key}", "one of " + ", ".join(pool_names), pool)
                pool = pool_names.index(pool)
            elif isinstance(pool, bool) or not isinstance(pool, int) or not 0 <= pool < len(pool_names):
                raise InputError(f"{where}.{key}", f"a pool name or index below {len(pool_names)}", pool)
            cols[key].append(pool)
        for k in ("dp", "tp", "layers", "dp2"):
            v = st.get(k, 0 if k == "dp2" else 1)
            low = 0 if k in ("layers", "dp2") else 1
            if isinstance(v, bool) or not isinstance(v, int) or v < low:
                raise InputError(f"{where}.{k}", f"an integer >= {low}", v)
            cols[k].append(v)
        if cols["dp2"][-1] >= cols["dp"][-1] and cols["dp2"][-1] > 0:
            raise InputError(f"{where}.dp2", f"fewer than the stage's dp={cols['dp'][-1]} replicas", cols["dp2"][-1])
        if ("pool2" in st) != ("dp2" in st):
            raise InputError(where, "pool2 and dp2 together (dp2 of the dp replicas on pool2)", sorted(st))
        o = st.get("order", "tp-inner")
        if o not in ORDERS:
            raise InputError(f"{where}.order", "tp-inner or tp-across", o)
        cols["order"].append(ORDERS.index(o))
        cols["recompute"].append(st.get("recompute", data.get("recompute", "none")))
    glob = {k: v for k, v in data.items() if k != "stages"}
    unknown = set(glob) - set(GLOBAL_COLUMNS)
    if unknown:
        raise InputError(argument, "global keys among " + ", ".join(GLOBAL_COLUMNS) + " and stages",
                         sorted(unknown)[0])
    glob["pp"] = len(stages)
    sr = cols["recompute"] if any("recompute" in st for st in stages) else None
    return HeteroTable.from_columns(pool=[cols["pool"]], dp=[cols["dp"]], tp=[cols["tp"]],
                                    layers=[cols["layers"]], order=[cols["order"]], pool2=[cols["pool2"]],
                                    dp2=[cols["dp2"]],
                                    stage_recompute=None if sr is None else [sr],
                                    **{k: [v] for k, v in glob.items()})
