"""``BellamyPlugin``: registers the write-back listener with Airflow."""

from __future__ import annotations

from airflow.plugins_manager import AirflowPlugin

from airflow_provider_bellamy.listeners import listener


class BellamyPlugin(AirflowPlugin):
    name = "bellamy"
    listeners = [listener]  # noqa: RUF012 - AirflowPlugin declares it as a class attribute
