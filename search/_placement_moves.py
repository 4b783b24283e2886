"""MCMC's local moves on a search.HeteroSpace (placements on the pools of a mixed cluster).

The first five moves uniformly: swap two stages' pools; move one stage boundary by one step (one
layer, or ``shift_layers``; to the next whole chunk where the row interleaves vpp chunks under a
framework that wants equal chunks, the rule costmodel._feasibility checks);
change one stage's degrees (dp, tp or order to another choice, or trade a factor 2 between its
tp and dp keeping its GPUs); change one global choice (pp included); put one stage on another
pool (the only move that changes which pools a placement uses: with two stages on an A100 and an
H100 pool, both on the H100s); and, where the space has splits, at a share SPLIT_MOVE_SHARE,
change one stage's split (dp2 one step up or down, or another pool2). Rows need not come back valid: the caller masks them with ``space.valid``.

This module reads the space only through its dimensions (``dims``, ``radices``, ``num_slots``,
``has_split``, ``global_dims``) and, for the boundary step, ``model.layers``, ``shift_layers`` and
``framework``, so that the space's own random draws (a walk of these moves,
search._hetero_space) and the searcher's proposer (search._moves) both import it from below.
"""

from __future__ import annotations

import numpy as np

from costmodel._frameworks import DEFAULT_FRAMEWORK, framework_preset
from costmodel._strategy import FRAMEWORK

PLACEMENT_MOVES = ("swap_pools", "shift_boundary", "stage_degrees", "global", "stage_pool", "split")
# Share of MCMC's moves and of random draws' stages that change a stage's split.
# Splits pay only where a pool has GPUs to spare or the inter-pool link is fast, so they are one
# move in ten rather than one in five (uniform over the moves); an engineering choice, not a tuned
# optimum. Splits are opt-in (from_options(dp2=...)): the split dims cost the searchers
# throughput where splits do not pay (BENCHMARKS.md, "Heterogeneous").
SPLIT_MOVE_SHARE = 0.1


def placement_moves(space):
    """The move function of a HeteroSpace, ``move(digits, rng)``: (C, D) digits -> (C, D), one move a row."""
    S = space.num_slots
    index = {d.name: k for k, d in enumerate(space.dims)}
    radices = space.radices

    def stage_cols(family: str, n: int = S) -> np.ndarray:
        return np.array([index[f"{family}.{j}"] for j in range(n)])

    pool_cols, dp_cols, tp_cols, order_cols = (stage_cols(f) for f in ("pool", "dp", "tp", "order"))
    shift_cols = stage_cols("stage_shift", S - 1) if S > 1 else None
    split_cols = (stage_cols("dp2"), stage_cols("pool2")) if space.has_split else None
    gcols = np.array([0] + [index[n] for n in space.global_dims])
    chunk_of = boundary_chunks(space)

    def move(digits, rng: np.random.Generator) -> np.ndarray:
        cur = np.atleast_2d(np.asarray(digits, dtype=np.int64))
        out = cur.copy()
        C = len(cur)
        rows = np.arange(C)
        p = np.asarray(space.dims[0].choices)[cur[:, 0]]
        which = rng.integers(0, len(PLACEMENT_MOVES) - 1, C)  # the five placement moves, uniformly
        if split_cols is not None:  # a share of SPLIT_MOVE_SHARE becomes a split move
            which = np.where(rng.random(C) < SPLIT_MOVE_SHARE, len(PLACEMENT_MOVES) - 1, which)
        j1 = (rng.random(C) * p).astype(np.int64)
        j2 = (rng.random(C) * p).astype(np.int64)
        # swap two stages' pools
        sw = which == 0
        a, b = pool_cols[j1], pool_cols[j2]
        out[rows[sw], a[sw]] = cur[rows[sw], b[sw]]
        out[rows[sw], b[sw]] = cur[rows[sw], a[sw]]
        # move a stage boundary by one step (pp = 1: change pp instead)
        sh = which == 1
        if S > 1:
            jb = (rng.random(C) * np.maximum(p - 1, 1)).astype(np.int64)
            cols = shift_cols[jb]
            up = rng.random(C) >= 0.5
            new = np.clip(boundary_step(space, cur[rows, cols], jb, p, chunk_of(cur), up), 0, radices[cols] - 1)
            out[rows[sh], cols[sh]] = new[sh]
        # change one stage's degrees
        dg = which == 2
        kind = rng.integers(0, 4, C)  # 0 dp, 1 tp, 2 order, 3 trade tp x2 <-> dp x2
        for k, colset in ((0, dp_cols), (1, tp_cols), (2, order_cols)):
            m = dg & (kind == k)
            c = colset[j1]
            r = radices[c]
            new = (cur[rows, c] + rng.integers(1, np.maximum(r, 2), C)) % r
            out[rows[m], c[m]] = new[m]
        tr = dg & (kind == 3)
        up = rng.random(C) < 0.5
        cd, ct = dp_cols[j1], tp_cols[j1]
        new_t = np.clip(cur[rows, ct] + np.where(up, 1, -1), 0, radices[ct] - 1)
        new_d = np.clip(cur[rows, cd] + np.where(up, -1, 1), 0, radices[cd] - 1)
        out[rows[tr], ct[tr]] = new_t[tr]
        out[rows[tr], cd[tr]] = new_d[tr]
        # change one global choice (pp included)
        gl = which == 3
        c = gcols[rng.integers(0, len(gcols), C)]
        r = radices[c]
        new = np.where(r > 1, (cur[rows, c] + rng.integers(1, np.maximum(r, 2), C)) % np.maximum(r, 1), cur[rows, c])
        out[rows[gl], c[gl]] = new[gl]
        # put one stage on another pool
        po = which == 4
        c = pool_cols[j1]
        r = radices[c]
        new = np.where(r > 1, (cur[rows, c] + rng.integers(1, np.maximum(r, 2), C)) % np.maximum(r, 1), cur[rows, c])
        out[rows[po], c[po]] = new[po]
        # change one stage's split: dp2 one step (ordinal), or another second pool
        sp = which == 5
        if sp.any():
            on_dp2 = rng.random(C) < 0.5
            c = np.where(on_dp2, split_cols[0][j1], split_cols[1][j1])
            r = radices[c]
            step = np.where(rng.random(C) < 0.5, -1, 1)
            new = np.where(on_dp2, np.clip(cur[rows, c] + step, 0, r - 1),
                           (cur[rows, c] + rng.integers(1, np.maximum(r, 2), C)) % r)
            out[rows[sp], c[sp]] = new[sp]
        return out

    return move


