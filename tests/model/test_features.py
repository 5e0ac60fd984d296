from __future__ import annotations

import numpy as np
import pytest
import torch

from airflow_provider_bellamy.exceptions import InvalidInputError, UnknownJobTypeError
from airflow_provider_bellamy.model.features import (
    PROPERTY_DIM,
    FeatureSchema,
    encode_number,
    encode_string,
    scale_out_basis,
)
from airflow_provider_bellamy.model.network import N_BASIS, BellamyNet, log_runtime


def _cos(a: np.ndarray, b: np.ndarray) -> float:
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


def test_string_encoding_is_stable_and_separates_values() -> None:
    a1, a2 = encode_string("m4.2xlarge"), encode_string("m4.2xlarge")
    assert a1.shape == (PROPERTY_DIM,)
    np.testing.assert_array_equal(a1, a2)  # crc32, not Python's salted hash
    assert a1[0] == 1.0 and a1[1] == 0.0
    assert _cos(a1, encode_string("c4.2xlarge")) > _cos(a1, encode_string("yarn"))
    assert not np.allclose(a1, encode_string("r4.2xlarge"))


def test_number_encoding_separates_orders_of_magnitude() -> None:
    ten, twelve, thousand = encode_number(10.0), encode_number(12.0), encode_number(1000.0)
    assert ten[1] == 1.0 and ten[0] == 0.0
    assert _cos(ten, twelve) > 0.9
    assert _cos(ten, thousand) < _cos(ten, twelve) - 0.3
    assert not np.allclose(encode_number(-5.0), encode_number(5.0))
    assert encode_number(0.0)[3] == 1.0  # the zero flag


def test_scale_out_basis_rows() -> None:
    basis = scale_out_basis(np.array([1, 4]))
    assert basis.shape == (2, N_BASIS)
    np.testing.assert_allclose(basis[1], [1.0, 0.25, 1 / 16, 1 / 256, np.log(4), 4.0])


def test_network_shapes() -> None:
    net = BellamyNet(n_properties=3, members=4, seeds=[0, 1, 2, 3])
    vectors, mask = torch.randn(7, 3, PROPERTY_DIM), torch.ones(7, 3)
    h, recon = net.log_weights(vectors, mask)
    assert h.shape == (4, 7, N_BASIS)  # members × contexts × basis terms
    assert recon.ndim == 0 and float(recon.detach()) >= 0
    # members are independent networks: different initialisations, different outputs
    assert not torch.allclose(h[0], h[1])
    basis = torch.as_tensor(scale_out_basis(np.array([2, 4, 8])), dtype=torch.float32)
    out = log_runtime(h.unsqueeze(2), basis.view(1, 1, 3, N_BASIS))
    assert out.shape == (4, 7, 3)
    # runtime = Σ exp(h_i) φ_i(n) must never be negative: log is finite
    assert torch.isfinite(out).all()


def test_schema_requires_properties_per_job_type() -> None:
    schema = FeatureSchema.from_contexts(
        ["grep", "grep", "sort"],
        [{"a": 1.0, "b": "x", "d": 1.0}, {"a": 2.0, "d": 2.0}, {"c": 3.0, "d": 1.0}],
    )
    assert schema.properties == ["a", "b", "c", "d"]
    # "a" is absent on sort's runs, so the network has seen it absent: not required.
    # "d" was on every run: never seen absent, so required for every job type.
    assert schema.required == {"grep": ["d"], "sort": ["d"]}
    one_job = FeatureSchema.from_contexts(["grep", "grep"], [{"a": 1.0, "b": "x"}, {"a": 2.0}])
    assert one_job.required == {"grep": ["a"]}
    schema.check_context("grep", {"d": 5.0})
    with pytest.raises(InvalidInputError, match=r"context\.d"):
        schema.check_context("grep", {"a": 1.0})
    with pytest.raises(InvalidInputError, match=r"context\.a"):
        one_job.check_context("grep", {"b": "x"})
    # a job type the model never saw: a model of several job types reads it as a new property value
    # and needs what every training run had; a model of one job type refuses it
    assert schema.required_for("wordcount") == ["d"]
    schema.check_context("wordcount", {"d": 1.0})
    with pytest.raises(InvalidInputError, match=r"context\.d"):
        schema.check_context("wordcount", {"a": 1.0})
    with pytest.raises(UnknownJobTypeError, match="job_type='sort'"):
        one_job.check_context("sort", {"a": 1.0})


def test_numpy_forward_pass_matches_the_torch_network() -> None:
    """Prediction and fine-tuning run the numpy copy of the network (no torch at launch):
    it must compute what training optimised."""
    from airflow_provider_bellamy.model import inference

    net = BellamyNet(n_properties=3, members=4, seeds=[0, 1, 2, 3])
    gen = torch.Generator().manual_seed(5)
    vectors = torch.randn(7, 3, PROPERTY_DIM, generator=gen)
    mask = torch.tensor([[1.0, 0.0, 1.0]] * 4 + [[1.0, 1.0, 1.0]] * 3)
    with torch.no_grad():
        h_torch, _ = net.log_weights(vectors, mask)
    params = {k: v.numpy() for k, v in net.state_dict().items()}
    h_numpy = inference.log_weights(params, vectors.numpy(), mask.numpy())
    np.testing.assert_allclose(h_numpy, h_torch.numpy(), rtol=1e-5, atol=1e-5)
    basis = scale_out_basis(np.array([2, 4, 8]))
    np.testing.assert_allclose(
        inference.log_runtime(h_numpy[:, :, None, :], basis[None, None]),
        log_runtime(h_torch.unsqueeze(2), torch.as_tensor(basis, dtype=torch.float32).view(1, 1, 3, N_BASIS)),
        rtol=1e-5,
        atol=1e-5,
    )


def test_launch_path_imports_no_torch() -> None:
    """Loading a stored model, fine-tuning it and predicting must not import torch."""
    import subprocess
    import sys

    code = (
        "import sys, numpy as np, pandas as pd\n"
        "from airflow_provider_bellamy.model.runtime_model import RuntimeModel\n"
        "m = RuntimeModel.from_bytes(sys.stdin.buffer.read())\n"
        "ctx = {'job_type': 'j', 'size': 100.0}\n"
        "runs = pd.DataFrame({'job_type': ['j', 'j'], 'framework': ['spark'] * 2, 'scale_out': [2, 4],"
        " 'runtime_s': [50.0, 30.0], 'size': [100.0, 100.0]})\n"
        "print(m.finetune(runs).predict_band(ctx, [2, 4, 8], 0.9)[2].round(3).tolist())\n"
        "assert 'torch' not in sys.modules, 'torch imported'\n"
    )
    import pandas as pd

    from airflow_provider_bellamy.model import RuntimeModel, TrainingConfig

    runs = pd.DataFrame(
        {
            "job_type": ["j"] * 8,
            "framework": ["spark"] * 8,
            "scale_out": [2, 4, 8, 16] * 2,
            "runtime_s": [100.0, 55.0, 30.0, 20.0, 200.0, 110.0, 60.0, 40.0],
            "size": [100.0] * 4 + [200.0] * 4,
        }
    )
    model = RuntimeModel.pretrain(runs, config=TrainingConfig(members=2, max_epochs=30, min_epochs=10))
    out = subprocess.run(
        [sys.executable, "-c", code], input=model.to_bytes(), capture_output=True, check=False
    )
    assert out.returncode == 0, out.stderr.decode()[-2000:]
