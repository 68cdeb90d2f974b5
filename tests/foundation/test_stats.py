"""vlajax.shared.stats.percentile_bootstrap: the interval of a statistic over a few runs."""

import numpy as np
import pytest

from vlajax.shared.stats import percentile_bootstrap


def test_median_interval_spans_observed_values_and_widens_with_spread():
    v = [1.0, 1.2, 0.9, 1.5, 1.1]
    med, lo, hi = percentile_bootstrap(v, np.median)
    assert med == 1.1 and min(v) <= lo <= med <= hi <= max(v) and lo < hi
    assert percentile_bootstrap([2.0] * 5, np.median) == (2.0, 2.0, 2.0)
    assert percentile_bootstrap(v, np.median) == (med, lo, hi)  # a seeded generator
    _, lo2, hi2 = percentile_bootstrap([0.5, 1.2, 0.9, 2.5, 1.1], np.median)
    assert hi2 - lo2 > hi - lo


def test_mean_interval_is_a_by_hand_percentile_bootstrap():
    v = np.asarray([0.1, 0.25, 0.3, 0.4, 0.55])
    mean, lo, hi = percentile_bootstrap(v, resamples=2000, confidence=0.9, seed=7)
    draws = np.random.default_rng(7).choice(v, size=(2000, 5), replace=True).mean(1)
    assert mean == pytest.approx(v.mean())
    assert (lo, hi) == pytest.approx((np.quantile(draws, 0.05), np.quantile(draws, 0.95)), rel=1e-12)
    assert percentile_bootstrap([-0.05, -0.01, -0.1, -0.0125, -0.2])[2] < 0  # all negative: interval below 0
    assert percentile_bootstrap([0.4]) == (0.4, 0.4, 0.4)


@pytest.mark.parametrize("bad", [[], [[1.0, 2.0]]])
def test_refuses_empty_or_nested_values(bad):
    with pytest.raises(ValueError, match="non-empty 1-d"):
        percentile_bootstrap(bad)
