"""A context that differs from a training context only by a value the model reads as unknown (the
same job, input and machine type on another cluster): its twin's measured curve carries it."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

import airflow_provider_bellamy.model.runtime_model as runtime_model
from airflow_provider_bellamy.model import RuntimeModel
from airflow_provider_bellamy.model.finetuning import (
    NEAREST_WEIGHT,
    job_distances,
    nearest_curve,
    nearest_distance,
    nearest_weight,
)

from .conftest import FAST

SCALE_OUTS = (1, 2, 4, 8, 16, 32)
MACHINES = {"n2-standard-8": (8.0, 32768.0), "n2-highmem-4": (4.0, 32768.0)}
SIZES = (2000.0, 9000.0, 40000.0)


def _runtime(n: int, cores: float, size: float, *, coordination: float = 1.0, per_node: float = 0.0) -> float:
    """A Flink-like job (the synthetic trace's "join"): serial part, work spread over the cores,
    a coordination term growing with the cluster."""
    return (
        15.0 + 9.0 * size / 1000 / (n * cores) * 1.4 + coordination * 0.15 * n * size / 10000 + per_node * n
    )


def _runs(environment: str, level: float = 1.0, seed: int = 0, **shape: float) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    rows = []
    for machine, (cores, memory) in MACHINES.items():
        for size in SIZES:
            for n in SCALE_OUTS:
                for _ in range(2):
                    rows.append(
                        {
                            "job_type": "join",
                            "framework": "flink",
                            "scale_out": n,
                            "runtime_s": level
                            * _runtime(n, cores, size, **shape)
                            * math.exp(rng.normal(0, 0.04)),
                            "machine_type": machine,
                            "cores": cores,
                            "memory_mb": memory,
                            "environment": environment,
                            "data_size_mb": size,
                        }
                    )
    return pd.DataFrame(rows)


@pytest.fixture(scope="module")
def one_environment() -> tuple[RuntimeModel, pd.DataFrame]:
    """Pre-trained on every context of one cluster ("k8s")."""
    train = _runs("k8s")
    return RuntimeModel.pretrain(train, seed=0, config=FAST), train


def _context(machine: str = "n2-standard-8", size: float = 40000.0) -> dict[str, object]:
    cores, memory = MACHINES[machine]
    return {
        "job_type": "join",
        "framework": "flink",
        "machine_type": machine,
        "cores": cores,
        "memory_mb": memory,
        "environment": "yarn",
        "data_size_mb": size,
    }


def _of(runs: pd.DataFrame, ctx: dict[str, object]) -> pd.DataFrame:
    keep = (runs["machine_type"] == ctx["machine_type"]) & (runs["data_size_mb"] == ctx["data_size_mb"])
    return runs[keep]


def _mean_curve(runs: pd.DataFrame) -> np.ndarray:
    return np.exp(np.log(runs["runtime_s"]).groupby(runs["scale_out"]).mean().reindex(SCALE_OUTS).to_numpy())


def test_the_nearest_share_is_whole_for_a_twin_only() -> None:
    assert nearest_weight(0.0) == 1.0
    # a new machine type whose memory is 5 % off a trained one's is no twin (C3O's r4.xlarge)
    assert nearest_weight(0.048) == NEAREST_WEIGHT
    assert nearest_weight(None) == NEAREST_WEIGHT


def test_a_twin_alone_makes_the_nearest_curve() -> None:
    """Where a training context agrees with the context in every property it gives with a known
    value, its curve is the nearest curve; the kernel's neighbours (here another core count,
    exp(-log 2 / 0.5) = 25 % of the twin's weight) stand in only where no twin exists."""
    grid = [1.0, 2.0, 4.0]
    twin = {"context": {"job_type": "j", "cores": 8.0}, "log_runtime": [3.0, 2.5, 2.0]}
    other = {"context": {"job_type": "j", "cores": 4.0}, "log_runtime": [4.0, 3.5, 3.0]}
    found = nearest_curve(
        {"job_type": "j", "cores": 8.0}, [twin, other], grid, ["cores"], twin_names=["cores"]
    )
    assert found is not None
    np.testing.assert_allclose(found[1], [3.0, 2.5, 2.0])
    # without asking for twins (the kernel alone), or with no twin (cores 6): both weigh in, as before
    found = nearest_curve({"job_type": "j", "cores": 8.0}, [twin, other], grid, ["cores"])
    assert found is not None and np.all(found[1] > [3.0, 2.5, 2.0])
    found = nearest_curve(
        {"job_type": "j", "cores": 6.0}, [twin, other], grid, ["cores"], twin_names=["cores"]
    )
    assert found is not None
    assert np.all(found[1] > [3.0, 2.5, 2.0]) and np.all(found[1] < [4.0, 3.5, 3.0])


def test_a_level_shifted_environment_follows_its_twin_from_one_run(
    one_environment: tuple[RuntimeModel, pd.DataFrame],
) -> None:
    """The model trained on one cluster, the user runs another, 1.15× slower throughout: one run
    sets the level, the twin (same job, input and machine on the training cluster) gives the
    shape. The prediction at the other scale-outs is the twin's measured curve moved to the run
    (the network's own fit of that curve, its ¼ share before, missed it by 20-58 % at 8-32 nodes
    on the synthetic trace); from runs at three scale-outs on, still the twin's shape."""
    model, train = one_environment
    ctx = _context()
    assert model.schema.unknown_properties(model._normalise(ctx)) == ["environment"]
    twin = _mean_curve(_of(train, ctx))
    runs = _of(_runs("yarn", level=1.15, seed=1), ctx).drop_duplicates("scale_out")
    for ran in ([4], [1, 4, 16]):
        points = runs[runs["scale_out"].isin(ran)]
        tuned = model.finetune(points)
        predicted = tuned.predict(ctx, list(SCALE_OUTS))
        at = [SCALE_OUTS.index(n) for n in ran]
        level = math.exp(float(np.mean(np.log(points["runtime_s"].to_numpy()) - np.log(twin[at]))))
        assert np.max(np.abs(predicted / (twin * level) - 1)) < 0.03, (ran, predicted / (twin * level))
    # its own checks (each run's scale-out predicted from the others) measure the twin's curve:
    # a level shift leaves them at the runs' noise
    assert tuned.check_count >= 2 and tuned.check_rms < 0.1


def test_a_twin_in_an_environment_of_another_shape_keeps_its_band_covering(
    one_environment: tuple[RuntimeModel, pd.DataFrame],
) -> None:
    """Not every cluster is the training one moved by a constant: here coordination costs twice
    as much and each node adds a second (a slower network). Runs at three scale-outs show it;
    the band at the others holds the true runtimes (its checks measured the twin's misfit), and
    it is wider than for the level-shifted twin."""
    model, _ = one_environment
    ctx = _context()
    shifted = _of(_runs("yarn", level=1.15, seed=1), ctx).drop_duplicates("scale_out")
    other = _of(_runs("yarn", seed=1, coordination=2.0, per_node=1.0), ctx).drop_duplicates("scale_out")
    truth = np.array([_runtime(n, 8.0, 40000.0, coordination=2.0, per_node=1.0) for n in SCALE_OUTS])
    ran = [1, 4, 16]
    widths = []
    for runs in (shifted, other):
        tuned = model.finetune(runs[runs["scale_out"].isin(ran)])
        band = tuned.band(ctx, [2, 8, 32])
        widths.append(float(np.mean(np.log(band.upper / band.lower))))
    assert np.all(band.lower <= truth[[1, 3, 5]]) and np.all(truth[[1, 3, 5]] <= band.upper), (band, truth)
    assert widths[1] > widths[0], widths


def test_a_machine_type_that_moves_what_the_network_reads_is_no_twin(
    one_environment: tuple[RuntimeModel, pd.DataFrame],
) -> None:
    """Memory never varied in training (both machine types have 32 GB), so a new machine type's
    16 GB reads as unknown; but the input per node's memory, which the network reads, moves with
    it: the nearest contexts keep their share (``NEAREST_WEIGHT``), the network its learned effect.
    Another cluster alone moves nothing the network reads: a twin."""
    model, train = one_environment
    other_cluster = model._normalise(_context())
    assert model._nearest_distance(other_cluster) == 0.0
    smaller = model._normalise(
        {**_context(), "environment": "k8s", "machine_type": "n2-small", "memory_mb": 16384.0}
    )
    assert "memory_mb" in model.schema.unknown_properties(smaller)
    assert model._nearest_distance(smaller) > 0
    runs = _of(train, _context()).drop_duplicates("scale_out").iloc[:1]
    tuned = model.finetune(runs.assign(machine_type="n2-small", memory_mb=16384.0))
    assert tuned.tuned is not None and tuned.tuned.nearest is not None
    assert tuned.tuned.nearest.weight == NEAREST_WEIGHT
    twin = model.finetune(runs.assign(environment="yarn"))
    assert twin.tuned is not None and twin.tuned.nearest is not None and twin.tuned.nearest.weight == 1.0


def test_the_distances_to_the_training_contexts_are_those_of_the_job_in_order() -> None:
    """One list serves the twin check, the nearest curve's kernel and the nearest distance."""
    curves = [
        {"context": {"job_type": "j", "cores": 8.0, "environment": "k8s"}},
        {"context": {"job_type": "other", "cores": 8.0}},
        {"context": {"job_type": "j", "cores": 4.0}},
    ]
    ctx = {"job_type": "j", "cores": 8.0, "environment": "yarn"}
    assert job_distances(ctx, curves, ["cores"]) == [0.0, math.log(2.0)]
    assert job_distances(ctx, curves, iter(["cores", "environment"])) == [1.0, math.log(2.0) + 1.0]
    assert nearest_distance(ctx, curves, ["cores", "environment"]) == 1.0
    assert job_distances({"job_type": "new", "cores": 8.0}, curves, ["cores"]) == []
    assert nearest_distance({"job_type": "new", "cores": 8.0}, curves, ["cores"]) is None


def test_the_nearest_distance_is_computed_once_per_context(
    one_environment: tuple[RuntimeModel, pd.DataFrame], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Fine-tuning, its nearest curve and the untuned prediction all ask how far a context's
    nearest training context lies; it depends on the schema and the training curves alone, which
    every tuned copy shares, so each context's is computed once."""
    trained, train = one_environment
    model = RuntimeModel(
        trained.params, trained.architecture, trained.schema, trained.metadata, trained.calibration
    )
    calls: list[dict[str, str | float]] = []

    def counted(ctx: dict[str, str | float], *args: object) -> float | None:
        calls.append(ctx)
        return nearest_distance(ctx, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(runtime_model, "nearest_distance", counted)
    runs = _of(train, _context()).drop_duplicates("scale_out").iloc[:2].assign(environment="yarn")
    before = model.predict(_context(), SCALE_OUTS)
    tuned = model.finetune(runs)
    after = tuned.predict(_context(), SCALE_OUTS)
    assert len(calls) == 1 and np.all(np.isfinite(before)) and np.all(np.isfinite(after))
    assert tuned._nearest_distance(model._normalise(_context())) == 0.0 and len(calls) == 1
    # another context: its own distance; a fresh model (another network, curves): its own cache
    assert model._nearest_distance(model._normalise(_context("n2-highmem-4"))) == 0.0 and len(calls) == 2
    fresh = RuntimeModel(
        trained.params, trained.architecture, trained.schema, trained.metadata, trained.calibration
    )
    fresh._nearest_distance(model._normalise(_context()))
    assert len(calls) == 3
