from __future__ import annotations

import copy
from dataclasses import replace

import numpy as np
import pandas as pd
import pytest

from airflow_provider_bellamy.benchmarks.common import draw_points, with_context_ids
from airflow_provider_bellamy.datasets import load_traces
from airflow_provider_bellamy.exceptions import InvalidInputError, ModelFileError, UnknownJobTypeError
from airflow_provider_bellamy.model import ErnestModel, RuntimeModel, TrainingConfig

from .conftest import FAST


def _context(runs: pd.DataFrame) -> dict[str, object]:
    return runs.drop(columns=["context_id"]).iloc[0].to_dict()


def test_finetuned_error_beats_ernest_on_the_same_points(
    grep_model: RuntimeModel, grep_runs: pd.DataFrame, held_out_context: str
) -> None:
    ctx_runs = grep_runs[grep_runs["context_id"] == held_out_context]
    rng = np.random.default_rng(7)
    bellamy_err, ernest_err = [], []
    for k in (2, 3):
        points, test = draw_points(ctx_runs, k, rng)
        tuned = grep_model.finetune(points.drop(columns=["context_id"]))
        actual = test["runtime_s"].to_numpy()
        pred = tuned.predict(_context(ctx_runs), test["scale_out"].tolist())
        bellamy_err.append(np.mean(np.abs(pred - actual) / actual))
        ernest = ErnestModel.fit_points(
            points["scale_out"], points["runtime_s"], float(points["data_size_mb"].iloc[0])
        )
        ern = ernest.predict(None, test["scale_out"].tolist())
        ernest_err.append(np.mean(np.abs(ern - actual) / actual))
    assert np.mean(bellamy_err) < np.mean(ernest_err)
    assert np.mean(bellamy_err) < 0.15


def test_finetune_returns_new_object_and_leaves_general_unchanged(
    grep_model: RuntimeModel, grep_runs: pd.DataFrame, held_out_context: str
) -> None:
    ctx_runs = grep_runs[grep_runs["context_id"] == held_out_context].drop(columns=["context_id"])
    ctx = ctx_runs.iloc[0].to_dict()
    before = grep_model.predict(ctx, [2, 4, 8])
    tuned = grep_model.finetune(ctx_runs.iloc[:3])
    assert tuned is not grep_model and tuned.is_finetuned and not grep_model.is_finetuned
    np.testing.assert_array_equal(grep_model.predict(ctx, [2, 4, 8]), before)
    assert not np.allclose(tuned.predict(ctx, [2, 4, 8]), before)
    # zero runs: the general model as it is
    same = grep_model.finetune(ctx_runs.iloc[:0])
    np.testing.assert_array_equal(same.predict(ctx, [2, 4, 8]), before)


def test_band_is_ordered_and_narrows_with_context_runs(
    grep_model: RuntimeModel, grep_runs: pd.DataFrame, held_out_context: str
) -> None:
    ctx_runs = grep_runs[grep_runs["context_id"] == held_out_context].drop(columns=["context_id"])
    ctx = ctx_runs.iloc[0].to_dict()
    mean0, lo0, hi0 = grep_model.predict_band(ctx, [2, 6, 12], 0.9)
    assert np.all(lo0 < mean0) and np.all(mean0 < hi0)
    points = pd.concat([ctx_runs[ctx_runs["scale_out"] == n].iloc[:1] for n in (2, 4, 8, 10, 12)])
    mean5, lo5, hi5 = grep_model.finetune(points).predict_band(ctx, [2, 6, 12], 0.9)
    assert np.all(lo5 <= mean5) and np.all(mean5 <= hi5)
    # above the smallest scale-outs (whose own bucket holds few residuals once 5 points are tuned:
    # its quantile is as noisy as its count) the band narrows with the context's runs
    assert np.all((hi5 / mean5)[1:] <= (hi0 / mean0)[1:] + 1e-9)
    _, _, hi99 = grep_model.predict_band(ctx, [2, 6, 12], 0.99)
    assert np.all(hi99 >= hi0)


