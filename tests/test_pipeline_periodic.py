"""A long step's pipeline priced from a shorter run of its schedule (costmodel._pipeline.periodic_proxy,
steady_window; costmodel._pipeline_terms._extend_periodic): equal to simulating the whole graph, and to the closed
forms on uniform stages."""

import numpy as np
import pytest

from costmodel import _pipeline_terms as terms
from costmodel._pipeline import periodic_proxy, simulate, steady_window
from costmodel._strategy import SCHEDULES

CHUNKS = {"interleaved": 2, "zb-v": 2, "hanayo": 2}


def _priced(schedule, p, m, v, tf, tb, tw, tc, blocking=None):
    """simulate_pipelines' times of the sets (S, p) of one shape, and how many of them were extended."""
    S = tf.shape[0]
    seen = {}
    extend = terms._extend_periodic

    def spy(uniq, *args):
        left = extend(uniq, *args)
        seen["extended"] = seen.get("extended", 0) + len(uniq) - len(left)
        return left

    shape = np.tile([SCHEDULES.index(schedule), p, m, v], (S, 1))
    terms._CACHES.clear()
    try:
        terms._extend_periodic = spy
        total, _, _ = terms.simulate_pipelines(shape, np.zeros(S, dtype=bool), tf, tb, tw, tc, blocking=blocking)
    finally:
        terms._extend_periodic = extend
        terms._CACHES.clear()
    return total, seen.get("extended", 0)


@pytest.mark.parametrize("schedule", ["1f1b", "interleaved", "zb-h1", "zb-h2", "zb-v", "hanayo"])
def test_uniform_stages_give_the_closed_forms(schedule):
    # (m + p - 1) X for 1F1B, (m + (p - 1) / v) X interleaved (Narayanan et al. 2021 Sec. 2.2), m X + (p - 1)
    # (F + B - W) for ZB-H1 and m X + (p - 1)(F + B - 2W) for ZB-H2 (Qi et al. 2023), here with no hand-off time
    p, m, v = 4, 1024, CHUNKS.get(schedule, 1)
    F, Bk, W = 1.0, 1.5, (0.5 if schedule.startswith("zb") else 0.0)
    ones = np.ones((1, p))
    total, extended = _priced(schedule, p, m, v, F * ones, Bk * ones, W * ones, 0.0 * ones)
    assert extended == 1
    X = F + Bk + W
    want = {"1f1b": (m + p - 1) * X, "interleaved": (m + (p - 1) / v) * X, "zb-h1": m * X + (p - 1) * (F + Bk - W),
            "zb-h2": m * X + (p - 1) * max(F + Bk - 2 * W, 0.0)}.get(schedule)
    whole = simulate(schedule, p, m, v, tf=F * ones, tb=Bk * ones, tw=W * ones).total_time[0]
    assert total[0] == pytest.approx(whole, rel=1e-12)
    if want is not None:
        assert total[0] == pytest.approx(want, rel=1e-12)


@pytest.mark.parametrize("schedule", ["1f1b", "interleaved", "zb-h1", "zb-h2", "zb-v", "hanayo"])
def test_uneven_stages_and_hand_offs_equal_the_whole_graph(schedule):
    rng = np.random.default_rng(SCHEDULES.index(schedule))
    p, v, S = 4, CHUNKS.get(schedule, 1), 12
    m = 640 if schedule != "interleaved" else 642  # (642: groups of 6 micro-batches, not p)
    tf = rng.uniform(0.5, 1.5, (S, p))
    tb = tf * rng.uniform(1.5, 2.5, (S, p))
    tw = 0.4 * tb if schedule.startswith("zb") else np.zeros((S, p))
    tc = rng.choice([0.0, 0.02, 0.3], (S, 1)) * rng.uniform(0.5, 1.5, (S, p))
    total, extended = _priced(schedule, p, m, v, tf, tb, tw, tc)
    assert extended >= S // 2  # (sets whose times settle late are simulated whole; most settle)
    whole = simulate(schedule, p, m, v, tf=tf, tb=tb, tw=tw, tc=tc).total_time
    np.testing.assert_allclose(total, whole, rtol=1e-12)


