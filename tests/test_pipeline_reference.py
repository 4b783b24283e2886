"""The vectorised simulator against a slow, obvious event-by-event simulation.

Everything here is written from the schedules' descriptions, independently of
costmodel/_pipeline.py (no shared code): the op orders, the placement of chunks on devices,
and a discrete-event simulation with a time-ordered event queue in which a device starts its
next op once it is idle and the op's input has arrived (sends are asynchronous; a hand-off
between two chunks on one device costs nothing).
"""

from __future__ import annotations

import heapq
import random

import numpy as np
import pytest

from costmodel import simulate

# ----------------------------------------------------------------------------- placement


def stage_on(name, p, v, dev, chunk):
    """Which virtual stage chunk `chunk` of device `dev` holds."""
    zigzag = name in ("hanayo", "zb-v")
    if zigzag and chunk % 2:
        return p * chunk + p - 1 - dev
    return p * chunk + dev


# ----------------------------------------------------------------------------- op orders
# Ops are ("F"|"B"|"W", micro-batch, chunk).


def order_gpipe(p, m, v, dev):
    return [("F", j, 0) for j in range(m)] + [("B", j, 0) for j in range(m)]


def order_1f1b(p, m, v, dev):
    # PipeDream-Flush: stage dev keeps p - dev micro-batches in flight.
    out, nf, nb = [], 0, 0
    while nf < min(p - dev, m):
        out.append(("F", nf, 0))
        nf += 1
    while nb < m:
        out.append(("B", nb, 0))
        nb += 1
        if nf < m:
            out.append(("F", nf, 0))
            nf += 1
    return out


def megatron_group(p, m):
    """Megatron-LM accepts a group size N in [p, m] if m % N is 0 or at least p."""
    valid = [n for n in range(p, m + 1) if m % n == 0 or m % n >= p]
    return valid[0] if valid else m


def order_interleaved(p, m, v, dev):
    # Megatron-LM: micro-batches in groups of N (last group takes the rest), each group run
    # chunk after chunk; backward visits chunks in reverse. Warm-up 2(p-dev-1) + (v-1)N.
    group = megatron_group(p, m)
    seq = []
    start = 0
    while start < m:
        stop = m if start + group >= m else start + group
        for c in range(v):
            seq.extend((j, c) for j in range(start, stop))
        start = stop
    warm = min(2 * (p - dev - 1) + (v - 1) * group, len(seq))
    fwd = [("F", j, c) for j, c in seq]
    bwd = [("B", j, v - 1 - c) for j, c in seq]
    out = fwd[:warm]
    i_f, i_b = warm, 0
    while i_b < len(bwd):
        if i_f < len(fwd):
            out.append(fwd[i_f])
            i_f += 1
        out.append(bwd[i_b])
        i_b += 1
    return out


def lagged_w(ops, lag, m):
    """Insert W(j) right after B(j + lag); the W's left over go at the end."""
    out = []
    for op in ops:
        out.append(op)
        if op[0] == "B" and op[1] >= lag:
            out.append(("W", op[1] - lag, 0))
    done = {op[1] for op in out if op[0] == "W"}
    return out + [("W", j, 0) for j in range(m) if j not in done]


def order_zb_h1(p, m, v, dev):
    return lagged_w(order_1f1b(p, m, v, dev), dev, m)


def order_zb_h2(p, m, v, dev):
    warm = min(2 * (p - dev) - 1, m)
    ops = [("F", j, 0) for j in range(warm)]
    nf = warm
    for j in range(m):
        ops.append(("B", j, 0))
        if nf < m:
            ops.append(("F", nf, 0))
            nf += 1
    return lagged_w(ops, 2 * dev, m)


def order_zb_v(p, m, v, dev):
    # Qi et al.'s handcrafted ZB-V, counted for n = max(m, 2p - 1) micro-batches, the ones
    # beyond m dropped. Counters per (kind, chunk).
    n = max(m, 2 * p - 1)
    cnt = {("F", 0): 0, ("F", 1): 0, ("B", 0): 0, ("B", 1): 0, ("W", 0): 0, ("W", 1): 0}
    out = []

    def put(kind, chunk, counter=None):
        key = counter or (kind, chunk)
        out.append((kind, cnt[key], chunk))
        cnt[key] += 1

    for _ in range(2 * (p - dev) - 1):
        put("F", 0)
    for _ in range(dev):
        put("F", 1)
        put("F", 0)
    for _ in range(p - dev):
        put("F", 1)
        put("B", 1)
        put("W", 1)
    while cnt[("F", 1)] < cnt[("F", 0)] or cnt[("F", 0)] < n:
        if cnt[("F", 0)] < n:
            put("F", 0)
        put("B", 0)
        put("W", 0)
        put("F", 1)
        put("B", 1)
        put("W", 1)
    for _ in range(dev):
        put("B", 0)
        put("B", 1)
    for _ in range(p - dev):
        put("B", 0)
        put("W", 0)
    while cnt[("W", 1)] < cnt[("B", 1)]:
        put("W", 1)
    while cnt[("W", 0)] < cnt[("B", 0)]:
        put("W", 0)
    return [op for op in out if op[1] < m]


