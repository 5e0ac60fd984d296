"""Bellamy operators. Names are exported lazily: importing this package loads no operator module.

``from airflow_provider_bellamy.operators import BellamySparkSubmitOperator`` imports the
Spark operator (and the Spark provider) only then.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS: dict[str, str] = {
    "BellamySizingOperator": "airflow_provider_bellamy.operators.sizing",
    "BellamySparkSubmitOperator": "airflow_provider_bellamy.operators.spark",
    "BellamyTrainOperator": "airflow_provider_bellamy.operators.train",
    "BellamyFlinkOperator": "airflow_provider_bellamy.operators.flink",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
