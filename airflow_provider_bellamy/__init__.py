"""airflow-provider-bellamy: size Spark and Flink launches for their SLA with the Bellamy runtime model.

Importing the package is cheap: the façade, torch and pandas load on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

if TYPE_CHECKING:
    from airflow_provider_bellamy.facade import Bellamy

__all__ = ["Bellamy", "__version__"]


def __getattr__(name: str) -> Any:
    if name == "Bellamy":
        from airflow_provider_bellamy.facade import Bellamy

        return Bellamy
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
