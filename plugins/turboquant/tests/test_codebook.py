"""Lloyd-Max codebooks against the published Gaussian tables (Max 1960, table 1)."""

from __future__ import annotations

import math

import pytest
from kvcore_turboquant.codebook import gaussian_codebook, lloyd_max_standard_normal

# Max (1960), "Quantizing for minimum distortion", table 1: positive centroids, MSE
MAX_1960 = {
    1: ([0.7979], 0.3634),
    2: ([0.4528, 1.510], 0.1175),
    3: ([0.2451, 0.7560, 1.344, 2.152], 0.03454),
    4: ([0.1284, 0.3881, 0.6568, 0.9424, 1.256, 1.618, 2.069, 2.733], 0.009497),
}


@pytest.mark.parametrize("bits", [1, 2, 3, 4])
def test_matches_max_1960(bits):
    cb = lloyd_max_standard_normal(bits)
    centroids, mse = MAX_1960[bits]
    n = 1 << bits
    assert len(cb.centroids) == n and len(cb.boundaries) == n - 1
    assert cb.centroids[n // 2:] == pytest.approx(centroids, abs=1.5e-3)
    assert cb.mse == pytest.approx(mse, rel=1e-3)
    # symmetric, sorted, boundaries at midpoints
    assert cb.centroids == pytest.approx([-c for c in reversed(cb.centroids)], abs=1e-12)
    assert list(cb.centroids) == sorted(cb.centroids)
    for k, b in enumerate(cb.boundaries):
        assert b == pytest.approx((cb.centroids[k] + cb.centroids[k + 1]) / 2)


def test_cached_and_scaled():
    assert lloyd_max_standard_normal(3) is lloyd_max_standard_normal(3)
    cb = gaussian_codebook(2, 128)
    assert cb.centroids[-1] == pytest.approx(1.510 / math.sqrt(128), rel=1e-3)
    assert cb.mse == pytest.approx(0.1175 / 128, rel=1e-3)


def test_rejects_bad_bits():
    with pytest.raises(ValueError):
        lloyd_max_standard_normal(0)
    with pytest.raises(ValueError):
        gaussian_codebook(2, 0)
