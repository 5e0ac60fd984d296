from __future__ import annotations

import copy
from dataclasses import replace

import numpy as np
import pandas as pd
import pytest

from airflow_provider_bellamy.exceptions import ModelFileError
from airflow_provider_bellamy.model import RuntimeModel
from airflow_provider_bellamy.model.calibration import CORRECTIONS
from airflow_provider_bellamy.model.finetuning import residual_correction


def test_the_correction_follows_runs_that_agree_and_fades_away_from_them() -> None:
    runs_at = np.array([16, 20, 24])
    agree = np.full(3, 0.3)
    near, far = residual_correction(
        runs_at, agree, np.array([20, 200]), amplitude=0.2, length=0.35, noise_sd=0.1
    )
    assert 0.2 < near < 0.3  # most of the way to the runs, never past them
    assert abs(far) < 1e-3
    # runs that disagree with each other move the curve less than runs that agree
    mixed = residual_correction(
        runs_at, np.array([0.3, -0.3, 0.3]), np.array([20]), amplitude=0.2, length=0.35, noise_sd=0.1
    )
    assert abs(mixed[0]) < near


def test_repeated_runs_at_a_scale_out_count_as_their_mean_with_less_noise() -> None:
    """The same posterior mean as the Gaussian process over every run, from one row per scale-out."""
    rng = np.random.default_rng(0)
    runs_at = np.repeat([4, 8, 16, 32], [1, 3, 7, 2])
    residuals = rng.normal(0.2, 0.1, len(runs_at))
    query = np.array([3, 6, 12, 24, 64])
    a, length, sd = 0.3, 0.5, 0.1
    x, q = np.log(runs_at), np.log(query)
    gram = a**2 * np.exp(-((x[:, None] - x[None, :]) ** 2) / (2 * length**2)) + sd**2 * np.eye(len(x))
    cross = a**2 * np.exp(-((q[:, None] - x[None, :]) ** 2) / (2 * length**2))
    every_run = cross @ np.linalg.solve(gram, residuals)
    np.testing.assert_allclose(
        residual_correction(runs_at, residuals, query, amplitude=a, length=length, noise_sd=sd),
        every_run,
        rtol=1e-9,
        atol=1e-12,
    )
    # a year of daily runs at a handful of scale-outs stays a handful of rows
    many = np.tile([4, 8, 16, 32], 2_000)
    assert residual_correction(
        many, np.full(len(many), 0.2), query, amplitude=a, length=length, noise_sd=sd
    ).shape == (5,)


def test_no_correction_from_runs_at_one_scale_out_or_at_zero_amplitude() -> None:
    at = np.array([20, 200])
    one_scale_out = residual_correction(
        np.array([8, 8]), np.array([0.4, 0.4]), at, amplitude=0.2, length=0.35, noise_sd=0.1
    )
    off = residual_correction(
        np.array([8, 16]), np.array([0.4, 0.4]), at, amplitude=0.0, length=0.35, noise_sd=0.1
    )
    np.testing.assert_array_equal(one_scale_out, 0.0)
    np.testing.assert_array_equal(off, 0.0)


def test_calibration_keeps_the_correction_that_predicts_out_of_fold_runs_best(
    grep_model: RuntimeModel,
) -> None:
    fine_tuning = grep_model.calibration.fine_tuning
    scores = fine_tuning.residual_correction_scores
    assert set(scores) == {f"{a}/{length}" for a, length in CORRECTIONS}
    best = min(scores, key=scores.__getitem__)
    assert fine_tuning.residual_correction is not None
    chosen_amplitude, chosen_length = fine_tuning.residual_correction
    amplitude, length = (float(v) for v in best.split("/"))
    assert chosen_length == length
    np.testing.assert_allclose(chosen_amplitude, amplitude * fine_tuning.likelihood_sd)


