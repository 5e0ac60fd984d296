"""Bundled public execution traces (C3O, Bell) and a loader and writer for a user's own runs.

See ``data/PROVENANCE.md`` for where each trace comes from.
"""

from airflow_provider_bellamy.datasets.loaders import (
    BELL_CONTEXTS,
    C3O_JOB_COLUMNS,
    available_traces,
    load_runs_file,
    load_traces,
    write_runs_chunks,
    write_runs_file,
)

__all__ = [
    "BELL_CONTEXTS",
    "C3O_JOB_COLUMNS",
    "available_traces",
    "load_runs_file",
    "load_traces",
    "write_runs_chunks",
    "write_runs_file",
]
