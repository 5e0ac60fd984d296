"""Turn the bundled traces and users' files into canonical run records."""

from __future__ import annotations

import csv
from collections.abc import Iterable
from importlib import resources
from pathlib import Path
from typing import Any

import pandas as pd

from airflow_provider_bellamy.exceptions import InvalidInputError
from airflow_provider_bellamy.records import (
    SOURCE_ATTR,
    SOURCE_LINES_ATTR,
    check_complete_properties,
    validate_runs,
)

# Job-specific columns of each C3O algorithm (data characteristics and job parameters).
C3O_JOB_COLUMNS: dict[str, tuple[str, ...]] = {
    "grep": ("line_length", "lines", "p_occurrence"),
    "sort": ("line_length", "lines"),
    "sgd": ("features", "observations", "iterations"),
    "kmeans": ("features", "observations", "k"),
    "pagerank": ("pages", "links", "convergence_criterion"),
}

# Context facts of the Bell traces, from the Bell and Bellamy papers (see PROVENANCE.md):
# 4 cores and 16 GB per node, YARN, and the job's input and parameters.
_BELL_NODE = {"machine_type": "bell-node-4c16g", "cores": 4.0, "memory_mb": 16384.0, "environment": "yarn"}
BELL_CONTEXTS: dict[str, dict[str, Any]] = {
    "grep": {**_BELL_NODE, "data_size_mb": 250_000.0, "job_args": "search one word"},
    "pagerank": {**_BELL_NODE, "data_size_mb": 3_400.0, "iterations": 5.0},
    "sgd": {**_BELL_NODE, "data_size_mb": 10_000.0, "iterations": 100.0},
}

_DATA = "airflow_provider_bellamy.datasets"


def available_traces() -> dict[str, list[str]]:
    """Bundled trace sets and their job types."""
    root = resources.files(_DATA) / "data"
    return {
        "c3o": sorted(
            p.name.removesuffix(".tsv") for p in (root / "c3o").iterdir() if p.name.endswith(".tsv")
        ),
        "bell": sorted(
            p.name.removesuffix(".csv") for p in (root / "bell").iterdir() if p.name.endswith(".csv")
        ),
    }


def _load_c3o(job_type: str) -> pd.DataFrame:
    with resources.as_file(resources.files(_DATA) / "data" / "c3o" / f"{job_type}.tsv") as path:
        raw = pd.read_csv(path, sep="\t")
    n = raw["instance_count"].astype(int)
    frame = pd.DataFrame(
        {
            "job_type": job_type,
            "framework": "spark",
            "scale_out": n,
            "runtime_s": raw["gross_runtime"].astype(float),
            "machine_type": raw["machine_type"].astype(str),
            # slots and memory are cluster totals in C3O: per node keeps the context
            # independent of the scale-out (DESIGN.md, canonical run record).
            "cores": raw["slots"].astype(float) / n,
            "memory_mb": raw["memory"].astype(float) / n,
            "data_size_mb": raw["data_size_MB"].astype(float),
            "environment": "aws-emr",
        }
    )
    for col in C3O_JOB_COLUMNS[job_type]:
        frame[col] = raw[col].astype(float)
    frame["source"] = "trace"
    frame["status"] = "success"
    return frame


def _load_bell(job_type: str) -> pd.DataFrame:
    with resources.as_file(resources.files(_DATA) / "data" / "bell" / f"{job_type}.csv") as path:
        raw = pd.read_csv(path)
    frame = pd.DataFrame(
        {
            "job_type": job_type,
            "framework": "spark",
            "scale_out": raw["Nodes"].astype(int),
            "runtime_s": raw["Runtime"].astype(float) / 1000.0,  # Bell reports milliseconds
        }
    )
    for key, value in BELL_CONTEXTS[job_type].items():
        frame[key] = value
    frame["source"] = "trace"
    frame["status"] = "success"
    return frame


def load_traces(name: str | None = None, job_type: str | None = None) -> pd.DataFrame:
    """Every bundled run as one canonical frame, or one set ("c3o" / "bell").

    ``job_type`` narrows to one algorithm. Context columns a set does not have are
    left absent (NaN) for the other set's rows.
    """
    sets = available_traces()
    if name is not None and name not in sets:
        raise InvalidInputError("dataset", name, f"unknown trace set; choose one of {sorted(sets)}")
    frames: list[pd.DataFrame] = []
    for set_name, jobs in sets.items():
        if name is not None and set_name != name:
            continue
        for job in jobs:
            if job_type is not None and job != job_type:
                continue
            loaded = _load_c3o(job) if set_name == "c3o" else _load_bell(job)
            loaded["dataset"] = set_name
            frames.append(loaded)
    if not frames:
        raise InvalidInputError("job_type", job_type, f"no bundled traces for it in {name or 'any set'}")
    out = pd.concat(frames, ignore_index=True)
    return validate_runs(out, where=f"traces {name or 'all'}")


