"""The nearest training contexts' curves carried to a context on a machine type the model never saw,
by scale-out and by data per node memory, weighed by their fit to the context's runs (issue 17)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

import airflow_provider_bellamy.model.runtime_model as runtime_model
from airflow_provider_bellamy.benchmarks.common import with_context_ids
from airflow_provider_bellamy.datasets import load_traces
from airflow_provider_bellamy.model import RuntimeModel
from airflow_provider_bellamy.model.band import own_miss
from airflow_provider_bellamy.model.finetuning import (
    combine_nearest,
    nearest_curve,
    nearest_log_runtime,
    superlinear_rise,
)

from .conftest import FAST

GRID = [2, 4, 6, 8, 10, 12]


def _spilling(data_per_node_memory: float) -> list[float]:
    """log runtime of a job whose input per node's memory above 0.2 spills (10× slower)."""
    return [float(np.log(100.0 / n * (10.0 if data_per_node_memory / n > 0.2 else 1.0))) for n in GRID]


def _curves(*contexts: dict[str, object]) -> list[dict[str, object]]:
    return [
        {"context": c, "log_runtime": _spilling(float(c["data_per_node_memory"]))}  # type: ignore[arg-type]
        for c in contexts
    ]


def test_a_cliff_carried_by_data_per_node_memory_moves_with_the_memory() -> None:
    """Trained on nodes with half the memory, the job spills at 2 nodes; on the context's nodes
    with twice the memory it does not: the aligned curve has no cliff at 2 nodes, the curve by
    scale-out does."""
    trained = {"job_type": "kmeans", "k": 3.0, "data_per_node_memory": 0.5}
    context = {"job_type": "kmeans", "k": 3.0, "data_per_node_memory": 0.25}
    by_scale_out = nearest_curve(context, _curves(trained), GRID, ["k"])
    aligned = nearest_curve(context, _curves(trained), GRID, ["k"], "data_per_node_memory")
    assert by_scale_out is not None and aligned is not None
    np.testing.assert_allclose(by_scale_out[0], np.log(GRID))
    # at n the context stands where the trained one stood at 2n: 1..6 nodes
    np.testing.assert_allclose(aligned[0], np.log(GRID) - np.log(2))
    at_2 = lambda curve: float(np.interp(np.log(2), *curve))  # noqa: E731
    assert at_2(by_scale_out) == pytest.approx(np.log(500))  # the cliff
    assert at_2(aligned) == pytest.approx(np.log(25))  # 4 nodes of the trained one: no cliff
    # what the context does not give cannot align it (nor a training context lacking it)
    assert (
        nearest_curve({"job_type": "kmeans", "k": 3.0}, _curves(trained), GRID, ["k"], "data_per_node_memory")
        is None
    )


def test_aligned_curves_of_several_contexts_meet_where_all_of_them_measured() -> None:
    near = {"job_type": "sgd", "data_per_node_memory": 0.5}
    other = {"job_type": "sgd", "data_per_node_memory": 1.0}
    context = {"job_type": "sgd", "data_per_node_memory": 0.25}
    log_n, log_runtime = nearest_curve(context, _curves(near, other), GRID, [], "data_per_node_memory")  # type: ignore[misc]
    # near covers 1..6 nodes of the context, other 0.5..3: their overlap, 1..3
    assert log_n[0] == pytest.approx(0.0) and log_n[-1] == pytest.approx(np.log(3))
    assert np.all(np.diff(log_n) > 0) and np.all(np.isfinite(log_runtime))
    # no overlap of two points: no curve
    far = {"job_type": "sgd", "data_per_node_memory": 6.0}
    assert nearest_curve(context, _curves(near, far), GRID, [], "data_per_node_memory") is None


def _line(slope: float) -> tuple[np.ndarray, np.ndarray]:
    log_n = np.log(np.array(GRID, dtype=float))
    return log_n, 5.0 + slope * log_n