def boundary_chunks(space):
    """``chunk(digits)`` (C,): the layers a boundary of each row moves by at least: vpp where the row interleaves vpp
    chunks a device under a framework that wants them equal (costmodel._feasibility: a stage a whole number of
    chunks), else 1 (one chunk a device, or a framework that splits chunks unevenly: Framework.uneven_chunks)."""
    index = {d.name: k for k, d in enumerate(space.dims)}
    v_col, f_col = index.get("vpp"), index.get(FRAMEWORK)
    vpp = None if v_col is None else np.asarray(space.dims[v_col].choices, dtype=np.int64)
    names = space.dims[f_col].choices if f_col is not None else (space.framework or DEFAULT_FRAMEWORK,)
    uneven = np.array([framework_preset(n, FRAMEWORK).uneven_chunks for n in names])

    def chunk(digits) -> np.ndarray:
        C = len(digits)
        if vpp is None:
            return np.ones(C, dtype=np.int64)
        v = vpp[digits[:, v_col]]
        even = ~uneven[digits[:, f_col]] if f_col is not None else np.full(C, not uneven[0])
        return np.where(even, v, 1)

    return chunk


def boundary_step(space, shift_digit, j, p, chunk, up) -> np.ndarray:
    """The digit of boundary ``j`` after one step up (``up``) or down from ``shift_digit``, of rows of ``p`` stages:
    its cut round(L (j + 1) / p) + shift x shift_layers (search.HeteroSpace._layers) moved to the next multiple of
    ``chunk`` layers that way, in whole shifts (up: at least that far, down: at least that far back). With chunk 1
    and shift_layers 1 that is one shift either way. Not clipped to the dimension's range."""
    choices = np.asarray(space.dims[[d.name for d in space.dims].index("stage_shift.0")].choices, dtype=np.int64)
    L, sl = space.model.layers, space.shift_layers
    shift = choices[0] + np.asarray(shift_digit, dtype=np.int64)  # the choices run from -max_shift in steps of 1
    base = np.rint(L * (np.asarray(j) + 1) / np.asarray(p)).astype(np.int64)
    cut = base + shift * sl
    target = np.where(up, (cut // chunk + 1) * chunk, ((cut - 1) // chunk) * chunk)
    moved = np.where(up, -((base - target) // sl), (target - base) // sl)  # ceil up, floor down
    return moved - choices[0]