def test_blocking_hand_offs_equal_the_whole_graph():
    rng = np.random.default_rng(7)
    p, m, S = 8, 700, 10
    tf = rng.uniform(0.5, 1.5, (S, p))
    tc = rng.uniform(0.01, 0.2, (S, p))
    total, extended = _priced("1f1b", p, m, 1, tf, 2 * tf, 0 * tf, tc, blocking=np.ones(S, dtype=np.int64))
    assert extended >= S // 2
    whole = simulate("1f1b", p, m, 1, tf=tf, tb=2 * tf, tc=tc, blocking=True).total_time
    np.testing.assert_allclose(total, whole, rtol=1e-12)


def test_a_run_still_settling_in_the_proxy_is_simulated_whole():
    # two stages nearly tied: the last stage falls behind the bottleneck only slowly, so the proxy's window has not
    # settled (its ops move by different amounts a period); those sets must not be extended, and still be exact
    p, m = 4, 300
    tf = np.array([[0.99609912, 1.38133514, 0.60830234, 1.37570053]])
    m_x, period = periodic_proxy("1f1b", p, m, 1)
    ids, later = steady_window("1f1b", p, m_x, 1, period)
    ends = simulate("1f1b", p, m_x, 1, tf=tf, tb=2 * tf, timeline=True).timeline.end[0]
    assert np.ptp(ends[later] - ends[ids]) > 1e-3  # not settled at m_x
    total, extended = _priced("1f1b", p, m, 1, tf, 2 * tf, 0 * tf, 0 * tf)
    assert extended == 0
    assert total[0] == pytest.approx(simulate("1f1b", p, m, 1, tf=tf, tb=2 * tf).total_time[0], rel=1e-15)


def test_proxies():
    assert periodic_proxy("gpipe", 4, 4096, 1) is None  # (two stretches, each with its own step)
    assert periodic_proxy("1f1b", 4, 100, 1) is None  # too short to pay
    m_x, period = periodic_proxy("1f1b", 4, 1001, 1)
    assert period == 4 and m_x % 4 == 1001 % 4 and m_x >= 4 * 4 + 6 * 4 and 2 * m_x <= 1001
    # 1002 micro-batches on 4 stages run in groups of 6 (1002 % 4 = 2 and 1002 % 5 = 2 leave a short last group,
    # 1002 % 6 = 0: interleave_group_size); m_x keeps those remainders (modulo 60), so it runs groups of 6 too
    m_x, period = periodic_proxy("interleaved", 4, 1002, 2)
    assert period == 6 and (m_x % 4, m_x % 5, m_x % 6) == (2, 2, 0) and 2 * m_x <= 1002


def test_a_long_steps_peaks_come_from_its_proxy():
    # 1F1B (PipeDream-Flush): stage i holds p - i micro-batches at its peak, whatever m; the interleaved and zero
    # bubble orders' peaks taken from the proxy equal those counted on the whole order
    from costmodel._pipeline import schedule_peaks

    ones = np.ones((1, 4))
    for schedule, v in (("1f1b", 1), ("interleaved", 2), ("zb-h2", 1), ("zb-v", 2)):
        shape = np.array([[SCHEDULES.index(schedule), 4, 1024, v]])
        _, row_shape, peaks = terms.simulate_pipelines(shape, np.zeros(1, dtype=bool), ones, 2 * ones, 0 * ones,
                                                       0 * ones)
        np.testing.assert_array_equal(peaks[row_shape[0], :4], schedule_peaks(schedule, 4, 1024, v))
        if schedule == "1f1b":
            np.testing.assert_array_equal(peaks[row_shape[0], :4], [4, 3, 2, 1])
