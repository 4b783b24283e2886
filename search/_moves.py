"""MCMC's local moves: one change per chain, over a search.Space or a search.HeteroSpace.

:func:`proposer` gives FlexFlow's proposal (Jia et al. 2019, Sec. 5.2: change one dimension at
random; symmetric). Rows need not come back valid: the searcher masks them with
``space.valid``.

On a Space: a dimension is picked uniformly among those with more than one choice (per-stage
ones only for stages the row uses); an ordinal one (a stage boundary shift) steps its digit by
+-1, moving the boundary one layer (vpp layers under interleaving, where stages hold whole
chunks), any other takes another choice uniformly. In a per-stage space a pp change also
resets the boundary shifts to the uniform positions and the unused stages' recompute digits.

On a HeteroSpace (the first four moves uniformly): swap two stages' pools; move one stage
boundary by one step; change one stage's degrees (dp, tp or order to another choice, or trade
a factor 2 between its tp and dp keeping its GPUs); change one global choice (pp included);
and, where the space has splits, at a share SPLIT_MOVE_SHARE, change one stage's split (dp2 one
step up or down, or another pool2).
"""

from __future__ import annotations

import numpy as np

from costmodel._strategy import SCHEDULES
from search._hetero_space import GLOBAL_DIMS, SPLIT_MOVE_SHARE, HeteroSpace

PLACEMENT_MOVES = ("swap_pools", "shift_boundary", "stage_degrees", "global", "split")


def proposer(space):
    """The move function of ``space``, ``move(digits, rng)``: (C, D) digits -> (C, D), one local
    move per row (module docstring); the space's column layout is read once, here."""
    if isinstance(space, HeteroSpace):
        return _placement_moves(space)
    return _grid_moves(space)


def _grid_moves(space):
    names = [d.name for d in space.dims]
    pp_col = names.index("pp") if "pp" in names else -1
    shift_cols = np.array([k for k, d in enumerate(space.dims) if d.base == "stage_shift"], dtype=np.int64)
    rc_cols = np.array([k for k, d in enumerate(space.dims) if d.base == "stage_recompute"], dtype=np.int64)
    ordinal_dims = np.array([d.ordinal for d in space.dims], dtype=bool)
    staged = space.partitioned

    def move(digits, rng: np.random.Generator) -> np.ndarray:
        digits = np.atleast_2d(np.asarray(digits, dtype=np.int64))
        C, D = digits.shape
        if D == 0:  # a space of one point: no dimension to change, every chain proposes its own point
            return digits.copy()
        movable = np.broadcast_to(space.radices[None, :] > 1, (C, D)).copy()
        if staged:
            pp = space.column(digits, "pp")
            S = space.max_stages
            if shift_cols.size:
                movable[:, shift_cols] &= np.arange(S - 1)[None, :] < (pp - 1)[:, None]
            if rc_cols.size:
                movable[:, rc_cols] &= np.arange(S)[None, :] < pp[:, None]
        v = np.ones(C, dtype=np.int64)  # boundary step in layers
        if shift_cols.size:
            inter = space.column(digits, "schedule") == SCHEDULES.index("interleaved")
            v = np.where(inter, space.column(digits, "vpp"), 1)
            dg = digits[:, shift_cols]
            rad_s = space.radices[shift_cols][None, :]
            movable[:, shift_cols] &= (dg - v[:, None] >= 0) | (dg + v[:, None] < rad_s)
        cnt = movable.sum(axis=1)
        pick = np.floor(rng.random(C) * np.maximum(cnt, 1)).astype(np.int64)
        col = np.argmax(np.cumsum(movable, axis=1) > pick[:, None], axis=1)  # (C,)
        rows = np.arange(C)
        cur = digits[rows, col]
        rad = space.radices[col]
        ordinal = ordinal_dims[col]
        size = np.where(np.isin(col, shift_cols), v, 1) if staged else v
        step = np.where(rng.random(C) < 0.5, -size, size)
        step = np.where(cur + step < 0, size, np.where(cur + step >= rad, -size, step))
        other = (cur + 1 + np.floor(rng.random(C) * np.maximum(rad - 1, 1)).astype(np.int64)) % rad
        new = np.where(ordinal, cur + step, other)
        out = digits.copy()
        out[rows, col] = np.where(cnt > 0, new, cur)
        if staged and pp_col >= 0:
            changed = np.flatnonzero((col == pp_col) & (cnt > 0))
            if changed.size:
                canon = space.canonical_digits(1)[0]
                if shift_cols.size:
                    out[np.ix_(changed, shift_cols)] = canon[shift_cols][None, :]
                if rc_cols.size:
                    pp_new = space.column(out[changed], "pp")
                    sub = out[np.ix_(changed, rc_cols)]
                    keep = np.arange(space.max_stages)[None, :] < pp_new[:, None]
                    out[np.ix_(changed, rc_cols)] = np.where(keep, sub, canon[rc_cols][None, :])
        return out

    return move


def _placement_moves(space: HeteroSpace):
    S = space.num_slots
    index = {d.name: k for k, d in enumerate(space.dims)}
    radices = space.radices

    def stage_cols(family: str, n: int = S) -> np.ndarray:
        return np.array([index[f"{family}.{j}"] for j in range(n)])

    pool_cols, dp_cols, tp_cols, order_cols = (stage_cols(f) for f in ("pool", "dp", "tp", "order"))
    shift_cols = stage_cols("stage_shift", S - 1) if S > 1 else None
    split_cols = (stage_cols("dp2"), stage_cols("pool2")) if space.has_split else None
    gcols = np.array([0] + [index[n] for n in GLOBAL_DIMS if n in index])

    def move(digits, rng: np.random.Generator) -> np.ndarray:
        cur = np.atleast_2d(np.asarray(digits, dtype=np.int64))
        out = cur.copy()
        C = len(cur)
        rows = np.arange(C)
        p = np.asarray(space.dims[0].choices)[cur[:, 0]]
        which = rng.integers(0, len(PLACEMENT_MOVES) - 1, C)  # the four placement moves, uniformly
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
            step = np.where(rng.random(C) < 0.5, -1, 1)
            new = np.clip(cur[rows, cols] + step, 0, radices[cols] - 1)
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
        # change one stage's split: dp2 one step (ordinal), or another second pool
        sp = which == 4
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