def test_a_curve_outside_both_families_is_followed_where_the_context_has_runs(
    grep_model: RuntimeModel, grep_runs: pd.DataFrame, held_out_context: str
) -> None:
    """Bell's sgd falls with -log n from 4 to 60 nodes: no positive mix of the basis terms draws
    that, nor Ernest's. The correction bends the tuned curve towards the runs between them; far
    outside them the curve is the uncorrected one."""
    ctx_runs = grep_runs[grep_runs["context_id"] == held_out_context].drop(columns=["context_id"])
    ctx = ctx_runs.iloc[0].to_dict()

    def curve(n: np.ndarray) -> np.ndarray:
        return 940.0 - 200.0 * np.log(n)

    ns = np.array([4, 16, 28, 40, 52])
    tuned = grep_model.finetune(pd.DataFrame([ctx] * len(ns)).assign(scale_out=ns, runtime_s=curve(ns)))
    corrected, plain = copy.copy(tuned), copy.copy(tuned)
    fine_tuning = tuned.calibration.fine_tuning
    corrected.calibration = replace(
        tuned.calibration, fine_tuning=replace(fine_tuning, residual_correction=(0.2, 0.35))
    )
    plain.calibration = replace(tuned.calibration, fine_tuning=replace(fine_tuning, residual_correction=None))
    between = np.array([20, 24, 32, 36, 44])
    error = {
        name: np.abs(np.log(model.predict(ctx, between) / curve(between))).mean()
        for name, model in (("corrected", corrected), ("plain", plain))
    }
    assert error["corrected"] < 0.7 * error["plain"]
    # (beyond its largest run the prediction continues the curve from there, see
    # test_beyond_scale_outs: the model's curve itself is what the correction leaves alone)
    far = np.array([1000.0])
    norm = tuned._normalise(ctx)
    np.testing.assert_allclose(
        corrected._model_log_curves(norm, far)[1], plain._model_log_curves(norm, far)[1], rtol=1e-6
    )
    # the context's own leave-one-scale-out check measures the corrected curve: smaller errors
    general = {name: copy.copy(grep_model) for name in ("corrected", "plain")}
    general["corrected"].calibration = corrected.calibration
    general["plain"].calibration = plain.calibration
    runs = pd.DataFrame([ctx] * len(ns)).assign(scale_out=ns, runtime_s=curve(ns))
    checks = {name: model.finetune(runs) for name, model in general.items()}
    assert checks["corrected"].check_count == checks["plain"].check_count >= 3
    assert checks["corrected"].check_rms < checks["plain"].check_rms
    # the runs' residuals travel with the model file
    loaded = RuntimeModel.from_bytes(corrected.to_bytes())
    assert loaded.run_residuals == corrected.run_residuals and len(loaded.run_residuals) == len(ns)
    np.testing.assert_array_equal(loaded.predict(ctx, between), corrected.predict(ctx, between))


def test_a_model_file_with_malformed_run_residuals_is_refused_by_name(
    grep_model: RuntimeModel, grep_runs: pd.DataFrame, held_out_context: str
) -> None:
    ctx_runs = grep_runs[grep_runs["context_id"] == held_out_context].drop(columns=["context_id"])
    tuned = grep_model.finetune(ctx_runs.iloc[:3])
    for bad in ([(0.0, 0.1)], [(4.0, float("nan"))], [(4.0,)]):
        broken = copy.copy(tuned)
        broken.tuned = replace(broken.tuned, run_residuals=tuple(bad))  # type: ignore[arg-type]
        with pytest.raises(ModelFileError, match="inconsistent"):
            RuntimeModel.from_bytes(broken.to_bytes(), source="broken.safetensors")


def test_a_model_file_whose_tuned_context_does_not_hold_together_is_refused(
    grep_model: RuntimeModel, grep_runs: pd.DataFrame, held_out_context: str
) -> None:
    """The fine-tuned part is read in one place (``TunedContext.from_dict``): a delta without a
    tuned context, a tuned context without its delta, a parametric curve of the wrong size, a weight
    outside [0, 1] or a malformed nearest curve are each refused, naming the file."""
    import json

    from safetensors.numpy import load, save

    ctx_runs = grep_runs[grep_runs["context_id"] == held_out_context].drop(columns=["context_id"])
    data = grep_model.finetune(ctx_runs.iloc[:3]).to_bytes()
    size = int.from_bytes(data[:8], "little")
    header = json.loads(json.loads(data[8 : 8 + size])["__metadata__"]["bellamy"])
    tensors = load(data)
    without_delta = {k: v for k, v in tensors.items() if k != "delta"}
    nearest = {"log_n": [1.0, 0.5], "log_runtime": [3.0, 2.0], "weight": 0.75}  # not increasing
    broken = [
        ({**header, "tuned": None}, tensors),
        (header, without_delta),
        ({**header, "tuned": {**header["tuned"], "theta": [1.0, 2.0]}}, tensors),
        ({**header, "tuned": {**header["tuned"], "parametric_weight": 1.5}}, tensors),
        ({**header, "tuned": {**header["tuned"], "nearest": nearest}}, tensors),
    ]
    RuntimeModel.from_bytes(save(tensors, metadata={"bellamy": json.dumps(header)}))  # as written: read
    for bad_header, bad_tensors in broken:
        with pytest.raises(ModelFileError, match=r"broken\.safetensors: model file is inconsistent"):
            RuntimeModel.from_bytes(
                save(bad_tensors, metadata={"bellamy": json.dumps(bad_header)}), source="broken.safetensors"
            )
