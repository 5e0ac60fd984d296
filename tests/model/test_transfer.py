"""Contexts unlike the training data: property values the model never saw, properties a context
does not give, and job types whose runs come with different property sets (issue 17)."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pandas as pd
import pytest

from airflow_provider_bellamy.benchmarks.common import with_context_ids
from airflow_provider_bellamy.datasets import load_traces
from airflow_provider_bellamy.exceptions import InvalidInputError, ModelFileError
from airflow_provider_bellamy.model import RuntimeModel
from airflow_provider_bellamy.model.features import DERIVED, FeatureSchema
from airflow_provider_bellamy.model.finetuning import nearest_share

from .conftest import FAST


def _context(runs: pd.DataFrame) -> dict[str, object]:
    return runs.drop(columns=["context_id"]).iloc[0].to_dict()


@pytest.fixture(scope="module")
def grep_without_c4(grep_runs: pd.DataFrame) -> RuntimeModel:
    """grep pre-trained on two machine types (m4, r4); c4.2xlarge is never seen."""
    train = grep_runs[grep_runs["machine_type"] != "c4.2xlarge"]
    return RuntimeModel.pretrain(train.drop(columns=["context_id"]), seed=0, config=FAST)


def test_a_context_on_an_unseen_machine_type_tuned_on_one_run_is_predicted_at_that_run(
    grep_without_c4: RuntimeModel, grep_runs: pd.DataFrame
) -> None:
    """The bug of issue 17: fine-tuned on one run of grep on a machine type it never saw, the
    model's prediction at that very scale-out stayed 1.17× above the run (the learned prior
    refused the level shift). The model now reads the machine type as unknown and the context as
    one from elsewhere: its run's level is what it is."""
    c4 = grep_runs[grep_runs["machine_type"] == "c4.2xlarge"]
    ctx = _context(c4)
    assert grep_without_c4.schema.unknown_properties(grep_without_c4._normalise(ctx)) == ["machine_type"]
    for n in (2, 6, 12):
        run = c4[c4["scale_out"] == n].drop(columns=["context_id"]).iloc[:1]
        observed = float(run["runtime_s"].iloc[0])
        predicted = float(grep_without_c4.finetune(run).predict(ctx, [n])[0])
        assert abs(predicted / observed - 1) < 0.05, (n, predicted, observed)


def test_a_property_the_context_does_not_give_is_unknown_not_fatal(
    grep_model: RuntimeModel, grep_runs: pd.DataFrame, held_out_context: str
) -> None:
    ctx = _context(grep_runs[grep_runs["context_id"] == held_out_context])
    full = grep_model.predict(ctx, [2, 6, 12])
    lacking = {k: v for k, v in ctx.items() if k not in ("machine_type", "memory_mb", "cores")}
    partial = grep_model.predict(lacking, [2, 6, 12])
    mean, lower, upper = grep_model.predict_band(lacking, [2, 6, 12])
    assert np.all(np.isfinite(partial)) and np.all(partial > 0)
    assert np.all(lower <= mean) and np.all(mean <= upper)
    # it is read as absent, not as the full context: the prediction differs
    assert not np.allclose(partial, full)
    assert grep_model.cannot_read(lacking) is None
    # a value the model never saw reads as that property absent
    unseen = {**ctx, "machine_type": "z9.huge"}
    without = {k: v for k, v in ctx.items() if k != "machine_type"}
    np.testing.assert_array_equal(grep_model.predict(unseen, [2, 6]), grep_model.predict(without, [2, 6]))
    # only a context giving nothing that tells grep's contexts apart is refused, naming what would
    with pytest.raises(InvalidInputError, match=r"tell job type 'grep'.*data_size_mb") as refused:
        grep_model.predict({"job_type": "grep", "framework": "spark", "machine_type": "z9.huge"}, [2])
    # ... and only properties a user gives: a derived ratio given is dropped (features.context_of)
    assert not any(name in str(refused.value) for name in DERIVED), str(refused.value)
    # a model pre-trained without property dropout never saw a property absent: it still refuses
    strict = replace(grep_model.schema, unknown_as_absent=False)
    with pytest.raises(InvalidInputError, match=r"context\.cores"):
        strict.check_context("grep", lacking)


