"""How far the 1F1B closed form's hand-offs fall from the schedule simulator's where the sends do not block.

On uniform stages (forward f, backward b, hand-off h on every link) the closed form without its round trips prices a
non-blocking 1F1B as (m + p - 1)(f + b) + 2 (p - 1) h: hand-offs in the fill and drain only. The simulator
(costmodel._pipeline, sends never waited) also lets the round trip of 2 (p - 1) h stretch the steady state wherever it
is longer than what the p micro-batches in flight cover. This draws random uniform-stage cases in the ranges plansweep's
spaces use and prints the gap (simulator - closed form) as a share of the step and in hand-offs, and the blocking
profiles' for contrast.

What it shows (seed 0, 400 cases): the non-blocking gap without the round trips is a median 1.5% of the step (max 4.8%),
about (m - 1) 2 (p - 1) / p hand-offs: the steady state's critical cycle runs a micro-batch's forwards down the p stages
and its backwards back up, 2 (p - 1) hand-offs, while the first stage holds only p micro-batches in flight, so each
period is f + b + 2 (p - 1) h / p, not f + b (p 4, m 32, h 0.1 f: 4.6 h-units against 4.65). Where the sends block
(steady_handoffs_s) the closed form equals the simulator to rounding.
The closed form adds the round trips the critical path takes (costmodel._pipeline_terms.round_trip_handoffs_s:
2 ((m - 2) - floor((m - 2) / p)) h past the fill's and drain's on uniform stages, one every p micro-batches;
tests/test_pipeline_round_trips.py follows the chain for p = 4, m = 8 by hand): the gap prints as zero to rounding.
On uneven stages a loop of L neighbouring stages runs every L micro-batches, and a slower stage's slack hides its
hand-offs: the second part draws cases whose interior stages are alike and whose first stage (fewer layers and the
embedding) is lighter or whose last stage (the head) is heavier or lighter, and prints the closed form's round trips
against the simulator's (simulator - closed form with and without them, less the same at h = 0, the fill's own
approximation). On the validation rows a hand-off is under 1% of a stage's forward; the one row whose loops are not
in the slack is the DeepSeek-V3 report's (hai-llm, pp 16: a lighter first and last stage, fourteen alike between).
The second part (seed 0, 400 cases): the simulator's round trips 0.295% of the step on average, the closed form's
0.287%, their difference 0.007% on average and 0.32% at most (a loop partly in the slack: the simulator's transients).

    PYTHONPATH=. python3 benchmarks/closed_form_handoff_gap.py
"""

from __future__ import annotations

import numpy as np

from costmodel import simulate
from costmodel._block import steady_handoffs_s
from costmodel._pipeline_terms import round_trip_handoffs_s


def trips_s(f, b, h: float, m: int) -> float:
    """The closed form's round trips (round_trip_handoffs_s) on stages with passes f, b (lists) and hand-off h."""
    X, p = np.add(f, b), len(f)
    c = np.where(np.arange(p) < p - 1, h, 0.0)[:, None]
    return float(round_trip_handoffs_s(X[:, None], c, np.ones((p, 1)), np.array([p]), np.array([m]),
                                       np.array([X.max()]))[0])


def uneven(n: int, rng) -> None:
    """Interior stages alike, the first lighter and the last heavier or lighter: the round trips against the
    simulator's (its gap to the closed form without them, less the same gap at h = 0)."""
    got = []
    for _ in range(n):
        p, h = int(rng.choice([4, 8, 16])), float(rng.uniform(0.0, 0.03))
        m = int(rng.integers(p, 8 * p + 1))
        scale = np.ones(p)
        scale[0], scale[-1] = rng.uniform(0.5, 1.0), rng.uniform(0.7, 1.3)
        f, b = list(scale), list(2.0 * scale)
        X = np.add(f, b)
        closed = m * X.max() + X.sum() - X.max() + 2 * (p - 1) * h
        gap = simulate("1f1b", p, m, 1, tf=f, tb=b, tc=h).total_time[0] - closed
        gap0 = simulate("1f1b", p, m, 1, tf=f, tb=b, tc=0.0).total_time[0] - (m * X.max() + X.sum() - X.max())
        sim = gap - gap0
        got.append((sim, trips_s(f, b, h, m), closed + gap))
    a = np.array(got)
    miss = (a[:, 0] - a[:, 1]) / a[:, 2]
    print(f"{n} uneven-stage cases (p 4-16, first stage 0.5-1.0 of the others, last 0.7-1.3, h 0-3% of a forward): "
          f"the simulator's round trips {np.mean(a[:, 0] / a[:, 2]):.3%} of the step on average, the closed form's "
          f"{np.mean(a[:, 1] / a[:, 2]):.3%}; their difference: mean |share| {np.abs(miss).mean():.3%}, "
          f"max {np.abs(miss).max():.3%}")


def main(n: int = 400, seed: int = 0) -> None:
    rng = np.random.default_rng(seed)
    rows = []
    for _ in range(n):
        p = int(rng.choice([2, 4, 8, 16]))
        m = int(rng.integers(p, 8 * p + 1))
        f = 1.0
        b = float(rng.uniform(1.8, 3.2))  # backward / forward: 2 without recompute, 3 with full recompute
        h = float(rng.uniform(0.0, 0.1)) * f  # hand-off up to 10% of a forward
        closed = (m + p - 1) * (f + b) + 2 * (p - 1) * h
        free = simulate("1f1b", p, m, 1, tf=f, tb=b, tc=h).total_time[0]
        blocked = simulate("1f1b", p, m, 1, tf=f, tb=b, tc=h, blocking=True).total_time[0]
        steady = steady_handoffs_s(np.array([[h]]), np.array([p]), np.array([m]))[0]
        trips = trips_s([f] * p, [b] * p, h, m)
        rows.append((p, m, h, (free - closed) / free, (free - closed) / h if h else 0.0,
                     (blocked - closed - steady) / blocked, (free - closed - trips) / free))
    a = np.array(rows)
    share, hops, blocked_gap = a[:, 3], a[:, 4], a[:, 5]
    print(f"{n} random uniform-stage 1F1B cases (p 2-16, m p..8p, b/f 1.8-3.2, h 0-10% of f)")
    print(f"non-blocking: simulator - closed form, share of the step: median {np.median(share):.3%}, "
          f"max {share.max():.3%}, min {share.min():.3%}")
    print(f"non-blocking: the same in hand-offs: median {np.median(hops):.1f}, max {hops.max():.1f}")
    for p in (2, 4, 8, 16):
        q = a[:, 0] == p
        if q.any():
            print(f"  p {p:2d}: median share {np.median(share[q]):.3%}, max {share[q].max():.3%}; "
                  f"hand-offs median {np.median(hops[q]):.1f}")
    print(f"blocking: simulator - closed form with steady_handoffs_s, max |share| {np.abs(blocked_gap).max():.2e}")
    print(f"non-blocking: simulator - closed form with the round trips, max |share| {np.abs(a[:, 6]).max():.2e}")
    uneven(n, rng)


if __name__ == "__main__":
    main()