def load_runs_file(path: str | Path) -> pd.DataFrame:
    """Load a user's CSV/TSV of runs in the canonical columns, validating every row.

    The separator follows the suffix (``.tsv`` → tab, else comma). A bad row is
    reported with its line number in the file, the column and the value.
    """
    p = Path(path)
    if not p.is_file():
        raise InvalidInputError("path", str(p), "no such file")
    sep = _separator(p)
    try:
        raw = pd.read_csv(p, sep=sep, skipinitialspace=True)
    except (pd.errors.ParserError, UnicodeDecodeError, pd.errors.EmptyDataError) as exc:
        raise InvalidInputError(
            "path", str(p), f"cannot be parsed as {'TSV' if sep == chr(9) else 'CSV'}: {exc}"
        ) from None
    lines = _data_lines(p, sep)
    if len(lines) != len(raw):  # a layout the check below cannot follow: count rows from line 2
        lines = [pos + 2 for pos in range(len(raw))]
    frame = validate_runs(raw, where=str(p), lines=lines)
    check_complete_properties(frame, where=str(p), lines=lines)
    frame.attrs[SOURCE_ATTR] = str(p)
    frame.attrs[SOURCE_LINES_ATTR] = dict(zip(frame.index.tolist(), lines, strict=True))
    return frame


def _data_lines(path: Path, sep: str) -> list[int]:
    """The file line of each data row; a row with fewer fields than the header is refused (a CSV
    reader would fill the missing fields with nothing and the run would be stored without them)."""
    with path.open(newline="", encoding="utf-8") as handle:
        reader = csv.reader(handle, delimiter=sep, skipinitialspace=True)
        header = next(reader, None) or []
        lines: list[int] = []
        start = reader.line_num + 1
        for record in reader:
            if len(record) > 1 or (record and record[0].strip()):  # blank lines are skipped
                if len(record) < len(header):
                    missing = [h.strip() for h in header[len(record) :]]
                    raise InvalidInputError(
                        missing[0],
                        "<missing>",
                        f"the row has {len(record)} fields, the header {len(header)}: no "
                        f"{', '.join(missing)}",
                        where=f"{path} line {start}",
                    )
                lines.append(start)
            start = reader.line_num + 1
    return lines


def _separator(path: Path) -> str:
    return "\t" if path.suffix.lower() in {".tsv", ".tab"} else ","


# Names that promise another format: the runs file is text (CSV, TSV for .tsv/.tab), never
# written under a name a reader would open as something else.
_OTHER_FORMATS = frozenset(
    {".parquet", ".pq", ".json", ".jsonl", ".xlsx", ".xls", ".avro", ".orc", ".feather"}
)


def write_runs_file(runs: pd.DataFrame, path: str | Path, *, overwrite: bool = False) -> int:
    """Write runs in the canonical columns to a CSV/TSV file ``load_runs_file`` reads back (the
    separator follows the suffix); returns the rows written.

    An existing file is kept unless ``overwrite``; the file appears whole or not at all (written
    beside it, then renamed), so a failed export never leaves half a file in its place.
    """
    p = _target(path, overwrite)
    partial = p.with_name(f".{p.name}.partial")
    try:
        runs.to_csv(partial, sep=_separator(p), index=False)
        partial.replace(p)
    finally:
        partial.unlink(missing_ok=True)
    return len(runs)


def write_runs_chunks(
    chunks: Iterable[pd.DataFrame], columns: list[str], path: str | Path, *, overwrite: bool = False
) -> int:
    """``write_runs_file`` for runs that come in chunks, each written in ``columns`` under one
    header: a store's year of runs does not fit in memory as one frame. Returns the rows written;
    none: no file is left."""
    p = _target(path, overwrite)
    partial = p.with_name(f".{p.name}.partial")
    written = 0
    try:
        with partial.open("w", newline="", encoding="utf-8") as handle:
            for chunk in chunks:
                if chunk.empty:
                    continue
                chunk = chunk.reindex(columns=columns)
                for col in _NULLABLE_INT_COLUMNS & set(columns):
                    # whole numbers or nothing in every chunk, not 1.0 where a chunk has an empty one
                    chunk[col] = chunk[col].astype("Int64")
                chunk.to_csv(handle, sep=_separator(p), index=False, header=written == 0)
                written += len(chunk)
        if written:
            partial.replace(p)
    finally:
        partial.unlink(missing_ok=True)
    return written


# Provenance columns holding integers or nothing (pandas would write 1.0 beside an empty value).
_NULLABLE_INT_COLUMNS = frozenset({"map_index", "try_number", "decision_id", "requested_scale_out"})


def _target(path: str | Path, overwrite: bool) -> Path:
    """The file to write runs to, checked before anything is read or written."""
    p = Path(path)
    if p.is_dir():
        raise InvalidInputError("path", str(p), "is a directory; give a file name")
    if p.suffix.lower() in _OTHER_FORMATS:
        raise InvalidInputError(
            "path", str(p), f"names a {p.suffix} file; runs are written as CSV (.csv) or TSV (.tsv)"
        )
    if p.exists() and not overwrite:
        raise InvalidInputError("path", str(p), "exists already; pass overwrite=True (--force) to replace it")
    if not p.parent.is_dir():
        raise InvalidInputError("path", str(p), f"its folder {p.parent} does not exist")
    return p
