"""Local search around the best plans told: the late phase that MCMC, TPE and the gradient search
share once most of a known budget is spent.

A *peak* among the feasible points told is one with no better point told one change away (its
neighbours told so far are none better: on a plateau of equal points each one is a peak).
``peak_neighbours`` lists, best peak first, the neighbours of
each peak that have not been evaluated: its valid single changes (one dimension to another digit),
then, for each single change the space does not allow, the points that make that change with the
fewest other changes (pp 2 to 1 from an interleaved schedule with vpp 6 also takes 1F1B and vpp 1:
three changes). Evaluating them climbs the peak; where a peak's neighbours are all told (it is a local
optimum) the list goes on with the next peak, in another basin (the points next to the first peak are
its slope, and climbing them again would keep the search on the first good basin it found).

Guided (MCMC and the gradient search): the neighbours are ranked by an additive model of the plans
told (log cost = mu + one weight per dimension and digit, ridge regression: additive_model), and the
neighbours of the two best peaks with any left are ranked together. A budget of a few dozen
evaluations covers a part of one peak's neighbourhood, so the order decides what is tried; on draw
seed 1's problems the model's order found the optimum in more seeds than a shuffled one (BENCHMARKS.md,
"Search quality on drawn problems").

Everything here is a pure function of the points told (their keys and costs) and a seed, so a
searcher that calls it stays a function of its told history (resume by replay).
"""

from __future__ import annotations

import numpy as np

from search._memo import point_keys

# The repairs use the fewest other changes among the points of the walk where there are at most
# this many ((M, D) digits held); else the valid points one more change away.
REPAIR_MAX_POINTS = 200_000
# The late phase ranks together the neighbours of this many peaks (the best ones, climbed or not),
# guided by the additive model: chosen on draw seed 1 (1, 2, 3, 5 and all peaks tried;
# BENCHMARKS.md, "Search quality on drawn problems").
MIX_PEAKS = 2
# The late phase has at least this many evaluations, up to this share of the budget (late_evaluations):
# chosen on draw seed 1 (BENCHMARKS.md, "Search quality on drawn problems").
LATE_POINTS = 64
LATE_MAX_SHARE = 0.8
# A start sample holds at most this many points (4x as many candidates are drawn for it): a share of a
# budget of millions of evaluations would otherwise be drawn, held and deduplicated in one array.
SAMPLE_MAX_POINTS = 200_000


# A peak's re-factorisations change one or two of these parallel degrees and resize the micro-batch so that a step
# keeps its micro-batches (dp x micro_batch as before): the same sequences a micro-batch on each GPU's share of the
# model, the same pipeline fill, only the split of the GPUs moved (cp 4 with 4 sequences a micro-batch to dp x 4 with
# one; tp 8 to tp 2 x cp 2 with dp doubled and half the micro-batch). Single changes reach them only through plans
# with another micro-batch count, often slower or out of memory: on draw seed 99 the searchers' seeds rested one
# re-factorisation below the optimum (BENCHMARKS.md, "Search quality on drawn problems").
REFACTOR_DIMS = ("tp", "cp", "pp")


def refactorings(space, x: np.ndarray) -> np.ndarray:
    """(R, D) valid points that change one or two of x's REFACTOR_DIMS and its micro_batch so that dp x
    micro_batch (the sequences of a step's micro-batch across the replicas) is x's; each degree change once (the
    first micro-batch that keeps it). Empty where the space has no micro_batch or degree dimension."""
    names = [d.name for d in space.dims]
    none = np.zeros((0, len(x)), dtype=np.int64)
    deg = [names.index(n) for n in REFACTOR_DIMS if n in names]
    if "micro_batch" not in names or not deg:
        return none
    kb = names.index("micro_batch")
    radices = np.asarray(space.radices)
    rows = []
    for i, k in enumerate(deg):
        for v in range(radices[k]):
            if v == x[k]:
                continue
            one = x.copy()
            one[k] = v
            rows.append(one)
            for k2 in deg[i + 1:]:
                for v2 in range(radices[k2]):
                    if v2 != x[k2]:
                        two = one.copy()
                        two[k2] = v2
                        rows.append(two)
    if not rows:
        return none
    c = np.stack(rows)  # (C, D) the degree changes
    nb = int(radices[kb])
    cand = np.repeat(c, nb, axis=0)  # (C nb, D) each with every micro-batch
    cand[:, kb] = np.tile(np.arange(nb), len(c))
    base = space.table(x[None, :])
    want = int(base["dp"][0]) * int(base["micro_batch"][0])
    t = space.table(cand)
    keep = space.valid(cand) & (t["dp"] * t["micro_batch"] == want) & (cand[:, kb] != x[kb])
    hit = keep.reshape(len(c), nb)
    first = np.argmax(hit, axis=1)  # the smallest micro-batch digit that keeps it
    ok = hit.any(axis=1)
    return cand.reshape(len(c), nb, -1)[np.flatnonzero(ok), first[ok]]


