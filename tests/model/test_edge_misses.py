"""How far the guesses past an edge missed the training runs held out past their own edges, and
the band's growth that follows from it (``edge_misses``, ``edge_growth``)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from airflow_provider_bellamy.model import RuntimeModel
from airflow_provider_bellamy.model.edges import edge_growth, edge_misses

GRID = [1, 2, 4, 8, 16, 32]


def _rows(curve, levels=(1.0, 1.5, 2.0, 3.0)) -> list[list[float | None]]:
    return [[float(np.log(level * curve(float(n)))) for n in GRID] for level in levels]


def test_curves_that_follow_amdahl_past_their_edges_leave_no_miss() -> None:
    rows = _rows(lambda n: 20.0 + 400.0 / n)
    for side in (0, 1):
        got = edge_misses(GRID, rows, side)
        assert got is not None and len(got.octaves) == 4 * 2  # a third of six held out per context
        assert got.lower.max() <= 1e-9 and got.upper.max() <= 1e-9
        assert edge_growth(got.lower, got.octaves, np.array([1.0, 2.0]), 0.9).max() < 1e-9
        assert edge_growth(got.upper, got.octaves, np.array([1.0, 2.0]), 0.9).max() < 1e-9
    # held out at 16 and 32 beyond the edge 8 (one and two octaves), at 1 and 2 below the edge 4
    np.testing.assert_allclose(np.sort(np.unique(edge_misses(GRID, rows, 1).octaves)), [1.0, 2.0])
    np.testing.assert_allclose(np.sort(np.unique(edge_misses(GRID, rows, 0).octaves)), [1.0, 2.0])


def test_curves_that_bend_past_their_edges_give_a_growth_on_that_side() -> None:
    """A spill at the smallest scale-outs (x1.8 at 1 and 2 nodes) lies over every guess below the
    edge; a cost that grows fast with the cluster (n^2) over every guess beyond it."""
    spill = _rows(lambda n: (20.0 + 400.0 / n) * (1.8 if n <= 2 else 1.0))
    below = edge_misses(GRID, spill, 0)
    assert below is not None and below.upper.min() > 0.3
    growth = edge_growth(below.upper, below.octaves, np.array([0.0, 1.0, 2.0]), 0.9)
    assert growth[0] == 0.0 and growth[1] > 0.3
    np.testing.assert_allclose(growth[2], 2 * growth[1])  # the rate per octave, times the distance
    assert edge_growth(below.lower, below.octaves, np.array([1.0]), 0.9)[0] < 1e-9
    rising = _rows(lambda n: 20.0 + 400.0 / n + 0.05 * n**2)
    beyond = edge_misses(GRID, rising, 1)
    assert beyond is not None and beyond.upper.max() > 0.1
    assert edge_growth(beyond.upper, beyond.octaves, np.array([1.0]), 0.9)[0] > 0.1
    # the mirror sides saw nothing of it
    assert edge_misses(GRID, spill, 1).upper.max() <= 1e-9


def test_the_growth_is_the_conformal_quantile_of_the_misses_per_octave() -> None:
    misses = np.array([0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0])
    octaves = np.full(10, 2.0)
    # ⌈11 × 0.5⌉ / 10 = 0.6: the sixth of the ten rates (0.05 ... 0.5 per octave)
    assert edge_growth(misses, octaves, np.array([1.0]), 0.5)[0] == pytest.approx(0.3)
    # above 10 / 11 the largest
    assert edge_growth(misses, octaves, np.array([1.0]), 0.95)[0] == pytest.approx(0.5)
    assert not edge_growth(np.array([]), np.array([]), np.array([1.0]), 0.9).any()


def test_contexts_with_fewer_than_three_scale_outs_hold_nothing_out() -> None:
    rows = [[1.0, 0.5, None, None, None, None], [None, None, None, None, 2.0, 1.5]]
    assert edge_misses(GRID, rows, 0) is None and edge_misses(GRID, rows, 1) is None


@pytest.fixture(scope="module")
def grep_small() -> RuntimeModel:
    from airflow_provider_bellamy.benchmarks.common import with_context_ids
    from airflow_provider_bellamy.datasets import load_traces

    from .conftest import FAST

    runs = with_context_ids(load_traces("c3o", "grep"))
    train = runs[runs["scale_out"] <= 6].drop(columns=["context_id"])
    return RuntimeModel.pretrain(train, seed=0, config=FAST)


def _with_curves(model: RuntimeModel, bend: float) -> RuntimeModel:
    """The model with its training contexts' runs at the largest of their scale-outs ``bend`` (log)
    higher than measured: curves that turn up at their end."""
    curves = model.metadata["curves"]
    contexts = []
    for entry in curves["contexts"]:
        values = list(entry["log_runtime"])
        last = max(i for i, v in enumerate(values) if v is not None)
        values[last] = values[last] + bend
        contexts.append({**entry, "log_runtime": values})
    metadata = {**model.metadata, "curves": {"scale_outs": curves["scale_outs"], "contexts": contexts}}
    return RuntimeModel(model.params, model.architecture, model.schema, metadata, model.calibration)


def test_a_band_beyond_the_edge_is_wider_where_the_training_curves_bend_and_unchanged_inside(
    grep_small: RuntimeModel,
) -> None:
    runs = load_grep_context()
    straight, bent = _with_curves(grep_small, 0.0), _with_curves(grep_small, 0.5)
    beyond = [8, 10, 12]
    flat, turned = straight.band(runs, beyond), bent.band(runs, beyond)
    assert flat.beyond == 6 and turned.beyond == 6
    np.testing.assert_array_equal(flat.mean, turned.mean)  # the prediction is the same
    assert np.all(turned.upper > flat.upper)
    assert np.all(np.diff(np.log(turned.upper / flat.upper)) > 0)  # and grows with the distance
    # inside the known range the band is the model's, bit for bit, whatever the tables say
    for model in (straight, bent):
        inside = model.band(runs, [2, 4, 6])
        original = grep_small.band(runs, [2, 4, 6])
        np.testing.assert_array_equal(inside.lower, original.lower)
        np.testing.assert_array_equal(inside.upper, original.upper)
        np.testing.assert_array_equal(inside.mean, original.mean)


def load_grep_context() -> dict[str, object]:
    from airflow_provider_bellamy.datasets import load_traces

    runs: pd.DataFrame = load_traces("c3o", "grep")
    return runs.drop(columns=["runtime_s", "scale_out"]).iloc[0].to_dict()
