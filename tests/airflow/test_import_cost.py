"""DAG files are parsed every few seconds: our Airflow modules must stay light.

Each group is imported in a fresh interpreter after what a DAG file already has (see
``benchmarks/import_cost.py``); torch and pandas must not be among the modules it loads.
The milliseconds it adds are machine-dependent: ``bellamy benchmark imports`` reports them
(docs/benchmarks.md quotes the figures); a test never asserts a time.
"""

from __future__ import annotations

import pytest

from airflow_provider_bellamy.benchmarks.import_cost import GROUPS, added_imports, heavy_modules


@pytest.mark.parametrize("group", [g for g in GROUPS if not g.startswith("baseline")])
def test_airflow_modules_import_neither_torch_nor_pandas(group: str) -> None:
    base, modules = GROUPS[group]
    cost_ms, new = added_imports(base, modules)
    assert set(modules) <= new  # the modules were imported by this process, not before it
    assert heavy_modules(new) == [], f"importing {modules} imports {heavy_modules(new)}"
    assert cost_ms > 0
