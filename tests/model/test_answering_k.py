"""The tables that answer at a k no calibration context could measure (``calibration.answering_k``)."""

from __future__ import annotations

import numpy as np

from airflow_provider_bellamy.model.calibration import (
    MAX_K,
    Calibration,
    FineTuning,
    _tables_per_k,
    answering_k,
    gaussian_sd,
    job_scales,
    max_confidence,
    residual_quantiles,
    table_scale,
)

SMALL_MAX = 1.0
MEASURED = 4  # k = 0..3 measured: contexts at four scale-outs cannot hold out k + 1 = 5


def _calibration(measured: int = MEASURED) -> Calibration:
    """Two job types' residuals, N(0, 0.1) and N(0, 0.3), at scale-outs 2..21 for k < ``measured``;
    none from there on (the calibration contexts ran at too few scale-outs)."""
    rng = np.random.default_rng(0)
    job_of = ["easy"] * 30 + ["hard"] * 30
    per_k = []
    for k in range(MAX_K + 1):
        if k >= measured:
            empty = np.zeros(0)
            per_k.append((empty, empty, np.zeros(0, dtype=int), empty))
            continue
        owner = np.repeat(np.arange(len(job_of)), 20)
        sd = np.where(np.array(job_of)[owner] == "hard", 0.3, 0.1) / (k + 1)
        r = rng.normal(0.0, 1.0, len(owner)) * sd
        at = np.tile(np.arange(2, 22, dtype=float), len(job_of))
        per_k.append((r, at, owner, np.full(len(r), np.inf)))
    scales = job_scales(per_k, job_of, SMALL_MAX)
    tables = _tables_per_k(per_k, [None] * len(job_of), SMALL_MAX, len(job_of), job_scales=scales)
    return Calibration(0.05, FineTuning(0.1), tables)


def test_a_k_no_context_could_hold_out_reads_the_last_measured_tables() -> None:
    """Tuned on more runs than calibration could hold out, the band reads the largest k that was
    measured (as beyond MAX_K), not the Gaussian that measured nothing (wider than any table on
    purpose: past the edges of a scale-out protocol it made that k's band 2.3-5.2× as wide in log)."""
    cal = _calibration()
    ns = np.array([2.0, 8.0, 20.0])
    assert answering_k(cal, MEASURED, None) == MEASURED - 1
    assert answering_k(cal, MAX_K + 3, None) == MEASURED - 1
    for job in (None, "easy", "hard"):
        last = residual_quantiles(cal, MEASURED - 1, 0.9, ns, job_type=job)
        for k in (MEASURED, MAX_K):
            lo, hi = residual_quantiles(cal, k, 0.9, ns, job_type=job)
            np.testing.assert_array_equal(lo, last[0])
            np.testing.assert_array_equal(hi, last[1])
            assert table_scale(cal, k, None, job) == table_scale(cal, MEASURED - 1, None, job)
        assert hi.max() < 0.9 * gaussian_sd(cal)  # (far narrower than the Gaussian's 1.28 sd)
    assert max_confidence(cal, MEASURED) == max_confidence(cal, MEASURED - 1) < 1.0


def test_a_measured_k_reads_its_own_tables_and_no_tables_still_read_the_gaussian() -> None:
    cal = _calibration()
    ns = np.array([2.0, 8.0])
    for k in range(MEASURED):
        assert answering_k(cal, k, None) == k
    # the k tables differ (their residuals shrink with k): each k reads its own
    assert residual_quantiles(cal, 1, 0.9, ns)[1][0] > residual_quantiles(cal, 2, 0.9, ns)[1][0]
    none = _calibration(measured=0)
    z = 1.2815515655446004
    lo, hi = residual_quantiles(none, 3, 0.9, ns)
    np.testing.assert_allclose(hi, z * gaussian_sd(none))
    np.testing.assert_allclose(lo, -z * gaussian_sd(none))
