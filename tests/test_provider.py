from __future__ import annotations

import importlib
import json
from importlib import metadata
from pathlib import Path

import airflow
import jsonschema

from airflow_provider_bellamy.get_provider_info import get_provider_info


def test_provider_info_matches_airflows_schema() -> None:
    schema = json.loads((Path(airflow.__file__).parent / "provider_info.schema.json").read_text())
    jsonschema.validate(get_provider_info(), schema)
    assert get_provider_info()["package-name"] == "airflow-provider-bellamy"


def test_entry_points_are_registered() -> None:
    providers = {ep.value for ep in metadata.entry_points(group="apache_airflow_provider")}
    assert "airflow_provider_bellamy.get_provider_info:get_provider_info" in providers
    plugins = {ep.value for ep in metadata.entry_points(group="airflow.plugins")}
    assert any(v.startswith("airflow_provider_bellamy.plugins") for v in plugins)


def test_every_declared_module_and_class_imports() -> None:
    info = get_provider_info()
    modules = [
        m
        for key in ("hooks", "operators", "sensors", "triggers")
        for e in info[key]
        for m in e["python-modules"]
    ]
    for name in modules:
        importlib.import_module(name)
    for conn in info["connection-types"]:
        module, _, cls = conn["hook-class-name"].rpartition(".")
        hook = getattr(importlib.import_module(module), cls)
        assert hook.conn_type == conn["connection-type"]
        # Airflow 3 builds connection forms from conn-fields: no Flask-AppBuilder widgets to offer
        assert not hasattr(hook, "get_connection_form_widgets") or "get_connection_form_widgets" not in vars(
            hook
        )
    plugin = info["plugins"][0]["plugin-class"]
    module, _, cls = plugin.rpartition(".")
    assert getattr(importlib.import_module(module), cls).name == "bellamy"


def test_airflow_discovers_the_connection_types() -> None:
    from airflow.providers_manager import ProvidersManager

    manager = ProvidersManager()
    assert "airflow-provider-bellamy" in manager.providers
    assert {"bellamy", "flink"} <= set(manager.hooks)
