"""MCMC's local moves: one change per chain, over a search.Space or a search.HeteroSpace.

:func:`proposer` gives FlexFlow's proposal (Jia et al. 2019, Sec. 5.2: change one dimension at
random; symmetric). Rows need not come back valid: the searcher masks them with
``space.valid``.

On a Space: a dimension is picked uniformly among those with more than one choice (per-stage
ones only for stages the row uses); an ordinal one (a stage boundary shift) steps its digit by
+-1, moving the boundary one layer (vpp layers under a chunked schedule where the row's
framework wants stages of whole, equal chunks), any other takes another choice uniformly. In a per-stage space a pp change also
resets the boundary shifts to the uniform positions and the unused stages' recompute digits.

On a HeteroSpace: the placement moves of search._placement_moves (swap two stages' pools, move a
stage boundary, change a stage's degrees, a global choice, or a stage's split).
"""

from __future__ import annotations

import numpy as np

from costmodel._strategy import FRAMEWORK
from search._hetero_space import HeteroSpace
from search._placement_moves import placement_moves
from search._space import UNEVEN_CHUNKS


def proposer(space):
    """The move function of ``space``, ``move(digits, rng)``: (C, D) digits -> (C, D), one local
    move per row (module docstring); the space's column layout is read once, here."""
    if isinstance(space, HeteroSpace):
        return placement_moves(space)
    return _grid_moves(space)


def _grid_moves(space):
    names = [d.name for d in space.dims]
    pp_col = names.index("pp") if "pp" in names else -1
    shift_cols = np.array([k for k, d in enumerate(space.dims) if d.base == "stage_shift"], dtype=np.int64)
    # Per-stage dimensions other than the boundary shifts (stage_recompute.J; a PiperSpace's tp.J,
    # dp.J, tmpc.J) and the stage J of each: only those of stages a row uses move, and a pp change
    # puts those of the stages it drops back at their canonical digit.
    rc_cols = np.array([k for k, d in enumerate(space.dims) if d.stage >= 0 and d.base != "stage_shift"],
                       dtype=np.int64)
    rc_stage = np.array([space.dims[k].stage for k in rc_cols], dtype=np.int64)
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
                movable[:, rc_cols] &= rc_stage[None, :] < pp[:, None]
        v = np.ones(C, dtype=np.int64)  # boundary step in layers
        if shift_cols.size:
            # whole chunks (vpp layers; 1 but under the chunked schedules) where the row's framework wants equal
            # chunks; one layer where it splits them unevenly (any count of at least vpp: search._space.UNEVEN_CHUNKS),
            # the rule Space._random_stages draws by
            uneven = UNEVEN_CHUNKS[space.column(digits, FRAMEWORK).astype(np.int64)]
            v = np.where(uneven, 1, space.column(digits, "vpp"))
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
                    keep = rc_stage[None, :] < pp_new[:, None]
                    out[np.ix_(changed, rc_cols)] = np.where(keep, sub, canon[rc_cols][None, :])
        return out

    return move