def test_a_job_type_trained_on_runs_with_different_property_sets(c3o_kmeans: pd.DataFrame) -> None:
    """kmeans from two sources (issue 17): the bundled Spark runs with features/k/observations and
    Flink runs recorded without them, nor the node's cores and memory. Both train one model, and a
    Flink context lacking those properties is predicted (from its own source's runs), not refused."""
    spark = c3o_kmeans[c3o_kmeans["machine_type"] == "r4.2xlarge"]
    contexts = sorted(spark["context_id"].unique())
    flink = (
        spark[spark["context_id"].isin(contexts[:8])]
        .drop(columns=["features", "k", "observations", "cores", "memory_mb"])
        .assign(framework="flink", environment="flink-standalone", runtime_s=lambda f: f["runtime_s"] * 0.5)
    )
    trained = flink["context_id"].isin(contexts[:4])
    train = pd.concat([spark[~spark["context_id"].isin(contexts[:4])], flink[trained]])
    model = RuntimeModel.pretrain(train.drop(columns=["context_id"]), seed=0, config=FAST)
    assert {"features", "k", "observations", "cores", "memory_mb"} <= set(model.properties)
    ratios = []
    for _, test in flink[~trained].groupby("context_id"):
        ctx = _context(test)
        assert model.cannot_read(ctx) is None
        as_spark = _context(spark[spark["context_id"] == test["context_id"].iloc[0]])
        ratios.append(model.predict(ctx, [4, 8]) / model.predict(as_spark, [4, 8]))
    # the Flink runs are half as long as Spark's: the model reads the source and answers for it
    assert np.exp(np.mean(np.log(ratios))) < 0.75


def test_a_context_the_model_knows_is_encoded_and_tuned_as_before(
    grep_model: RuntimeModel, grep_runs: pd.DataFrame, held_out_context: str
) -> None:
    """Where every value is one the model knows, reading unknown values as absent changes
    nothing: the same encoding, the same fine-tuning prior, bit for bit."""
    ctx_runs = grep_runs[grep_runs["context_id"] == held_out_context].drop(columns=["context_id"])
    ctx = ctx_runs.iloc[0].to_dict()
    normalised = grep_model._normalise(ctx)
    assert grep_model.schema.unknown_properties(normalised) == []
    strict = RuntimeModel(
        grep_model.params,
        grep_model.architecture,
        replace(grep_model.schema, unknown_as_absent=False),
        grep_model.metadata,
        grep_model.calibration,
    )
    for a, b in zip(grep_model.schema.encode([normalised]), strict.schema.encode([normalised]), strict=True):
        np.testing.assert_array_equal(a, b)
    points = ctx_runs.iloc[[0, 7]]
    np.testing.assert_array_equal(
        grep_model.finetune(points).predict(ctx, [2, 4, 8, 12]),
        strict.finetune(points).predict(ctx, [2, 4, 8, 12]),
    )


def test_the_schema_knows_the_values_it_was_trained_with() -> None:
    schema = FeatureSchema.from_contexts(
        ["grep", "grep", "sort"],
        [
            {"job_type": "grep", "m": "a", "cores": 8.0, "size": 1.0},
            {"job_type": "grep", "m": "b", "cores": 8.0, "size": 10.0},
            {"job_type": "sort", "m": "a", "cores": 8.0, "size": 3.0},
        ],
    )
    schema.unknown_as_absent = True
    assert schema.is_known("m", "a") and not schema.is_known("m", "c")
    # a number of a property that took one value in training: the network learned nothing of another
    assert schema.is_known("cores", 8.0) and not schema.is_known("cores", 4.0)
    # a range extrapolates (the encoding of numbers is smooth in log10)
    assert schema.is_known("size", 1000.0)
    assert not schema.is_known("m", 3.0)  # a property seen only as strings
    assert schema.is_known("job_type", "wordcount")  # the job type is always read
    assert schema.distinguishing == {"grep": ["m", "size"], "sort": []}
    assert FeatureSchema.from_dict(schema.to_dict()) == schema
    # a schema without the values it knows (a file from before them) is not read as one
    with pytest.raises(KeyError):
        FeatureSchema.from_dict({"properties": ["m"], "required": {"grep": ["m"]}})