STATIC_ORDERS = {
    "gpipe": order_gpipe,
    "1f1b": order_1f1b,
    "interleaved": order_interleaved,
    "zb-h1": order_zb_h1,
    "zb-h2": order_zb_h2,
    "zb-v": order_zb_v,
}


def orders_hanayo(p, m, v):
    """Hanayo as seed 003's simulator builds it: a grid of unit slots per device ("." free,
    "x" closed, or the op starting or continuing there), F one slot, B two; one micro-batch
    of a group of p first, then the paper's closed zones, then the group's others; each
    device reads its ops off its row of the grid."""
    fwd = [(d, c) for w in range(v // 2) for c, devs in ((2 * w, range(p)), (2 * w + 1, range(p - 1, -1, -1)))
           for d in devs]
    route = [("F", d, c) for d, c in fwd] + [("B", d, c) for d, c in reversed(fwd)]
    width = 6 * m * v * p + 8
    grid = [["."] * width for _ in range(p)]

    def put(j, start):
        slot_of = {}
        cursor = start
        for kind, d, c in route:
            size = 1 if kind == "F" else 2
            i = cursor + 1
            while "".join(x if isinstance(x, str) else "#" for x in grid[d][i:i + size]) != "." * size:
                i += 1
            grid[d][i] = (kind, j, c)
            if size == 2:
                grid[d][i + 1] = "#"
            slot_of[(kind, d, c)] = i
            cursor = i + size - 1
        return slot_of

    start = -1
    for first in range(0, m, p):
        slots = put(first, start)
        for d in range(p):
            for gap in list(range(1, p - d)):
                if grid[d][slots[("F", d, 1)] - gap] == ".":
                    grid[d][slots[("F", d, 1)] - gap] = "x"
            for gap in range(1, d + 1):
                if grid[d][slots[("B", d, v - 1)] - gap] == ".":
                    grid[d][slots[("B", d, v - 1)] - gap] = "x"
        for j in range(first + 1, min(first + p, m)):
            put(j, start)
        start = slots[("B", 0, 0)] + 1
    return [[x for x in row if isinstance(x, tuple)] for row in grid]


def all_orders(name, p, m, v):
    if name == "hanayo":
        return orders_hanayo(p, m, v)
    return [STATIC_ORDERS[name](p, m, v, d) for d in range(p)]


# ----------------------------------------------------------------------------- simulation


def event_simulation(name, p, m, v, tf, tb, tw, tc):
    """Discrete-event run of the fixed orders; returns (total, busy per device, ends)."""
    split = name.startswith("zb")
    orders = all_orders(name, p, m, v)
    last = p * v - 1

    def duration(kind, dev):
        if kind == "F":
            return tf[dev] / v
        if kind == "B":
            return (tb[dev] if split else tb[dev] + tw[dev]) / v
        return tw[dev] / v

    def needs(kind, j, s):
        """(op whose end feeds this op, its stage) or None."""
        if kind == "F":
            return None if s == 0 else ("F", j, s - 1)
        if kind == "B":
            return ("F", j, s) if s == last else ("B", j, s + 1)
        return ("B", j, s)

    owner = {}
    for d in range(p):
        for c in range(v):
            owner[stage_on(name, p, v, d, c)] = d
    arrived = {}  # op key -> time its input is on the consuming device
    nxt = [0] * p
    idle = [True] * p
    ends = {}
    events = []  # (time, sequence, kind of event, payload)
    seq = 0

    def push(time, what, payload):
        nonlocal seq
        heapq.heappush(events, (time, seq, what, payload))
        seq += 1

    def try_start(d, now):
        if not idle[d] or nxt[d] >= len(orders[d]):
            return
        kind, j, c = orders[d][nxt[d]]
        s = stage_on(name, p, v, d, c)
        key = (kind, j, s)
        if needs(*key) is not None and key not in arrived:
            return
        idle[d] = False
        push(now + duration(kind, d), "done", (d, key))

    for d in range(p):
        push(0.0, "free", d)
    while events:
        now, _, what, payload = heapq.heappop(events)
        if what == "free":
            try_start(payload, now)
        elif what == "done":
            d, key = payload
            ends[key] = now
            idle[d] = True
            nxt[d] += 1
            kind, j, s = key
            for consumer in consumers(kind, j, s, last, split):
                dest = owner[consumer[2]]
                push(now + (tc if dest != d else 0.0), "arrive", (dest, consumer))
            try_start(d, now)
        else:
            dest, key = payload
            arrived[key] = now
            try_start(dest, now)
    assert all(nxt[d] == len(orders[d]) for d in range(p)), "reference deadlocked"
    busy = [sum(duration(k, d) for k, _, _ in orders[d]) for d in range(p)]
    return max(ends.values()), busy, ends


def consumers(kind, j, s, last, split):
    if kind == "F":
        return [("F", j, s + 1)] if s < last else [("B", j, s)]
    if kind == "B":
        out = [("B", j, s - 1)] if s > 0 else []
        return out + ([("W", j, s)] if split else [])
    return []


# ----------------------------------------------------------------------------- the tests

CASES = [
    ("gpipe", 4, 6, 1),
    ("gpipe", 3, 2, 1),
    ("1f1b", 4, 8, 1),
    ("1f1b", 5, 3, 1),
    ("interleaved", 4, 8, 2),
    ("interleaved", 4, 6, 2),
    ("interleaved", 3, 7, 3),
    ("interleaved", 2, 4, 4),
    ("interleaved", 8, 12, 2),
    ("interleaved", 4, 9, 2),
    ("interleaved", 4, 2, 2),
    ("hanayo", 4, 8, 2),
    ("hanayo", 4, 4, 4),
    ("hanayo", 3, 5, 2),
    ("zb-h1", 4, 8, 1),
    ("zb-h1", 4, 3, 1),
    ("zb-h2", 4, 8, 1),
    ("zb-h2", 3, 4, 1),
    ("zb-v", 4, 8, 2),
    ("zb-v", 3, 4, 2),
]


@pytest.mark.parametrize("name,p,m,v", CASES)
def test_matches_event_simulation_on_random_uneven_inputs(name, p, m, v):
    rng = random.Random(hash((name, p, m, v)) % 2**32)
    n_sets = 4
    tf = [[rng.uniform(0.5, 2.0) for _ in range(p)] for _ in range(n_sets)]
    tb = [[rng.uniform(0.5, 3.0) for _ in range(p)] for _ in range(n_sets)]
    tw = [[rng.uniform(0.2, 2.0) for _ in range(p)] for _ in range(n_sets)]
    tc = [rng.uniform(0.05, 1.0) for _ in range(n_sets)]
    got = simulate(name, p, m, v, tf=tf, tb=tb, tw=tw, tc=tc, timeline=True)
    for i in range(n_sets):
        total, busy, ends = event_simulation(name, p, m, v, tf[i], tb[i], tw[i], tc[i])
        assert got.total_time[i] == pytest.approx(total, rel=1e-12)
        assert got.busy_time[i] == pytest.approx(busy, rel=1e-12)
        bubble = 1 - sum(busy) / (p * total)
        assert got.bubble_ratio[i] == pytest.approx(bubble, rel=1e-9, abs=1e-12)
        tl = got.timeline
        for k in range(len(tl.kind)):
            kind = "FBW"[tl.kind[k]]
            stage = stage_on(name, p, v, int(tl.device[k]), int(tl.chunk[k]))
            assert tl.end[i, k] == pytest.approx(ends[(kind, int(tl.micro[k]), stage)], rel=1e-12)


def test_scalar_and_per_set_inputs_agree_with_reference():
    # One call, T_C varying over the sets, per-device stage times shared: (D,) and (S,).
    p, m = 4, 8
    tf = np.array([1.3, 0.7, 1.1, 0.9])
    tcs = np.array([0.0, 0.1, 0.5, 2.0])
    got = simulate("1f1b", p, m, tf=tf, tb=2 * tf, tc=tcs)
    for i, tc in enumerate(tcs):
        total, _, _ = event_simulation("1f1b", p, m, 1, tf, 2 * tf, [0.0] * p, tc)
        assert got.total_time[i] == pytest.approx(total, rel=1e-12)


def test_random_configurations_match_event_simulation():
    # Seeded random (schedule, p, m, v) beyond the hand-picked cases above.
    rng = random.Random(2023)
    chunk_choices = {"interleaved": [1, 2, 3, 4], "hanayo": [2, 4], "zb-v": [2]}
    for _ in range(40):
        name = rng.choice(sorted(STATIC_ORDERS) + ["hanayo"])
        p, m = rng.randint(1, 6), rng.randint(1, 13)
        v = rng.choice(chunk_choices.get(name, [1]))
        tf = [rng.uniform(0.3, 2.0) for _ in range(p)]
        tb = [rng.uniform(0.3, 3.0) for _ in range(p)]
        tw = [rng.uniform(0.0, 2.0) for _ in range(p)]
        tc = rng.uniform(0.0, 1.5)
        got = simulate(name, p, m, v, tf=tf, tb=tb, tw=tw, tc=tc)
        total, busy, _ = event_simulation(name, p, m, v, tf, tb, tw, tc)
        assert got.total_time[0] == pytest.approx(total, rel=1e-12), (name, p, m, v)
        assert got.busy_time[0] == pytest.approx(busy, rel=1e-12)
