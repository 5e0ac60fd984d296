"""The Bellamy runtime model: no Airflow, no SQL; torch only to pre-train (numpy predicts and fine-tunes).

Names load on first use, so that importing the package (the façade does, to type its
answers) costs nothing until a model is really needed.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from airflow_provider_bellamy.model.ernest import ErnestModel
    from airflow_provider_bellamy.model.runtime_model import RuntimeModel
    from airflow_provider_bellamy.model.training import TrainingConfig

__all__ = ["ErnestModel", "RuntimeModel", "TrainingConfig"]

_WHERE = {
    "ErnestModel": "airflow_provider_bellamy.model.ernest",
    "RuntimeModel": "airflow_provider_bellamy.model.runtime_model",
    "TrainingConfig": "airflow_provider_bellamy.model.training",
}


def __getattr__(name: str) -> Any:
    if name in _WHERE:
        return getattr(importlib.import_module(_WHERE[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