def _flat(scale_outs: np.ndarray) -> np.ndarray:
    return np.zeros(len(np.asarray(scale_outs)))


def test_the_runs_choose_the_candidate_whose_shape_they_follow() -> None:
    steep, shallow = _line(-1.0), _line(-0.3)
    ns = np.array([2.0, 8.0])
    log_y = 3.0 - 1.0 * np.log(ns)  # the steep shape, at another level
    log_n, combined = combine_nearest([shallow, steep], _flat, ns, log_y, noise_sd=0.1)
    np.testing.assert_allclose(log_n, steep[0])
    np.testing.assert_allclose(combined, 3.0 - 1.0 * log_n, atol=1e-9)


def test_one_run_says_nothing_of_the_shape_and_both_candidates_count_alike() -> None:
    steep, shallow = _line(-1.0), _line(-0.3)
    ns, log_y = np.array([4.0]), np.array([2.0])
    log_n, combined = combine_nearest([shallow, steep], _flat, ns, log_y, noise_sd=0.1)
    expected = 2.0 - 0.65 * (log_n - np.log(4.0))
    np.testing.assert_allclose(combined, expected, atol=1e-9)
    assert float(np.interp(np.log(4.0), log_n, combined)) == pytest.approx(2.0)  # the run's level


@pytest.fixture(scope="module")
def sgd() -> pd.DataFrame:
    runs = with_context_ids(load_traces())
    return runs[(runs["dataset"] == "c3o") & (runs["job_type"] == "sgd")]


def test_sgd_on_a_machine_type_with_twice_the_memory_is_predicted_better_aligned_by_memory(
    sgd: pd.DataFrame, monkeypatch: pytest.MonkeyPatch
) -> None:
    """C3O sgd pre-trained on m4.2xlarge and r4.xlarge (32 and 30.5 GB per node), each context on
    r4.2xlarge (61 GB) fine-tuned on its runs at 4 and 8 nodes: the scale-outs left out are
    predicted better with the curves carried by data per node memory among the candidates than by
    scale-out alone."""
    held = sgd["machine_type"] == "r4.2xlarge"
    model = RuntimeModel.pretrain(sgd[~held].drop(columns=["context_id"]), seed=0, config=FAST)
    errors: dict[str, list[float]] = {"by scale-out": [], "both": []}
    for _, runs in sgd[held].groupby("context_id"):
        runs = runs.drop(columns=["context_id"])
        points = runs[runs["scale_out"].isin([4, 8])].drop_duplicates("scale_out")
        test = runs[~runs["scale_out"].isin([4, 8])]
        ctx = runs.iloc[0].to_dict()
        for name, alignments in (("by scale-out", (None,)), ("both", (None, "data_per_node_memory"))):
            monkeypatch.setattr(runtime_model, "ALIGNMENTS", alignments)
            predicted = model.finetune(points).predict(ctx, test["scale_out"].tolist())
            errors[name].extend(np.abs(predicted / test["runtime_s"].to_numpy() - 1))
    assert np.mean(errors["both"]) < 0.8 * np.mean(errors["by scale-out"]), {
        k: np.mean(v) for k, v in errors.items()
    }


