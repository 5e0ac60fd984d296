"""The model store: runs, model versions and sizing decisions in SQLite or PostgreSQL.

No torch and no pandas here: the Airflow adapters use the store inside running tasks.
"""

from airflow_provider_bellamy.store.engine import default_store_path, default_store_url, safe_url
from airflow_provider_bellamy.store.repositories import DecisionRepository, ModelRepository, RunRepository
from airflow_provider_bellamy.store.schema import Base, Decision, ModelVersion, Run
from airflow_provider_bellamy.store.store import HEAD_REVISION, SchemaStatus, Store, alembic_head

__all__ = [
    "HEAD_REVISION",
    "Base",
    "Decision",
    "DecisionRepository",
    "ModelRepository",
    "ModelVersion",
    "Run",
    "RunRepository",
    "SchemaStatus",
    "Store",
    "alembic_head",
    "default_store_path",
    "default_store_url",
    "safe_url",
]
