"""costmodel._feasibility's float divisibility helpers against Python's integer arithmetic, by brute force."""

import numpy as np

from costmodel._feasibility import divides, whole_quotient


def test_divides_and_whole_quotient_match_integer_arithmetic():
    m = np.arange(1, 100_001)
    for p in (1, 2, 3, 4, 5, 6, 7, 8, 12, 16, 24, 32, 48, 64, 96, 128, 1000, 99_991):
        pp = np.full(m.shape, p)
        assert np.array_equal(divides(pp, m), m % p == 0), p
        assert np.array_equal(whole_quotient(m, pp), m // p), p


def test_large_operands_near_a_multiple():
    # p = 3, m one below and one above a multiple near 2**50: the quotient 1/3 from an integer
    k = 2**50 // 3
    m = np.array([3 * k - 1, 3 * k, 3 * k + 1], dtype=np.int64)
    assert divides(np.full(3, 3), m).tolist() == [False, True, False]
    assert whole_quotient(m, np.full(3, 3)).tolist() == [k - 1, k, k]