def test_a_context_the_model_knows_has_no_nearest_curve(
    grep_model: RuntimeModel, grep_runs: pd.DataFrame, held_out_context: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A context inside the training data is fine-tuned as before: the nearest curves (and their
    alignment) never enter."""
    runs = grep_runs[grep_runs["context_id"] == held_out_context].drop(columns=["context_id"])
    points, ctx = runs.iloc[[0, 7]], runs.iloc[0].to_dict()
    tuned = grep_model.finetune(points)
    assert tuned.tuned is not None and tuned.tuned.nearest is None
    monkeypatch.setattr(runtime_model, "ALIGNMENTS", (None,))
    np.testing.assert_array_equal(
        tuned.predict(ctx, [2, 4, 8, 12]), grep_model.finetune(points).predict(ctx, [2, 4, 8, 12])
    )


def test_a_run_in_a_cliff_the_candidates_disagree_on_does_not_shift_the_level() -> None:
    """One candidate spills at 2 nodes (10×), the other does not; the context's run at 2 nodes is
    3× its run at 8 × 4: neither shape. Its level comes from the run at 8, where both candidates
    agree, not from half-way between the two runs."""
    log_n = np.log(np.array(GRID, dtype=float))
    plain = 5.0 - log_n
    cliff = plain + np.where(log_n < np.log(3), np.log(10.0), 0.0)
    ns = np.array([2.0, 8.0])
    log_y = np.array([np.log(3.0) + 2.0 - np.log(2.0), 2.0 - np.log(8.0)])
    at, combined = combine_nearest([(log_n, plain), (log_n, cliff)], _flat, ns, log_y, noise_sd=0.1)
    at_8 = float(np.interp(np.log(8.0), at, combined))
    assert at_8 == pytest.approx(log_y[1], abs=0.05)


def test_superlinear_rise_is_how_far_a_curve_falls_faster_than_linearly_over_a_doubling() -> None:
    """A job scaling linearly rises 0 anywhere; one spilling 10× below 3 nodes rises log 10 - log 2
    ... above linear from 2 to 4 nodes, nothing from 4 on; a scale-out whose double lies beyond the
    curve gets 0 (nothing measured there)."""
    log_n = np.log(np.array(GRID, dtype=float))
    plain = 5.0 - log_n
    cliff = plain + np.where(log_n < np.log(3), np.log(10.0), 0.0)
    at = np.array([2.0, 4.0, 6.0, 8.0])
    np.testing.assert_allclose(superlinear_rise(log_n, plain, at), 0.0, atol=1e-12)
    np.testing.assert_allclose(superlinear_rise(log_n, cliff, at), [np.log(10.0), 0.0, 0.0, 0.0], atol=1e-12)
    # a curve flatter than linear (overheads) never rises
    np.testing.assert_allclose(superlinear_rise(log_n, 5.0 - 0.5 * log_n, at), 0.0, atol=1e-12)


def test_a_run_in_a_cliff_both_candidates_have_sets_its_depth_not_the_level() -> None:
    """Both candidates spill at 2 nodes (2.5× above linear); the context's cliff is 8× above
    linear: how deep a cliff is belongs to the context (its input, its k). The level comes from
    the run at 8 nodes outside the cliff, so the curve from 4 nodes on is the candidates' shape
    through that run, not shifted up half-way to the cliff."""
    log_n = np.log(np.array(GRID, dtype=float))
    cliff = 5.0 - log_n + np.where(log_n < np.log(3), np.log(2.5), 0.0)
    ns = np.array([2.0, 8.0])
    log_y = np.array([np.log(8.0) + 2.0 - np.log(2.0), 2.0 - np.log(8.0)])
    at, combined = combine_nearest([(log_n, cliff), (log_n, cliff + 0.01)], _flat, ns, log_y, noise_sd=0.1)
    beyond = at >= np.log(4.0) - 1e-9
    np.testing.assert_allclose(combined[beyond], 2.0 - at[beyond], atol=0.01)


def test_runs_all_in_a_cliff_still_set_the_level() -> None:
    """Where every run stands in a candidate's cliff there is no other level to take: theirs."""
    log_n = np.log(np.array(GRID, dtype=float))
    cliff = 5.0 - log_n + np.where(log_n < np.log(3), np.log(2.5), 0.0)
    ns, log_y = np.array([2.0]), np.array([1.0])
    at, combined = combine_nearest([(log_n, cliff), (log_n, cliff)], _flat, ns, log_y, noise_sd=0.1)
    assert float(np.interp(np.log(2.0), at, combined)) == pytest.approx(1.0)


def test_a_single_candidate_takes_its_runs_level_and_a_run_in_its_cliff_sets_none() -> None:
    """A context for which one alignment finds a curve (no memory or input size to carry a cliff
    by) goes through the same rule as two: the candidate moved by its runs' mean residual, except
    a run in the candidate's cliff, whose height is the context's own."""
    log_n = np.log(np.array(GRID, dtype=float))
    cliff = 5.0 - log_n + np.where(log_n < np.log(3), np.log(2.5), 0.0)
    # (runs less than a doubling apart: their split of serial and parallel work is the candidate's,
    # ``amdahl_refit``)
    ns = np.array([4.0, 6.0])
    log_y = np.interp(np.log(ns), log_n, cliff) + np.array([0.3, 0.5])
    at, combined = combine_nearest([(log_n, cliff)], _flat, ns, log_y, noise_sd=0.1)
    np.testing.assert_allclose(combined, cliff + 0.4)
    ns = np.array([2.0, 8.0])
    log_y = np.array([np.log(8.0) + 2.0 - np.log(2.0), 2.0 - np.log(8.0)])
    at, combined = combine_nearest([(log_n, cliff)], _flat, ns, log_y, noise_sd=0.1)
    beyond = at >= np.log(4.0) - 1e-9
    np.testing.assert_allclose(combined[beyond], 2.0 - at[beyond], atol=1e-9)


@pytest.fixture(scope="module")
def sgd_model(sgd: pd.DataFrame) -> RuntimeModel:
    """C3O sgd pre-trained without r4.2xlarge (a machine type it then reads as unknown)."""
    held = sgd["machine_type"] == "r4.2xlarge"
    return RuntimeModel.pretrain(sgd[~held].drop(columns=["context_id"]), seed=0, config=FAST)


def test_below_its_smallest_run_a_context_follows_the_nearest_curves_shape(
    sgd: pd.DataFrame, sgd_model: RuntimeModel
) -> None:
    """An sgd context on r4.2xlarge tuned at 6 and 10 nodes: from 6 nodes on the prediction
    follows the blend of the network's curve and the nearest curve as before; below 6 it follows
    the nearest curve's shape (which the runs weighed), continuous at 6, not the network's (the
    training contexts' shape at those scale-outs once more). The band still spans the blend."""
    held = sgd[sgd["machine_type"] == "r4.2xlarge"]
    runs = held[held["context_id"] == sorted(held["context_id"].unique())[0]].drop(columns=["context_id"])
    points = runs[runs["scale_out"].isin([6, 10])].drop_duplicates("scale_out")
    tuned = sgd_model.finetune(points)
    part = tuned.tuned
    assert part is not None and part.nearest is not None
    ctx = tuned._normalise(runs.iloc[0].to_dict())
    ns = np.arange(2, 13)
    network = tuned._network_log(ctx, ns.astype(float))
    blend, shaped = tuned._nearest_blend(ctx, part.nearest, part.observed_scale_outs, ns, network)
    at_6, below = ns == 6, ns < 6
    np.testing.assert_array_equal(shaped[~below], blend[~below])
    log_n, log_runtime = np.asarray(part.nearest.log_n), np.asarray(part.nearest.log_runtime)
    near = nearest_log_runtime(
        log_n, log_runtime, network, tuned._network_log(ctx, np.exp(log_n[[0, -1]])), ns
    )
    np.testing.assert_allclose(shaped[below] - shaped[at_6], near[below] - near[at_6], atol=1e-12)
    # the network's shape below the runs is another one (or the test would say nothing)
    assert np.max(np.abs((blend - blend[at_6]) - (shaped - shaped[at_6]))[below]) > 0.01
    band = tuned.band(runs.iloc[0].to_dict(), ns.tolist())
    assert np.all(band.lower <= np.exp(blend)) and np.all(np.exp(blend) <= band.upper)
    np.testing.assert_allclose(
        np.log(band.mean),
        tuned._log_curves(ctx, ns)[1],
    )


def test_the_level_comes_from_where_the_candidates_agree_at_the_runs_own_noise() -> None:
    """Two candidates a little apart at 2 nodes (0.3 in log, no cliff), in step from 4 on; the
    context's runs at 2 and 8 nodes. Fine-tuning's likelihood width (0.4: a job pre-trained on two
    contexts, whose network missed by that much out of fold) is no measure of how far a run
    scatters; at the runs' own noise (0.03) the run at 2, where the candidates disagree, says
    little of the level: the curve from 4 on goes through the run at 8 nodes."""
    log_n = np.log(np.array(GRID, dtype=float))
    one = 5.0 - 0.8 * log_n
    other = one + np.where(log_n < np.log(3), 0.3, 0.0)
    ns = np.array([2.0, 8.0])
    log_y = np.array([5.0 - 0.8 * np.log(2.0) + 0.45, 4.7 - 0.8 * np.log(8.0)])
    beyond = None
    misses = {}
    for run_sd in (None, 0.03):
        at, combined = combine_nearest(
            [(log_n, one), (log_n, other)], _flat, ns, log_y, noise_sd=0.4, run_sd=run_sd
        )
        misses[run_sd] = float(np.interp(np.log(8.0), at, combined)) - log_y[1]
        beyond = at >= np.log(4.0) - 1e-9
        if run_sd is not None:
            np.testing.assert_allclose(combined[beyond], 4.7 - 0.8 * at[beyond], atol=0.02)
    assert beyond is not None
    # at the likelihood width the run at 2 pulled the level up by a good part of its misfit
    assert misses[None] > 0.1 > abs(misses[0.03])


def test_runs_at_one_scale_out_of_an_unseen_machine_type_are_met_by_the_whole_blend(
    sgd: pd.DataFrame, sgd_model: RuntimeModel, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One run of an sgd context on r4.2xlarge (a machine type the model never saw) says its level.
    The nearest curve meets it; the tuned network's share of the blend did not (fine-tuning's
    likelihood width holds the network's out-of-fold misfit, and no residual correction comes
    from one scale-out), so the prediction at the run's own scale-out missed it by a quarter of
    the network's miss. Now the network's share is offset to the run as well: the prediction
    there is the run. Not at 2 nodes, where the nearest curve spills: a run there says how deep
    the cliff is, and the network keeps its level. From two scale-outs on the curve is as before."""
    held = sgd[sgd["machine_type"] == "r4.2xlarge"]
    runs = held[held["context_id"] == sorted(held["context_id"].unique())[0]].drop(columns=["context_id"])
    ctx = runs.iloc[0].to_dict()
    network_misses = []
    for n in (2, 6, 12):
        run = runs[runs["scale_out"] == n].iloc[:1]
        tuned = sgd_model.finetune(run)
        part = tuned.tuned
        assert part is not None and part.nearest is not None
        normalised = tuned._normalise(ctx)
        observed = float(run["runtime_s"].iloc[0])
        network = tuned._network_log(normalised, np.array([float(n)]))[0]
        spills = superlinear_rise(np.asarray(part.nearest.log_n), np.asarray(part.nearest.log_runtime), [n])[
            0
        ]
        if n == 2:
            assert spills > tuned._likelihood_sd  # the case the rule leaves alone
            blend = tuned._nearest_blend(normalised, part.nearest, (n,), np.array([n]), np.array([network]))[
                0
            ]
            near = np.interp(np.log(n), part.nearest.log_n, part.nearest.log_runtime)
            expected = (1 - part.nearest.weight) * network + part.nearest.weight * near
            assert float(blend[0]) == pytest.approx(float(expected), abs=1e-12)
            continue
        assert spills <= tuned._likelihood_sd
        assert float(tuned.predict(ctx, [n])[0]) == pytest.approx(observed, rel=1e-9)
        network_misses.append(abs(network - np.log(observed)))
        # nor does the band add a miss at its own run
        assert own_miss(tuned, normalised) == pytest.approx((0.0, 0.0), abs=1e-9)
    # the network alone does miss (or the test would say nothing)
    assert max(network_misses) > 0.02
    points = runs[runs["scale_out"].isin([4, 10])].drop_duplicates("scale_out")
    before = sgd_model.finetune(points).predict(ctx, [2, 6, 8, 12])
    monkeypatch.setattr(RuntimeModel, "_one_scale_out_level", lambda *args: 0.0)
    np.testing.assert_array_equal(sgd_model.finetune(points).predict(ctx, [2, 6, 8, 12]), before)


def _amdahl(
    serial: float, parallel: float, excess: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """(log scale-outs, log runtime) of serial + parallel / n on GRID, times ``excess``."""
    n = np.array(GRID, dtype=float)
    return np.log(n), np.log(serial + parallel / n) + (0.0 if excess is None else np.log(excess))


def test_runs_a_doubling_apart_refit_the_split_of_serial_and_parallel_work() -> None:
    """The training contexts wrote most of their output serially (C3O's grep at p_occurrence 0.5);
    the context writes none (0): its runs fall faster, and below and above them it keeps doing so.
    The candidate's excess over its own split (a cliff at 2 nodes) is kept."""
    cliff = np.array([1.3, 1.0, 1.0, 1.0, 1.0, 1.0])
    log_n, candidate = _amdahl(60.0, 120.0, cliff)
    truth = _amdahl(10.0, 240.0, cliff)[1]
    ns = np.array([4.0, 10.0])
    log_y = np.interp(np.log(ns), log_n, truth)
    at, combined = combine_nearest([(log_n, candidate)], _flat, ns, log_y, noise_sd=0.3, run_sd=0.03)
    np.testing.assert_allclose(at, log_n)
    _, kept = combine_nearest(
        [(log_n, candidate)], _flat, ns, log_y, noise_sd=0.3, run_sd=0.03, refit_split=False
    )
    # the candidate's split, through the runs: 40-45 % off at 2 and 12 nodes; re-fitted, ≤ 6 %
    assert np.min(np.abs(kept - truth)[[0, -1]]) > 0.18
    np.testing.assert_allclose(combined, truth, atol=0.06)
    np.testing.assert_allclose(combined[1:], truth[1:], atol=0.02)
    # the runs' own shape: nothing to re-fit
    _, same = combine_nearest([(log_n, truth)], _flat, ns, log_y, noise_sd=0.3, run_sd=0.03)
    np.testing.assert_allclose(same, truth, atol=1e-9)


def test_runs_closer_than_a_doubling_or_within_their_noise_keep_the_candidates_split() -> None:
    log_n, candidate = _amdahl(60.0, 120.0)
    truth = _amdahl(10.0, 240.0)[1]
    for ns in (np.array([10.0, 12.0]), np.array([8.0, 12.0])):
        log_y = np.interp(np.log(ns), log_n, truth)
        _, combined = combine_nearest([(log_n, candidate)], _flat, ns, log_y, noise_sd=0.3, run_sd=0.03)
        level = float(np.mean(log_y - np.interp(np.log(ns), log_n, candidate)))
        np.testing.assert_allclose(combined, candidate + level, atol=1e-9)
    # a doubling apart but within the runs' noise of the candidate's shape: kept (nearly) as it is
    ns = np.array([4.0, 8.0])
    log_y = np.interp(np.log(ns), log_n, candidate) + np.array([0.02, -0.02])
    _, combined = combine_nearest([(log_n, candidate)], _flat, ns, log_y, noise_sd=0.3, run_sd=0.03)
    level = float(np.mean(log_y - np.interp(np.log(ns), log_n, candidate)))
    assert np.max(np.abs(combined - (candidate + level))) < 0.03