def test_property_dropout_hides_only_what_is_met_unknown_and_one_value_reads_as_itself() -> None:
    """Pre-training hides only a string property that took several values (a machine type): the
    model may meet one of its values unknown and must answer without it. A number that varied is
    always read by its value, and a property that took one value in training reads as that value
    whatever the context gives (the network cannot have learned what another does): hiding every
    property cost accuracy on contexts like the training data (C3O sort, k = 0: 8.8 % → 12.0 %)."""
    import torch

    from airflow_provider_bellamy.model.training import encode_runs

    contexts = [
        {"job_type": "grep", "m": "a", "cores": 8.0, "size": 1.0, "env": "emr"},
        {"job_type": "grep", "m": "b", "cores": 8.0, "size": 10.0, "env": "emr"},
    ]
    schema = FeatureSchema.from_contexts(["grep", "grep"], contexts)
    schema.unknown_as_absent = True
    hidden = {p: schema.hidden_in_training(p) for p in schema.properties}
    assert hidden == {"cores": False, "env": False, "job_type": False, "m": True, "size": False}
    assert schema.constant("cores") == 8.0 and schema.constant("env") == "emr"
    assert schema.constant("m") is None and schema.constant("size") is None
    data = encode_runs(
        schema, contexts, ["a", "b"], np.array([2, 4]), np.array([10.0, 5.0]), torch.device("cpu")
    )
    assert data.droppable is not None
    assert dict(zip(schema.properties, data.droppable.tolist(), strict=True)) == hidden
    # another value of a one-valued property, or none, reads as the trained one; an unknown
    # machine type as absent
    base = schema.encode([contexts[0]])
    for other in (
        {**contexts[0], "cores": 16.0, "env": "yarn"},
        {k: v for k, v in contexts[0].items() if k not in ("cores", "env")},
    ):
        np.testing.assert_array_equal(schema.encode([other])[0], base[0])
        np.testing.assert_array_equal(schema.encode([other])[1], base[1])
    assert schema.unknown_properties({**contexts[0], "cores": 16.0}) == ["cores"]
    vectors, mask = schema.encode([{**contexts[0], "m": "zz"}])
    assert mask[0, schema.properties.index("m")] == 0 and not vectors[0, schema.properties.index("m")].any()


@pytest.fixture(scope="module")
def c3o_kmeans() -> pd.DataFrame:
    return with_context_ids(load_traces("c3o", "kmeans"))


@pytest.mark.parametrize(
    "older", ["bellamy-runtime-model/2", "bellamy-runtime-model/3", "bellamy-runtime-model/4"]
)
def test_a_model_file_of_an_older_format_is_refused_with_retrain(
    grep_model: RuntimeModel, grep_runs: pd.DataFrame, held_out_context: str, older: str
) -> None:
    """A file written by an earlier version (format /2: no known values in its schema, no curves;
    /3: the fine-tuned context's fields loose in the header) is not read as something it is not:
    the error names its format and says to retrain."""
    import json

    from safetensors.numpy import load, save

    data = grep_model.finetune(
        grep_runs[grep_runs["context_id"] == held_out_context].drop(columns=["context_id"]).iloc[:3]
    ).to_bytes()
    size = int.from_bytes(data[:8], "little")
    header = json.loads(json.loads(data[8 : 8 + size])["__metadata__"]["bellamy"])
    header["format"] = older
    with pytest.raises(ModelFileError, match=rf"{older}.*retrain with `bellamy train`"):
        RuntimeModel.from_bytes(save(load(data), metadata={"bellamy": json.dumps(header)}))


@pytest.fixture(scope="module")
def kmeans_on_two_machine_types(c3o_kmeans: pd.DataFrame) -> RuntimeModel:
    """kmeans pre-trained on its one context on m4.2xlarge and its one on r4.xlarge: the shape of
    C3O's leave-machine-type-out split that holds out r4.2xlarge (28 contexts)."""
    train = c3o_kmeans[c3o_kmeans["machine_type"] != "r4.2xlarge"]
    return RuntimeModel.pretrain(train.drop(columns=["context_id"]), seed=0, config=FAST)


def test_a_new_machine_type_before_runs_leans_on_the_nearest_training_curves(
    kmeans_on_two_machine_types: RuntimeModel, c3o_kmeans: pd.DataFrame
) -> None:
    """Issue 17, k = 0: with two training contexts each ensemble member saw one of them, and the
    network's curve for a context on a machine type it never saw fitted neither (C3O kmeans on
    r4.2xlarge: 59 % mean relative error, above the nearest-curves heuristic's 43 %). Blended with
    the measured curves of the training contexts nearest to it, the prediction beats both the
    network alone and the heuristic."""
    from airflow_provider_bellamy.benchmarks.common import NearestCurves

    model = kmeans_on_two_machine_types
    train = c3o_kmeans[c3o_kmeans["machine_type"] != "r4.2xlarge"]
    held = c3o_kmeans[c3o_kmeans["machine_type"] == "r4.2xlarge"]
    heuristic = NearestCurves(train, "machine_type", held)
    errors: dict[str, list[float]] = {"bellamy": [], "network": [], "heuristic": []}
    for _, runs in held.groupby("context_id"):
        ctx = _context(runs)
        ns = runs["scale_out"].to_numpy()
        actual = runs["runtime_s"].to_numpy()
        assert "machine_type" in model.schema.unknown_properties(model._normalise(ctx))
        network = np.exp(model._network_log(model._normalise(ctx), ns.astype(float)))
        for name, predicted in (
            ("bellamy", model.predict(ctx, ns.tolist())),
            ("network", network),
            ("heuristic", heuristic.predict(ctx, runs.iloc[:0], ns)),
        ):
            errors[name].extend(np.abs(predicted - actual) / actual)
    mre = {name: float(np.mean(e)) for name, e in errors.items()}
    assert mre["bellamy"] < mre["network"] and mre["bellamy"] < mre["heuristic"], mre


