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
            {
                "integration-name": "Bellamy",
                "python-modules": [
                    "airflow_provider_bellamy.hooks.job",
                    "airflow_provider_bellamy.hooks.spark",
                ],
            },
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
                "hook-name": "Bellamy model store",
                "connection-type": "bellamy",
                "ui-field-behaviour": {
                    "hidden-fields": [],
                    "relabeling": {"schema": "Database", "host": "Host (PostgreSQL; empty with Store URL)"},
                    "placeholders": {
                        "host": "db.internal (empty: Store URL or the embedded SQLite store)",
                        "schema": "bellamy",
                        "port": "5432",
                        "login": "bellamy",
                    },
                },
                "conn-fields": {
                    "store_url": {
                        "label": "Store URL",
                        "description": "SQLAlchemy URL of the model store; the password field is added to it",
                        "schema": {"type": ["string", "null"]},
                    },
                    "dialect": {
                        "label": "Dialect",
                        "description": "SQLAlchemy dialect when host is used (default postgresql+psycopg)",
                        "schema": {"type": ["string", "null"]},
                    },
                    "connect_timeout": {
                        "label": "Connect timeout (s)",
                        "description": "Seconds to wait for the store before the operator falls back",
                        "schema": {"type": ["number", "string", "null"], "default": 10},
                    },
                },
            },
            {
                "hook-class-name": "airflow_provider_bellamy.hooks.flink.FlinkHook",
                "hook-name": "Apache Flink (Bellamy)",
                "connection-type": "flink",
                "ui-field-behaviour": {
                    "hidden-fields": ["login", "password"],
                    "relabeling": {
                        "host": "JobManager REST host",
                        "port": "REST port",
                        "schema": "http or https",
                    },
                    "placeholders": {"host": "127.0.0.1", "port": "8081"},
                },
                "conn-fields": {
                    "flink_bin": {
                        "label": "flink executable",
                        "description": "Path of bin/flink used for `flink run --detached`",
                        "schema": {"type": ["string", "null"]},
                    },
                    "flink_home": {
                        "label": "Flink home",
                        "description": "Flink distribution folder (bin/flink inside it) when flink_bin is not set",
                        "schema": {"type": ["string", "null"]},
                    },
                    "python": {
                        "label": "PyFlink Python",
                        "description": "Python interpreter with PyFlink for -py jobs",
                        "schema": {"type": ["string", "null"]},
                    },
                    "flink_conf_dir": {
                        "label": "Flink conf dir",
                        "description": "FLINK_CONF_DIR for the client",
                        "schema": {"type": ["string", "null"]},
                    },
                },
            },
        ],
        "plugins": [{"name": "bellamy", "plugin-class": "airflow_provider_bellamy.plugins.BellamyPlugin"}],
    }
