"""The Bellamy runtime model: pure torch + numpy/pandas, no Airflow, no SQL."""

from airflow_provider_bellamy.model.ernest import ErnestModel
from airflow_provider_bellamy.model.runtime_model import RuntimeModel
from airflow_provider_bellamy.model.training import TrainingConfig

__all__ = ["ErnestModel", "RuntimeModel", "TrainingConfig"]