def test_save_load_round_trip_is_bit_identical(
    tmp_path, grep_model: RuntimeModel, grep_runs: pd.DataFrame, held_out_context: str
) -> None:
    ctx_runs = grep_runs[grep_runs["context_id"] == held_out_context].drop(columns=["context_id"])
    ctx = ctx_runs.iloc[0].to_dict()
    tuned = grep_model.finetune(ctx_runs.iloc[:2])
    for model in (grep_model, tuned):
        path = model.save(tmp_path / "m.safetensors")
        loaded = RuntimeModel.load(path)
        np.testing.assert_array_equal(
            loaded.predict(ctx, [1, 2, 3, 7, 20]), model.predict(ctx, [1, 2, 3, 7, 20])
        )
        for a, b in zip(
            loaded.predict_band(ctx, [3, 9], 0.8), model.predict_band(ctx, [3, 9], 0.8), strict=True
        ):
            np.testing.assert_array_equal(a, b)
        assert loaded.metadata == model.metadata
        assert loaded.calibration == model.calibration
    assert RuntimeModel.from_bytes(tuned.to_bytes()).tuned_points == tuned.tuned_points


def test_truncated_or_foreign_model_files_give_clear_errors(tmp_path, grep_model: RuntimeModel) -> None:
    data = grep_model.to_bytes()
    bad = tmp_path / "truncated.safetensors"
    bad.write_bytes(data[: len(data) // 2])
    with pytest.raises(ModelFileError, match=r"truncated\.safetensors"):
        RuntimeModel.load(bad)
    with pytest.raises(ModelFileError, match="no such model file"):
        RuntimeModel.load(tmp_path / "missing.safetensors")
    import torch
    from safetensors.torch import save

    other = tmp_path / "other.safetensors"
    other.write_bytes(
        save({"x": torch.zeros(2)}, metadata={"bellamy": '{"format": "bellamy-runtime-model/0"}'})
    )
    with pytest.raises(ModelFileError, match="bellamy-runtime-model/0"):
        RuntimeModel.load(other)
    pickle_like = tmp_path / "pickle.pt"
    pickle_like.write_bytes(b"\x80\x04\x95garbage")
    with pytest.raises(ModelFileError):
        RuntimeModel.load(pickle_like)


def test_pretraining_is_deterministic_under_a_seed(grep_runs: pd.DataFrame) -> None:
    small = grep_runs[grep_runs["context_id"].isin(sorted(grep_runs["context_id"].unique())[:6])]
    small = small.drop(columns=["context_id"])
    cfg = TrainingConfig(members=2, max_epochs=60, min_epochs=20, patience=20)
    a = RuntimeModel.pretrain(small, seed=3, config=cfg)
    b = RuntimeModel.pretrain(small, seed=3, config=cfg)
    c = RuntimeModel.pretrain(small, seed=4, config=cfg)
    ctx = small.iloc[0].to_dict()
    np.testing.assert_array_equal(a.predict(ctx, [2, 5, 9]), b.predict(ctx, [2, 5, 9]))
    assert not np.array_equal(a.predict(ctx, [2, 5, 9]), c.predict(ctx, [2, 5, 9]))


@pytest.mark.parametrize(
    ("column", "value", "field"),
    [
        ("runtime_s", float("nan"), "runtime_s"),
        ("runtime_s", -3.0, "runtime_s"),
        ("runtime_s", 0.0, "runtime_s"),
        ("scale_out", 0, "scale_out"),
        ("scale_out", 2.5, "scale_out"),
    ],
)
def test_bad_training_runs_name_field_and_value(
    grep_runs: pd.DataFrame, column: str, value: float, field: str
) -> None:
    runs = grep_runs.drop(columns=["context_id"]).iloc[:20].copy()
    runs[column] = runs[column].astype(float)
    runs.loc[runs.index[4], column] = value
    with pytest.raises(InvalidInputError) as err:
        RuntimeModel.pretrain(runs, config=FAST)
    assert err.value.field == field and "row 4" in str(err.value)


def test_empty_frames_and_bad_predict_inputs(grep_model: RuntimeModel, grep_runs: pd.DataFrame) -> None:
    with pytest.raises(InvalidInputError, match="no runs"):
        RuntimeModel.pretrain(grep_runs.iloc[:0])
    ctx = grep_runs.drop(columns=["context_id"]).iloc[0].to_dict()
    with pytest.raises(InvalidInputError, match="scale_outs"):
        grep_model.predict(ctx, [])
    with pytest.raises(InvalidInputError, match="scale_outs=0"):
        grep_model.predict(ctx, [0, 2])
    # a property the context does not give is unknown (tests/model/test_transfer.py); a context
    # giving nothing that tells grep's contexts apart is refused, naming one
    with pytest.raises(InvalidInputError, match=r"context\.\w+=None.*tell job type 'grep'"):
        grep_model.predict({"job_type": "grep", "framework": "spark"}, [2])
    with pytest.raises(UnknownJobTypeError, match="job_type='sort'"):
        grep_model.predict({**ctx, "job_type": "sort"}, [2])
    with pytest.raises(InvalidInputError, match="confidence"):
        grep_model.predict_band(ctx, [2], 1.5)
    with pytest.raises(InvalidInputError, match="exactly one context"):
        grep_model.finetune(grep_runs.drop(columns=["context_id"]).iloc[::100])


def test_ernest_recovers_known_coefficients() -> None:
    theta = np.array([30.0, 2.0, 0.0, 1.5])
    ns = np.array([2, 4, 6, 8, 10, 12])
    size = 100.0
    runtimes = theta[0] + theta[1] * size / ns + theta[2] * np.log(ns) + theta[3] * ns
    model = ErnestModel.fit_points(ns, runtimes, size)
    np.testing.assert_allclose(
        model.predict(None, [3, 20]),
        theta[0] + theta[1] * size / np.array([3, 20]) + theta[3] * np.array([3, 20]),
        rtol=1e-6,
    )
    assert (model.theta >= 0).all()
    with pytest.raises(InvalidInputError, match="2 distinct scale-outs"):
        ErnestModel.fit(
            pd.DataFrame(
                {"job_type": ["x"] * 2, "framework": "spark", "scale_out": [4, 4], "runtime_s": [1.0, 2.0]}
            )
        )


def test_a_context_from_another_environment_is_rescaled_by_one_run(
    grep_model: RuntimeModel, grep_runs: pd.DataFrame
) -> None:
    """A laptop-sized grep, 10× off everything the model saw: one observed run must pull the
    curve there (the "other environment" hypothesis wins), and the scale-out below the
    training range must not explode."""
    ctx = {
        "job_type": "grep", "framework": "spark", "machine_type": "laptop-1c1g", "environment": "local",
        "cores": 1.0, "memory_mb": 1024.0, "data_size_mb": 20.0, "lines": 200_000.0,
        "line_length": 80.0, "p_occurrence": 0.3,
    }  # fmt: skip
    before = grep_model.predict(ctx, [1, 2, 3])
    assert before[0] < 4 * before[1]  # 1/n⁴ is floored at the smallest trained scale-out (2)
    observed = before[1] / 10
    run = pd.DataFrame([{**ctx, "scale_out": 2, "runtime_s": observed}])
    after = grep_model.finetune(run).predict(ctx, [1, 2, 3])
    assert abs(np.log(after[1] / observed)) < 0.5  # within a factor 1.65 of what was seen, from 10×
    assert np.all(after < before / 3)


def test_finetuning_applies_to_a_context_with_properties_the_model_never_saw(
    grep_model: RuntimeModel, grep_runs: pd.DataFrame, held_out_context: str
) -> None:
    """A user's context may carry properties no training run had (Bell's job_args): the model
    ignores them, and the fine-tuned correction must still apply to that context."""
    ctx_runs = grep_runs[grep_runs["context_id"] == held_out_context].drop(columns=["context_id"])
    extra = ctx_runs.assign(job_args="search one word", runtime_s=ctx_runs["runtime_s"] * 3.0)
    ctx = extra.iloc[0].to_dict()
    tuned = grep_model.finetune(extra.iloc[:3])
    general = grep_model.predict(ctx, [2, 6, 12])
    assert np.all(tuned.predict(ctx, [2, 6, 12]) > 1.5 * general)  # 3× slower runs moved the curve


@pytest.fixture(scope="module")
def c3o_runs() -> pd.DataFrame:
    return with_context_ids(load_traces("c3o"))


@pytest.fixture(scope="module")
def grep_sgd_model(c3o_runs: pd.DataFrame) -> RuntimeModel:
    return RuntimeModel.pretrain(
        c3o_runs[c3o_runs["job_type"].isin(["grep", "sgd"])].drop(columns=["context_id"]), config=FAST
    )


def test_a_model_of_several_job_types_fine_tunes_one_it_never_saw(
    grep_sgd_model: RuntimeModel, c3o_runs: pd.DataFrame
) -> None:
    """Pre-trained on grep and sgd, asked about kmeans (a held-out job, as a user's new pipeline is):
    the job type is a property like any other, so the model answers, and the new job's own runs
    fine-tune it. A model of one job type still refuses another (see the bad-input test)."""
    kmeans = c3o_runs[c3o_runs["job_type"] == "kmeans"]
    first = sorted(kmeans["context_id"].unique())[0]
    runs = kmeans[kmeans["context_id"] == first].drop(columns=["context_id"])
    ctx = runs.iloc[0].to_dict()
    ns = sorted(runs["scale_out"].unique())
    untuned = grep_sgd_model.predict(ctx, ns)
    assert np.all(np.isfinite(untuned)) and np.all(untuned > 0)
    picked = runs.groupby("scale_out").head(1).iloc[[0, 2, 4]]
    tuned = grep_sgd_model.finetune(picked)
    actual = runs.groupby("scale_out")["runtime_s"].mean().to_numpy()
    error = lambda pred: float(np.mean(np.abs(pred - actual) / actual))  # noqa: E731
    assert error(tuned.predict(ctx, ns)) < min(0.5, error(untuned))
    mean, lower, upper = tuned.predict_band(ctx, ns, 0.9)
    assert np.all(lower <= mean) and np.all(mean <= upper)


def _without_unseen_job_calibration(model: RuntimeModel) -> RuntimeModel:
    calibration = replace(model.calibration, unseen_job=None)
    return RuntimeModel(model.params, model.architecture, model.schema, model.metadata, calibration)


def _coverage_after_one_run(model: RuntimeModel, runs: pd.DataFrame) -> float:
    """Share of a job's runs under the 90 % upper band, each context tuned on its smallest scale-out's
    first run and predicted at its other scale-outs."""
    hits = []
    for _, context_runs in runs.groupby("context_id"):
        context_runs = context_runs.drop(columns=["context_id"])
        picked = context_runs.nsmallest(1, "scale_out")
        test = context_runs[context_runs["scale_out"] != picked["scale_out"].iloc[0]]
        ns = sorted(test["scale_out"].unique())
        upper = model.finetune(picked).predict_band(picked.iloc[0].to_dict(), ns, 0.9)[2]
        hits.extend(test["runtime_s"] <= test["scale_out"].map(dict(zip(ns, upper, strict=True))))
    return float(np.mean(hits))


def test_a_job_type_the_model_never_saw_gets_bands_measured_on_job_types_held_out_whole(
    grep_sgd_model: RuntimeModel, c3o_runs: pd.DataFrame
) -> None:
    """The first ensemble's folds hold out contexts of job types the other folds still show, so its
    bands are what a known job type's new context needs: far too narrow for a job type no run
    showed. Pre-training also calibrates on members that each never saw one job type, and a new
    job type is tuned and banded with that calibration; the job types it knows keep their own."""
    unseen = grep_sgd_model.calibration.unseen_job
    assert unseen is not None
    assert sorted(map(list, unseen.job_folds)) == [["grep"], ["sgd"]]  # every job type held out, whole
    assert grep_sgd_model.unseen_job_type_mre is not None
    # a job held out whole is harder than a new context of a known one, one run or five
    for k in ("1", "5"):
        assert grep_sgd_model.unseen_job_type_mre[k] > grep_sgd_model.validation_mre[k]  # type: ignore[index]
    own = _without_unseen_job_calibration(grep_sgd_model)
    grep = c3o_runs[c3o_runs["job_type"] == "grep"]
    grep_context = grep[grep["context_id"] == grep["context_id"].iloc[0]].drop(columns=["context_id"])
    np.testing.assert_array_equal(  # a job type it knows: nothing changes
        grep_sgd_model.finetune(grep_context.iloc[:2]).predict_band(
            grep_context.iloc[0].to_dict(), [2, 6, 12]
        ),
        own.finetune(grep_context.iloc[:2]).predict_band(grep_context.iloc[0].to_dict(), [2, 6, 12]),
    )
    for job in ("kmeans", "sort"):
        runs = c3o_runs[c3o_runs["job_type"] == job]
        assert _coverage_after_one_run(own, runs) < 0.8  # the known job types' bands: too narrow
        assert _coverage_after_one_run(grep_sgd_model, runs) >= 0.9


def test_a_model_tuned_to_a_new_job_type_keeps_its_calibration_through_the_store(
    grep_sgd_model: RuntimeModel, c3o_runs: pd.DataFrame
) -> None:
    sort = c3o_runs[c3o_runs["job_type"] == "sort"]
    runs = sort[sort["context_id"] == sort["context_id"].iloc[0]].drop(columns=["context_id"])
    tuned = grep_sgd_model.finetune(runs.iloc[:1])
    assert tuned.calibration.unseen_job_type
    loaded = RuntimeModel.from_bytes(tuned.to_bytes())
    ctx = runs.iloc[0].to_dict()
    np.testing.assert_allclose(loaded.predict_band(ctx, [2, 6, 12]), tuned.predict_band(ctx, [2, 6, 12]))


def test_the_typed_calibration_round_trips_through_the_model_file(grep_sgd_model: RuntimeModel) -> None:
    """Every part of the calibration (fine-tuning's settings, the per-k tables, the environments',
    the unseen-job calibration, the extrapolation tables per kind) reads back as it was written."""
    import json

    from airflow_provider_bellamy.model.calibration import MAX_K, Calibration

    cal = grep_sgd_model.calibration
    assert cal.tables is not None and len(cal.tables.per_k) == MAX_K + 1
    assert cal.unseen_job is not None and cal.unseen_job.unseen_job_type and not cal.unseen_job_type
    assert cal.extrapolation is not None and cal.extrapolation.tables
    assert Calibration.from_dict(json.loads(json.dumps(cal.to_dict()))) == cal
    loaded = RuntimeModel.from_bytes(grep_sgd_model.to_bytes())
    assert loaded.calibration == cal and loaded.metadata == grep_sgd_model.metadata
    assert loaded.validation_mre == grep_sgd_model.validation_mre is not None


@pytest.mark.parametrize(
    ("path", "value", "field"),
    [
        (
            ("tables", "per_k", 1, "quantiles", "far"),
            [0.0] * 200,
            r"calibration\.tables\.per_k\[1\]\.quantiles\.far",
        ),
        (("tables", "per_k", 0, "counts", "near"), 0, r"calibration\.tables\.per_k\[0\]\.counts\.near = 0"),
        (("tables", "validation_mre"), [0.1] * 5, r"calibration\.tables\.validation_mre"),
        (("tables", "n"), None, r"calibration\.tables\.n is missing"),
        (("fine_tuning", "likelihood_sd"), -0.1, r"calibration\.fine_tuning\.likelihood_sd = -0\.1"),
        (("fine_tuning", "residual_correction"), [0.1], r"calibration\.fine_tuning\.residual_correction"),
        (("fine_tuning", "prior_covariance"), [[1.0, 0.0]], r"calibration\.fine_tuning\.prior_covariance"),
        (("noise_sd",), "0.05", r"calibration\.noise_sd = '0\.05' is not a number"),
        (
            ("unseen_job", "tables", "smallest_max_scale_out"),
            float("nan"),
            r"calibration\.unseen_job\.tables",
        ),
        (
            ("extrapolation", "tables", "categorical", "environments"),
            [],
            r"calibration\.extrapolation\.tables\.categorical\.environments",
        ),
        (("extrapolation", "held_out"), [["sideways", 3]], r"calibration\.extrapolation\.held_out"),
    ],
)
def test_a_model_file_with_a_corrupted_calibration_is_refused_naming_the_field(
    grep_sgd_model: RuntimeModel, path: tuple, value: object, field: str
) -> None:
    """The calibration is read in one place (``Calibration.from_dict``): a table of the wrong
    length, an empty bucket, a missing count, a negative width, a malformed correction or matrix,
    a string for a number, a NaN, an unknown kind are each refused, naming the file and the field."""
    import json

    from safetensors.numpy import load, save

    data = grep_sgd_model.to_bytes()
    size = int.from_bytes(data[:8], "little")
    header = json.loads(json.loads(data[8 : 8 + size])["__metadata__"]["bellamy"])
    RuntimeModel.from_bytes(save(load(data), metadata={"bellamy": json.dumps(header)}))  # as written: read
    parent = header["calibration"]
    for key in path[:-1]:
        parent = parent[key]
    if value is None:
        del parent[path[-1]]
    else:
        parent[path[-1]] = value
    with pytest.raises(ModelFileError, match=rf"broken\.safetensors: model file is inconsistent \({field}"):
        RuntimeModel.from_bytes(
            save(load(data), metadata={"bellamy": json.dumps(header)}), source="broken.safetensors"
        )


def test_the_unseen_job_calibration_is_a_second_pass_only_where_it_can_be_measured(
    grep_model: RuntimeModel, c3o_runs: pd.DataFrame
) -> None:
    assert grep_model.calibration.unseen_job is None  # one job type: nothing to hold out
    two = c3o_runs[c3o_runs["job_type"].isin(["grep", "sort"])].drop(columns=["context_id"])
    skipped = RuntimeModel.pretrain(two, config=FAST, unseen_job_types=False)
    assert skipped.calibration.unseen_job is None


def test_a_context_unlike_the_training_data_switches_to_its_own_parametric_curve(
    grep_model: RuntimeModel, grep_runs: pd.DataFrame, held_out_context: str
) -> None:
    """Runs far outside the trained scale-outs, shaped unlike any training context (Bell-like):
    leave-one-scale-out says the parametric curve predicts them better, and it takes over;
    the context's own C3O runs keep the network's shape."""
    ctx_runs = grep_runs[grep_runs["context_id"] == held_out_context].drop(columns=["context_id"])
    ctx = ctx_runs.iloc[0].to_dict()

    def curve(n: np.ndarray) -> np.ndarray:
        return 90.0 + 3000.0 / n + 5.0 * np.log(n)

    ns = np.array([8, 16, 24, 40, 56])
    foreign = pd.DataFrame([ctx] * len(ns)).assign(scale_out=ns, runtime_s=curve(ns))
    tuned = grep_model.finetune(foreign)
    assert tuned.parametric_weight > 0.9
    test_ns = [12, 20, 32, 48, 60]
    err = np.abs(tuned.predict(ctx, test_ns) / curve(np.array(test_ns)) - 1)
    assert err.max() < 0.05
    loaded = RuntimeModel.from_bytes(tuned.to_bytes())
    np.testing.assert_array_equal(loaded.predict(ctx, test_ns), tuned.predict(ctx, test_ns))

    own = pd.concat([ctx_runs[ctx_runs["scale_out"] == n].iloc[:1] for n in (2, 4, 8, 10, 12)])
    assert grep_model.finetune(own).parametric_weight < 0.5


def test_below_the_smallest_observed_scale_out_the_band_spans_both_curves(
    grep_model: RuntimeModel, grep_runs: pd.DataFrame, held_out_context: str
) -> None:
    """The parametric curve took over on runs at 8..56; below 8 the runs never compared it with the
    network's, so the band there covers both. From 8 up the band is the blended curve's alone."""
    ctx_runs = grep_runs[grep_runs["context_id"] == held_out_context].drop(columns=["context_id"])
    ctx = ctx_runs.iloc[0].to_dict()
    ns = np.array([8, 16, 24, 40, 56])
    foreign = pd.DataFrame([ctx] * len(ns)).assign(scale_out=ns, runtime_s=90.0 + 3000.0 / ns)
    tuned = grep_model.finetune(foreign)
    assert tuned.parametric_weight > 0.9 and tuned.observed_scale_outs == tuple(ns)
    test_ns = [2, 3, 4, 6, 8, 12, 32, 48]  # (beyond its largest run, 56: test_beyond_scale_outs)
    mean, lo, hi = tuned.predict_band(ctx, test_ns, 0.9)
    network_only, unspanned = copy.copy(tuned), copy.copy(tuned)
    network_only.tuned = replace(tuned.tuned, parametric_weight=0.0)
    # the same model, as if the network agreed with the blended curve everywhere
    # (the continuation past the scale-outs the curve is known at kept: its band spans that too)
    unspanned._curves = lambda c, n, *ext, **kw: (  # type: ignore[method-assign]
        lambda got: (got[1], got[1], got[2])
    )(tuned._curves(c, n, *ext, **kw))
    network = network_only.predict(ctx, test_ns)
    blended_only = unspanned.predict_band(ctx, test_ns, 0.9)
    below = np.array(test_ns) < 8
    np.testing.assert_array_equal(mean, blended_only[0])  # the prediction itself is unchanged
    assert np.abs(np.log(network[below] / mean[below])).max() > 0.1  # the curves do disagree there
    # in log space the band's offsets are the same; below 8 they start from the farther curve
    np.testing.assert_allclose(hi[below], np.maximum(mean, network)[below] * (blended_only[2] / mean)[below])
    np.testing.assert_allclose(lo[below], np.minimum(mean, network)[below] * (blended_only[1] / mean)[below])
    np.testing.assert_array_equal(hi[~below], blended_only[2][~below])
    np.testing.assert_array_equal(lo[~below], blended_only[1][~below])
    loaded = RuntimeModel.from_bytes(tuned.to_bytes())
    assert loaded.observed_scale_outs == tuple(ns)
    np.testing.assert_array_equal(loaded.predict_band(ctx, test_ns, 0.9)[2], hi)


def test_scale_outs_near_a_tuned_one_get_the_near_table_and_the_others_the_far_one(
    grep_model: RuntimeModel, grep_runs: pd.DataFrame, held_out_context: str
) -> None:
    """Out-of-fold errors differ with the distance from the scale-outs fine-tuning saw (Bell's, one
    run: 90 % upper quantile 1.29 × near, 1.84 × far); calibration keeps them apart, and a one-run
    context gets the near table within 1.5 × of its run, the far one beyond."""
    from airflow_provider_bellamy.model.calibration import residual_quantiles

    assert grep_model.calibration.tables is not None
    tables = grep_model.calibration.tables.per_k[1].quantiles
    counts = grep_model.calibration.tables.per_k[1].counts
    assert counts["near"] + counts["far"] == counts["others"] and min(counts["near"], counts["far"]) >= 20

    own = grep_runs[grep_runs["context_id"] == held_out_context].drop(columns=["context_id"])
    one = own[own["scale_out"] == 4].iloc[:1]
    ctx = one.iloc[0].to_dict()
    tuned = grep_model.finetune(one)
    mean, lo, hi = tuned.predict_band(ctx, [6, 12], 0.9)  # 1.5 × and 3 × the run's scale-out
    near = residual_quantiles(grep_model.calibration, 1, 0.9, np.array([6]), observed=[4])
    far = residual_quantiles(grep_model.calibration, 1, 0.9, np.array([12]), observed=[4])
    pooled = residual_quantiles(grep_model.calibration, 1, 0.9, np.array([6, 12]))
    np.testing.assert_allclose(np.log(hi / mean), [near[1][0], far[1][0]])
    np.testing.assert_allclose(np.log(lo / mean), [near[0][0], far[0][0]])
    assert abs(near[1][0] - far[1][0]) > 1e-3 and tables["near"] != tables["far"]
    assert not np.allclose(np.log(hi / mean), pooled[1])  # not the table of all distances


def test_the_far_band_grows_with_the_log_distance_from_the_tuned_scale_outs(grep_model: RuntimeModel) -> None:
    """Far residuals are kept in units of their log distance (log 1.5 = 1): a scale-out 4 × away
    gets the far table's bound × log 4 / log 1.5, one 16 × away twice that."""
    from airflow_provider_bellamy.model.calibration import (
        NEAR_FACTOR,
        _bucket_tables,
        log_distance,
        residual_quantiles,
    )

    lo, hi = residual_quantiles(grep_model.calibration, 1, 0.9, np.array([6, 16, 64]), observed=[4])
    unit = np.log(np.array([4.0, 16.0])) / np.log(NEAR_FACTOR)
    np.testing.assert_allclose(hi[1:], hi[1] / unit[0] * unit)
    np.testing.assert_allclose(lo[1:], lo[1] / unit[0] * unit)

    # calibration side: residuals proportional to the distance make a far table of one value
    distance = log_distance(np.array([6, 9, 16, 32, 64] * 30), np.array([4]))
    r = 0.1 * np.maximum(distance / np.log(NEAR_FACTOR), 1.0)
    tables, counts = _bucket_tables(r, np.zeros(len(r), dtype=bool), distance)
    assert counts["near"] == 30 and counts["far"] == 120
    np.testing.assert_allclose(tables["far"], 0.1)
    assert max(tables["others"]) > 0.1 * 6  # the table of all distances is not scaled


def test_a_contexts_band_follows_its_own_leave_one_scale_out_errors(
    grep_model: RuntimeModel, grep_runs: pd.DataFrame, held_out_context: str
) -> None:
    """The calibration table is the prior for a context's error; runs the tuned curve predicts
    well tighten the band, runs it cannot predict widen it."""
    from airflow_provider_bellamy.model.calibration import residual_quantiles

    own = grep_runs[grep_runs["context_id"] == held_out_context].drop(columns=["context_id"])
    ctx = own.iloc[0].to_dict()
    ns = np.array([4, 6, 8, 10, 12])
    smooth = own.groupby("scale_out")["runtime_s"].median().loc[ns].to_numpy()  # the context's own curve
    test_ns = [5, 7, 9, 11]
    table_hi = residual_quantiles(grep_model.calibration, 5, 0.9, np.array(test_ns))[1]
    widths = {}
    for name, runtimes in (("smooth", smooth), ("erratic", smooth * np.array([1.5, 0.7, 1.4, 0.65, 1.5]))):
        tuned = grep_model.finetune(pd.DataFrame([ctx] * 5).assign(scale_out=ns, runtime_s=runtimes))
        assert tuned.check_count == 5
        mean, _lo, hi = tuned.predict_band(ctx, test_ns, 0.9)
        widths[name] = np.log(hi / mean)
    assert np.all(widths["smooth"] < table_hi)
    assert np.all(widths["erratic"] > table_hi)


def test_a_context_of_a_rarer_environment_gets_its_environments_own_error_tables(
    grep_runs: pd.DataFrame,
) -> None:
    """Group-conditional calibration: contexts of an environment the training data holds few of,
    and predicts badly, get bands from that environment's out-of-fold errors, not from the pooled
    tables the big environment dominates; an environment calibration never saw is an extrapolation."""
    from airflow_provider_bellamy.model.calibration import residual_quantiles

    rng = np.random.default_rng(7)
    moved = sorted(grep_runs["context_id"].unique())[:6]
    runs = grep_runs.copy()
    onprem = runs["context_id"].isin(moved)
    # another cluster: its runtimes follow no curve the big environment taught (±35 % per scale-out)
    jitter = {(c, n): float(np.exp(rng.normal(0, 0.35))) for c in moved for n in runs["scale_out"].unique()}
    runs.loc[onprem, "environment"] = "onprem"
    runs.loc[onprem, "runtime_s"] = [
        y * jitter[(c, n)]
        for c, n, y in zip(
            runs.loc[onprem, "context_id"],
            runs.loc[onprem, "scale_out"],
            runs.loc[onprem, "runtime_s"],
            strict=True,
        )
    ]
    model = RuntimeModel.pretrain(runs.drop(columns=["context_id"]), seed=0, config=FAST)
    assert model.calibration.tables is not None
    envs = model.calibration.tables.environments
    assert set(envs) == {"aws-emr", "onprem"}

    ctx = _context(grep_runs)
    ns = [4, 6, 8, 10, 12]

    def width(environment: str) -> np.ndarray:
        mean, _lo, hi = model.predict_band({**ctx, "environment": environment}, ns, 0.9)
        return np.log(hi / mean)

    assert np.all(width("onprem") > 1.5 * width("aws-emr"))
    pooled = residual_quantiles(model.calibration, 0, 0.9, np.array(ns))[1]
    # an environment calibration never saw is an extrapolation: the band of contexts held out
    # whole, wider than the pooled tables of the environments it knows
    never = model.band({**ctx, "environment": "a-cluster-never-seen"}, ns, 0.9)
    assert "not 'a-cluster-never-seen'" in never.extrapolation.sentence()
    assert np.all(width("a-cluster-never-seen") > pooled)
    # a model calibrated before environments had tables of their own answers from the pooled ones
    older = RuntimeModel(
        model.params,
        model.architecture,
        model.schema,
        model.metadata,
        replace(model.calibration, tables=replace(model.calibration.tables, environments={})),
    )
    _, _, hi_older = older.predict_band({**ctx, "environment": "onprem"}, ns, 0.9)
    np.testing.assert_allclose(
        np.log(hi_older / older.predict({**ctx, "environment": "onprem"}, ns)), pooled, rtol=1e-9
    )


def test_a_k_no_calibration_context_could_measure_reads_the_last_measured_tables(
    grep_runs: pd.DataFrame,
) -> None:
    """Contexts that ran at four scale-outs leave no residual for k >= 4 (k + 1 must be held out):
    a context fine-tuned on more runs than that got an empty table and ``np.interp`` failed
    (``fp and xp are not of the same length``) on every size(). The last measured k's tables
    answer there (``calibration.answering_k``; until session 26 the Gaussian did), its cap too."""
    from airflow_provider_bellamy.model.calibration import answering_k, max_confidence

    ids = sorted(grep_runs["context_id"].unique())[:3]
    runs = grep_runs[grep_runs["context_id"].isin(ids)]
    runs = runs[runs["scale_out"].isin(sorted(runs["scale_out"].unique())[:4])]
    tiny = TrainingConfig(members=2, max_epochs=40, min_epochs=10, patience=10, hidden=8)
    model = RuntimeModel.pretrain(runs.drop(columns=["context_id"]), seed=0, config=tiny)
    context = runs[runs["context_id"] == ids[0]]
    tuned = model.finetune(context.drop(columns=["context_id"]).groupby("scale_out").head(2))
    properties = context.iloc[0].drop(["context_id", "runtime_s", "scale_out"]).to_dict()
    mean, lower, upper = tuned.predict_band(properties, [2, 4, 8], 0.9)
    assert np.all(np.isfinite(upper)) and np.all(lower <= mean) and np.all(mean <= upper)
    assert answering_k(model.calibration, 4) == 3
    assert max_confidence(model.calibration, 4) == max_confidence(model.calibration, 3) < 1.0