def test_a_context_inside_the_training_data_keeps_the_networks_curve_and_band(
    grep_model: RuntimeModel, grep_runs: pd.DataFrame, held_out_context: str
) -> None:
    """The nearest curves answer only for a context the model reads something unknown in: one
    inside the training data gets the network's curve, bit for bit, and the band around it."""
    ctx = _context(grep_runs[grep_runs["context_id"] == held_out_context])
    normalised = grep_model._normalise(ctx)
    assert grep_model.schema.unknown_properties(normalised) == []
    # (below the smallest trained, 2, and beyond the largest, 12, the curve is continued:
    # test_below_scale_outs, test_beyond_scale_outs)
    ns = [2, 4, 8, 12]
    network = grep_model._network_log(normalised, np.array(ns, dtype=float))
    np.testing.assert_array_equal(grep_model.predict(ctx, ns), np.exp(network))
    band = grep_model.band(ctx, ns)
    np.testing.assert_array_equal(band.mean, np.exp(network))
    assert not band.extrapolation.extrapolating


def test_the_nearest_curves_share_falls_beyond_one_trained_span() -> None:
    """Before its first run a context with an unknown value leans on the nearest training curves
    (``NEAREST_WEIGHT``) while it lies no farther beyond a varied number's range than that range
    is wide; beyond, the share falls as one over the distance in spans. A number with one trained
    value (span 0) does not count: the network reads it as that value."""
    from airflow_provider_bellamy.model.extrapolation import Extrapolation, OutOfRange
    from airflow_provider_bellamy.model.finetuning import NEAREST_WEIGHT

    def beyond(factor: float, span: float) -> OutOfRange:
        return OutOfRange("data_size_mb", 1.0, "below", factor, factor, span)

    assert nearest_share(Extrapolation()) == NEAREST_WEIGHT
    # 0.5 decades beyond a range 0.5 decades wide: one span, the full share
    assert nearest_share(Extrapolation(out_of_range=(beyond(10**0.5, 0.5),))) == pytest.approx(NEAREST_WEIGHT)
    # 3 decades beyond it: six spans, a sixth of it
    assert nearest_share(Extrapolation(out_of_range=(beyond(1000.0, 0.5),))) == pytest.approx(
        NEAREST_WEIGHT / 6
    )
    # a one-valued property, however far: the full share
    assert nearest_share(Extrapolation(out_of_range=(beyond(1000.0, 0.0),))) == NEAREST_WEIGHT
    # the farthest varied number decides; an infinite distance leaves the network alone
    both = Extrapolation(out_of_range=(beyond(10**0.5, 0.5), beyond(1000.0, 0.5)))
    assert nearest_share(both) == pytest.approx(NEAREST_WEIGHT / 6)
    assert nearest_share(Extrapolation(out_of_range=(beyond(math.inf, 0.5),))) == 0.0


def test_a_context_far_below_the_trained_sizes_keeps_the_networks_size_effect(
    grep_without_c4: RuntimeModel,
) -> None:
    """The demo's case: a grep of 24 MB on a machine type never seen, 421× below the smallest
    trained input (C3O: 10-20 GB). The nearest training curves were measured at 10 GB; the
    prediction stays near the network's curve (its learned size effect), while a context on the
    same machine type inside the trained sizes takes the full share."""
    from airflow_provider_bellamy.model.finetuning import NEAREST_WEIGHT

    model = grep_without_c4
    local = {
        "job_type": "grep",
        "framework": "spark",
        "machine_type": "loopback-1c1g",
        "cores": 8.0,
        "memory_mb": 32000.0,
        "data_size_mb": 24.0,
        "lines": 300000.0,
        "line_length": 100.0,
        "p_occurrence": 0.3,
    }
    ns = np.array([1.0, 2.0, 4.0, 8.0])
    for data_size, share in ((24.0, None), (15150.0, NEAREST_WEIGHT)):
        ctx = model._normalise({**local, "data_size_mb": data_size, "lines": data_size / 24.0 * 300000.0})
        network = model._network_log(ctx, ns)
        near = model._nearest_training_curve(ctx)
        assert near is not None
        predicted = np.log(model.predict(ctx, ns.astype(int).tolist()))
        found = nearest_share(model.extrapolation(ctx))
        if share is not None:
            assert found == share
        else:
            assert 0 < found < NEAREST_WEIGHT / 5
        gap = np.abs(predicted - network)
        assert np.all(gap > 0)
        if share is None:
            # the network's curve within 10 %: its size effect, not 10 GB curves, times the run
            assert np.all(gap < np.log(1.1)), np.exp(gap)
