"""Provider metadata read by Airflow through the ``apache_airflow_provider`` entry point."""

from __future__ import annotations

from typing import Any


def get_provider_info() -> dict[str, Any]:
    return {
        "package-name": "airflow-provider-bellamy",
        "name": "Bellamy",
        "description": "Runtime-aware sizing of Spark and Flink jobs: the smallest scale-out that meets "
        "the SLA, from a runtime model pre-trained across contexts and fine-tuned on your runs.",
        "versions": ["0.1.0"],
        "integrations": [
            {
                "integration-name": "Bellamy",
                "external-doc-url": "https://github.com/dos-group/bellamy-runtime-prediction",
                "tags": ["software"],
            }
        ],
        "hooks": [
            {"integration-name": "Bellamy", "python-modules": ["airflow_provider_bellamy.hooks.bellamy"]},
            {"integration-name": "Bellamy", "python-modules": ["airflow_provider_bellamy.hooks.flink"]},
        ],
        "operators": [
            {
                "integration-name": "Bellamy",
                "python-modules": [
                    "airflow_provider_bellamy.operators.sizing",
                    "airflow_provider_bellamy.operators.spark",
                    "airflow_provider_bellamy.operators.flink",
                    "airflow_provider_bellamy.operators.train",
                ],
            }
        ],
        "sensors": [
            {"integration-name": "Bellamy", "python-modules": ["airflow_provider_bellamy.sensors.job"]}
        ],
        "triggers": [
            {"integration-name": "Bellamy", "python-modules": ["airflow_provider_bellamy.triggers.job"]}
        ],
        "connection-types": [
            {
                "hook-class-name": "airflow_provider_bellamy.hooks.bellamy.BellamyHook",
                "connection-type": "bellamy",
            },
            {"hook-class-name": "airflow_provider_bellamy.hooks.flink.FlinkHook", "connection-type": "flink"},
        ],
        "plugins": [{"name": "bellamy", "plugin-class": "airflow_provider_bellamy.plugins.BellamyPlugin"}],
    }