def single_changes(space, dims) -> tuple[np.ndarray, np.ndarray]:
    """(ks, vs), both (K,): every (dimension, digit) pair of the dimensions ``dims`` (indices into
    space.dims), the single changes a neighbour makes."""
    ks = np.array([k for k in dims for _ in space.dims[k].choices], dtype=np.int64)
    vs = np.array([v for k in dims for v in range(len(space.dims[k].choices))], dtype=np.int64)
    return ks, vs


def walk_digits(space, points: int | None) -> np.ndarray | None:
    """(M, D) digits of every valid point of ``space`` (the points walked), where the space lists
    them (a grid index per point) and there are at most REPAIR_MAX_POINTS; else None."""
    if points is None or points > REPAIR_MAX_POINTS or space.strides is None:
        return None
    return space.digits_of(space.valid_indices(0, space.size))


def neighbours(space, x: np.ndarray, ks: np.ndarray, vs: np.ndarray,
               fit: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Valid digits near ``x``: (S, D) its valid single changes (dimension ks[j] to digit vs[j]), and
    (P, D) for each invalid single change its repairs, duplicates dropped: with ``fit`` ((M, D) the
    digits of every point walked), the points of ``fit`` that make that change with the fewest other
    changes; without, the valid points one more change away (like MCMC's repair: 1F1B to interleaved
    with vpp, tp with pp); then x's re-factorisations (refactorings)."""
    K = len(ks)
    one = np.repeat(x[None, :], K, axis=0)  # (K, D) every single change of x
    one[np.arange(K), ks] = vs
    moved = x[ks] != vs
    ok = space.valid(one) if K else np.zeros(0, dtype=bool)
    bad = np.flatnonzero(moved & ~ok)  # (B,) invalid single changes
    if fit is not None:
        dist = (fit != x[None, :]).sum(axis=1)  # (M,) changes from x
        parts = []
        for j in bad:
            near = np.flatnonzero(fit[:, ks[j]] == vs[j])
            if near.size:
                parts.append(fit[near[dist[near] == dist[near].min()]])
        two = np.concatenate(parts) if parts else np.zeros((0, len(x)), dtype=np.int64)
    else:
        two = np.repeat(one[bad][:, None, :], K, axis=1)  # (B, K, D) one more change each
        two[:, np.arange(K), ks] = vs[None, :]
        two = two.reshape(-1, len(x))
        two = two[(two != x[None, :]).sum(axis=1) == 2]
        two = two[space.valid(two)] if len(two) else two
    two = np.concatenate([two, refactorings(space, x)])
    _, first = np.unique(two, axis=0, return_index=True)
    return one[moved & ok], two[np.sort(first)]


def additive_model(space, digits: np.ndarray, cost: np.ndarray, ridge: float = 1.0, clip: float | None = None):
    """A predictor of log cost from the told points: log cost = mu + sum_k w_k[digit_k], one weight per
    (dimension, digit), fitted by ridge regression (``ridge`` lambda) on the feasible points ``digits``
    (F, D) with finite ``cost`` (F,). Returns ``predict((N, D) digits) -> (N,)``; None with fewer than
    two feasible points.

    ``clip`` q (0-1): the costs above their q-quantile count as that quantile (a plan worse than the
    median told, q = 0.5, counts as the median one), so that the fit tells the good plans apart rather
    than spending its squares on how slow the slow ones are (a plan 90% below the best weighs more in a
    least-squares fit than all the differences between the good ones)."""
    ok = np.isfinite(cost)
    if ok.sum() < 2:
        return None
    if clip is not None:
        cost = np.where(ok, np.minimum(cost, np.quantile(cost[ok], clip)), cost)
    radices = np.asarray(space.radices, dtype=np.int64)
    offset = np.concatenate([[0], np.cumsum(radices)[:-1]]).astype(np.int64)  # (D,) first column of each dim
    width = int(radices.sum())
    col = offset[None, :] + digits[ok]  # (F, D) the one-hot columns set in each row
    y = np.log(cost[ok])
    mu = y.mean()
    # The normal equations from counts, not from a dense (F, width) one-hot matrix: x.T @ x counts the
    # rows setting each pair of columns, x.T @ r sums r over the rows setting each column (no BLAS
    # call: a threaded product of these small matrices is slower than the counts on a busy machine).
    pairs = (col[:, :, None] * width + col[:, None, :]).ravel()  # (F D D,)
    xtx = np.bincount(pairs, minlength=width * width).reshape(width, width).astype(np.float64)
    xty = np.bincount(col.ravel(), weights=np.repeat(y - mu, col.shape[1]), minlength=width)
    w = np.linalg.solve(xtx + ridge * np.eye(width), xty)
    return lambda d: mu + w[offset[None, :] + np.atleast_2d(d)].sum(axis=1)


def peak_neighbours(space, digits: np.ndarray, cost: np.ndarray, known, n: int, rng: np.random.Generator,
                    ks: np.ndarray, vs: np.ndarray, fit: np.ndarray | None = None, *, guided: bool = True,
                    mix: int = MIX_PEAKS, clip: float | None = None) -> np.ndarray:
    """(<= n, D) distinct digits not evaluated yet: the neighbours (``neighbours``) of the peaks
    among the told points ``digits`` (F, D) with costs ``cost`` (F,) (lower is better; inf: not
    feasible, never a peak), best peak first. ``known(keys)``: (N,) bool, the keys already evaluated.

    Unguided: each peak's neighbours shuffled with ``rng``, singles before repairs, peak after peak.
    Guided: the neighbours of the ``mix`` best peaks (their climbed ones included: a peak whose
    neighbours are all told keeps its place, so that the next peaks do not crowd out the best one's
    last neighbours), and of the next ones where these do not fill ``n``, ranked together by the
    additive model of the told points (additive_model, its costs clipped at their ``clip`` quantile;
    ties in ``rng``'s order)."""
    none = np.zeros((0, len(space.dims)), dtype=np.int64)
    feasible = np.flatnonzero(np.isfinite(cost))
    if not feasible.size or n <= 0:
        return none
    order = feasible[np.argsort(cost[feasible], kind="stable")]
    told = digits[order]  # (F, D) feasible points told, best first
    ranked = cost[order]
    predict = additive_model(space, digits, cost, clip=clip) if guided else None
    out, seen, peaks = [], set(), 0
    for j, x in enumerate(told):
        if j and (((told[:j] != x[None, :]).sum(axis=1) == 1) & (ranked[:j] < ranked[j])).any():
            continue  # a better point told is one change away: on the slope of a peak climbed already (a point as
            # good one change away does not count: on a plateau each point is a peak, its own neighbours climbed)
        peaks += 1
        for cand in neighbours(space, x, ks, vs, fit):  # singles, then repairs
            if len(cand):
                fresh = cand[~known(point_keys(space, cand))]
                fresh = fresh[rng.permutation(len(fresh))]
                if predict is not None and len(fresh):
                    fresh = fresh[np.argsort(predict(fresh), kind="stable")]
                for row in fresh:
                    key = row.tobytes()
                    if key not in seen:
                        seen.add(key)
                        out.append(row)
        if len(out) >= n and (predict is None or peaks >= mix):
            break
    if not out:
        return none
    out = np.stack(out)
    if predict is not None and mix > 1:
        # ranked together, but the climb of the best peak with neighbours left (out[0] is its most
        # promising neighbour) goes on at one neighbour a batch at least: its last, unpromising
        # neighbours are not held up for ever by the next peaks' promising ones
        rest = 1 + np.argsort(predict(out[1:]), kind="stable")
        out = out[np.concatenate([[0], rest])]
    return out[:n]


def start_sample(space, budget: int | None, share: float, *, seed: int, stream: int,
                 starts: np.ndarray | None = None, more_than: int = 0) -> np.ndarray | None:
    """(K, D) distinct points a searcher evaluates first, K = sample_size(budget, share): ``starts`` (its
    own named starts, (S, D), where it has some), then uniformly random points of the walk
    (space.random_digits: the points that fit on a screened space), drawn from
    np.random.default_rng([seed, stream]). None without a budget or grid keys, or where K is not more
    than ``more_than``. A function of (space, budget, share, seed, starts): a resumed searcher draws the
    same sample, and the points of it not told yet are those its memo lacks (sample_left)."""
    if budget is None or share <= 0 or space.strides is None:
        return None
    k = sample_size(budget, share)
    if k <= more_than:
        return None
    rng = np.random.default_rng([seed, stream])
    cand = space.random_digits(rng, 4 * k)
    if starts is not None:
        starts = np.asarray(starts, dtype=np.int64)  # (S, D); (0,) where none (a space of no dimension: D = 0)
        cand = np.concatenate([starts.reshape(len(starts), cand.shape[1]), cand])
    _, first = np.unique(point_keys(space, cand), return_index=True)
    return cand[np.sort(first)[:k]]


def sample_size(budget: int, share: float) -> int:
    """Points of a budget's start sample: round(``share`` x budget), at most SAMPLE_MAX_POINTS."""
    return min(round(share * budget), SAMPLE_MAX_POINTS)


def sample_left(space, sample: np.ndarray | None, memo) -> np.ndarray | None:
    """(U, D) the points of a start sample (start_sample) that ``memo`` has not been told; None once it
    holds them all (or without a sample)."""
    if sample is None:
        return None
    found, _ = memo.lookup(point_keys(space, sample))
    return sample[~found] if not found.all() else None


def late_evaluations(budget: int, share: float) -> int:
    """Evaluations of a budget's late local phase: ``share`` of it, and at least LATE_POINTS (a few
    neighbourhoods of a peak) up to LATE_MAX_SHARE of it where the share gives fewer (a budget of a few
    dozen evaluations spends most of them climbing; one of hundreds leaves the rest to the searcher)."""
    if share <= 0:
        return 0
    return int(max(round(share * budget), min(LATE_POINTS, round(LATE_MAX_SHARE * budget))))


def polish_batch(space, memo, *, budget: int | None, share: float, batch: int, seed: int, stream: int,
                 changes: tuple[np.ndarray, np.ndarray], fit: np.ndarray | None,
                 clip: float | None = None) -> np.ndarray | None:
    """(P <= batch, D) the next batch of a searcher's late local phase, a function of its ``memo``
    (search._memo.Memo of (cost, ...) per grid index told): the peaks' unevaluated neighbours
    (peak_neighbours over the single changes ``changes``), shuffled from np.random.default_rng([seed,
    stream, points told]); ``clip``: peak_neighbours'. None before the last late_evaluations(budget, share)
    evaluations (or without a budget, or where the space has no grid keys), and where no peak has an
    unevaluated neighbour left."""
    if budget is None or share <= 0 or space.strides is None:
        return None
    told = len(memo)
    if told < budget - late_evaluations(budget, share):
        return None
    keys, vals = memo.arrays()
    rng = np.random.default_rng([seed, stream, told])
    ks, vs = changes
    pts = peak_neighbours(space, space.digits_of(np.asarray(keys)), vals[:, 0], lambda k: memo.lookup(k)[0],
                          batch, rng, ks, vs, fit, clip=clip)
    return pts if len(pts) else None
