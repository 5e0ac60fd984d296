"""Bad input and store faults a new user meets (issue 18, item 6): each is refused with a clear
error naming the field and the value, and loses nothing already stored."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from airflow_provider_bellamy.cli import main
from airflow_provider_bellamy.exceptions import InvalidInputError, StoreError
from airflow_provider_bellamy.facade import Bellamy
from airflow_provider_bellamy.store.engine import parse_url
from tests.fixtures.permissions import cli_without_root_rights

HEADER = "job_type,framework,scale_out,runtime_s,machine_type,cores,data_size_mb\n"
CONTEXT = {"machine_type": "m5.xlarge", "cores": 8, "data_size_mb": 2048}


def _store(tmp_path: Path) -> Bellamy:
    return Bellamy(f"sqlite:///{tmp_path / 'b.db'}")


def _history(b: Bellamy, context: dict[str, Any] | None = None) -> None:
    """Runs of one context at three scale-outs: enough for the Ernest fallback to predict."""
    for n, runtime in ((2, 400.0), (4, 220.0), (8, 130.0)):
        b.record_run(
            job_type="grep", framework="spark", scale_out=n, runtime_s=runtime, context=context or CONTEXT
        )


# ------------------------------------------------------------------------------------ D1: files


def test_a_csv_row_with_too_few_fields_is_refused_naming_file_line_and_field(tmp_path: Path) -> None:
    runs = tmp_path / "runs.csv"
    runs.write_text(
        HEADER
        + "grep,spark,2,400,m5.xlarge,8,2048\n\ngrep,spark,4,220,m5.xlarge\ngrep,spark,8,130,m5.xlarge,8,2048\n"
    )
    url = f"sqlite:///{tmp_path / 'b.db'}"
    assert main(["--store-url", url, "history", "import", str(runs)]) == 2
    with pytest.raises(InvalidInputError) as err:
        from airflow_provider_bellamy.datasets import load_runs_file

        load_runs_file(runs)
    # the blank line 3 counts: the short row is line 4 of the file
    assert err.value.field == "cores" and err.value.where == f"{runs} line 4"
    assert "2048" not in str(err.value) and "no cores, data_size_mb" in str(err.value)
    assert Bellamy(url).count_runs() == 0


def test_an_empty_property_in_some_runs_of_a_job_type_is_refused(tmp_path: Path) -> None:
    runs = tmp_path / "runs.tsv"
    runs.write_text(
        HEADER.replace(",", "\t")
        + "grep\tspark\t2\t400\tm5.xlarge\t8\t2048\n"
        + "grep\tspark\t4\t220\tm5.xlarge\t\t2048\n"
    )
    url = f"sqlite:///{tmp_path / 'b.db'}"
    b = Bellamy(url)
    _history(b)
    assert main(["--store-url", url, "history", "import", str(runs)]) == 2
    with pytest.raises(InvalidInputError, match=rf"{runs} line 3: cores=") as err:
        from airflow_provider_bellamy.datasets import load_runs_file

        load_runs_file(runs)
    assert err.value.field == "cores"
    assert b.count_runs() == 3  # nothing lost, nothing added


def test_a_frame_with_nan_in_some_runs_of_a_job_type_is_refused(tmp_path: Path) -> None:
    import pandas as pd

    b = _store(tmp_path)
    frame = pd.DataFrame(
        {
            "job_type": ["grep", "grep"],
            "framework": ["spark", "spark"],
            "scale_out": [2, 4],
            "runtime_s": [400.0, 220.0],
            "cores": [8.0, math.nan],
        }
    )
    with pytest.raises(InvalidInputError, match="runs row 1: cores="):
        b.record_runs(frame)
    assert b.count_runs() == 0
    # another context of the job type (here: another data size) may lack the property
    frame["data_size_mb"] = [100.0, 200.0]
    assert len(b.record_runs(frame)) == 2
    assert [r["context"] for r in b.list_runs("grep")] == [
        {"data_size_mb": 200.0},
        {"cores": 8.0, "data_size_mb": 100.0},
    ]


# ------------------------------------------------------------------------- D1: NaN and infinity


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf, "nan", "inf", "-Infinity", "1e999"])
def test_nan_and_infinity_are_refused_everywhere_naming_the_field(tmp_path: Path, bad: Any) -> None:
    b = _store(tmp_path)
    _history(b)
    context = {**CONTEXT, "cores": bad}
    with pytest.raises(InvalidInputError) as err:
        b.record_run(job_type="grep", framework="spark", scale_out=2, runtime_s=1.0, context=context)
    assert err.value.field == "context.cores"
    with pytest.raises(InvalidInputError) as err:
        b.record_runs(
            [{"job_type": "grep", "framework": "spark", "scale_out": 2, "runtime_s": 1.0, **context}]
        )
    assert err.value.field == "context.cores"
    for call in (b.predict, lambda *a: b.size(*a, 300.0)):
        with pytest.raises(InvalidInputError) as err:
            call("grep", context, [2, 4])
        assert err.value.field == "context.cores"
    assert b.count_runs() == 3 and b.list_decisions() == []


def test_cli_set_nan_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    url = f"sqlite:///{tmp_path / 'b.db'}"
    _history(Bellamy(url))
    args = ["--store-url", url, "size", "grep", "--scale-outs", "2,4,8", "--target", "300"]
    assert (
        main([*args, "--set", "machine_type=m5.xlarge", "--set", "cores=nan", "--set", "data_size_mb=2048"])
        == 2
    )
    assert "context.cores='nan': must be a finite number" in capsys.readouterr().err


# --------------------------------------------------------------- D1: values no cluster can have

IMPOSSIBLE = [("cores", -8), ("cores", "-8"), ("cores", 0), ("memory_mb", 0), ("memory_mb", -1.5),
              ("data_size_mb", -5), ("data_size_mb", " -5.0 ")]  # fmt: skip


@pytest.mark.parametrize(("name", "bad"), IMPOSSIBLE)
def test_an_impossible_physical_value_is_refused_at_every_entry(tmp_path: Path, name: str, bad: Any) -> None:
    """A node's cores or memory at or below 0, a negative input size: refused naming the field and
    the value (``"-8"``, as Jinja renders -8, too), before anything is stored or sized."""
    from airflow_provider_bellamy.spec import SizingSpec

    b = _store(tmp_path)
    _history(b, {**CONTEXT, "memory_mb": 16384})
    context = {**CONTEXT, "memory_mb": 16384, name: bad}
    field = f"context.{name}"
    with pytest.raises(InvalidInputError, match=rf"{field}={bad!r}: is .*: must be [>=]+ 0") as err:
        b.record_run(job_type="grep", framework="spark", scale_out=2, runtime_s=1.0, context=context)
    assert (err.value.field, err.value.value) == (field, bad)
    with pytest.raises(InvalidInputError) as err:
        b.record_runs(
            [{"job_type": "grep", "framework": "spark", "scale_out": 2, "runtime_s": 1.0, **context}]
        )
    assert (err.value.field, err.value.value) == (field, bad)
    # a job type with no runs yet: no stored kind to convert to, refused all the same
    with pytest.raises(InvalidInputError) as err:
        b.record_run(job_type="new", framework="spark", scale_out=2, runtime_s=1.0, context=context)
    assert err.value.field == field
    for call in (b.predict, lambda *a: b.size(*a, 300.0)):
        with pytest.raises(InvalidInputError) as err:
            call("grep", context, [2, 4])
        assert (err.value.field, err.value.value) == (field, bad)
    # the operators' and pipeline files' parser, after templates render
    with pytest.raises(InvalidInputError) as err:
        SizingSpec.parse({"job_type": "grep", "scale_outs": [2, 4], "properties": context})
    assert (err.value.field, err.value.value) == (f"properties.{name}", bad)
    assert b.count_runs() == 3 and b.list_decisions() == []


def test_zero_input_is_a_size_but_no_node_has_zero_cores(tmp_path: Path) -> None:
    """A job that reads nothing (it generates its data) has data_size_mb 0; its ratios are 0."""
    from airflow_provider_bellamy.model.features import context_of

    b = _store(tmp_path)
    context = {**CONTEXT, "memory_mb": 16384, "data_size_mb": 0}
    b.record_run(job_type="gen", framework="spark", scale_out=2, runtime_s=1.0, context=context)
    stored = b.runs_frame("gen").iloc[0]
    assert stored["data_size_mb"] == 0.0
    derived = context_of(
        "gen", {k: stored[k] for k in ("machine_type", "cores", "memory_mb", "data_size_mb")}
    )
    assert derived["data_per_core_mb"] == 0.0 and derived["data_per_node_memory"] == 0.0


def test_every_derived_ratio_input_is_a_checked_physical_property() -> None:
    """A ratio's input the rule forgot would again be dropped without a word."""
    from airflow_provider_bellamy.model.features import DERIVED
    from airflow_provider_bellamy.records import PHYSICAL_PROPERTIES

    assert {name for pair in DERIVED.values() for name in pair} <= set(PHYSICAL_PROPERTIES)
    for _numerator, denominator in DERIVED.values():
        least, inclusive, _ = PHYSICAL_PROPERTIES[denominator]
        assert least >= 0 and not inclusive  # a denominator is never 0


def test_cli_refuses_an_impossible_value_in_size_and_import(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = f"sqlite:///{tmp_path / 'b.db'}"
    _history(Bellamy(url))
    args = ["--store-url", url, "size", "grep", "--scale-outs", "2,4,8", "--target", "300"]
    assert (
        main([*args, "--set", "machine_type=m5.xlarge", "--set", "cores=-8", "--set", "data_size_mb=2048"])
        == 2
    )
    assert "context.cores='-8': is a node's cores: must be > 0" in capsys.readouterr().err
    runs = tmp_path / "runs.csv"
    runs.write_text(HEADER + "grep,spark,2,400,m5.xlarge,8,2048\ngrep,spark,4,220,m5.xlarge,8,-2048\n")
    assert main(["--store-url", url, "history", "import", str(runs)]) == 2
    err = capsys.readouterr().err
    assert f"{runs} line 3: context.data_size_mb=-2048" in err and "must be >= 0" in err
    assert Bellamy(url).count_runs() == 3  # nothing of the file stored


def test_a_pipeline_file_with_an_impossible_value_is_refused_naming_its_key(tmp_path: Path) -> None:
    from airflow_provider_bellamy.config import load_pipeline_config

    path = tmp_path / "jobs.yaml"
    path.write_text(
        "jobs:\n  grep:\n    framework: spark\n    scale_out: [2, 4, 8]\n    target: 300\n"
        "    properties: {machine_type: m5.xlarge, memory_mb: 0, data_size_mb: 2048}\n"
    )
    with pytest.raises(InvalidInputError) as err:
        load_pipeline_config(path)
    assert err.value.value == 0 and "memory_mb" in err.value.field
    assert "must be > 0" in str(err.value) and str(path) in str(err.value)


def test_a_store_holding_an_impossible_value_still_reads_and_trains(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Loses nothing already stored: runs recorded before the rule (written here with it switched
    off, as an older version wrote them) are read, trained on and exported; only new input is checked."""
    import pandas as pd

    from airflow_provider_bellamy import records
    from airflow_provider_bellamy.datasets import load_traces
    from airflow_provider_bellamy.model import TrainingConfig

    b = _store(tmp_path)
    sort = load_traces("c3o", job_type="sort")
    first = sort[sort["machine_type"] == sort["machine_type"].iloc[0]].head(40)
    b.record_runs(first)
    old = first.head(6).assign(cores=-8.0, memory_mb=0.0, data_size_mb=-5.0)
    with monkeypatch.context() as m:
        m.setattr(records, "PHYSICAL_PROPERTIES", {})
        b.record_runs(old)
    assert b.count_runs() == 46
    frame = b.runs_frame("sort")
    assert (frame["cores"] == -8.0).sum() == 6
    stored = {k: old.iloc[0][k] for k in records.context_columns(old.columns) if pd.notna(old.iloc[0][k])}
    found = b.runs_frame("sort", context=stored)  # its runs can still be found by their context
    assert len(found) >= 1 and (found["cores"] == -8.0).all()
    (report,) = b.train("sort", config=TrainingConfig(members=2, max_epochs=30, min_epochs=5, patience=5))
    assert report.outcome == "promoted"
    context = {
        k: first.iloc[0][k] for k in records.context_columns(first.columns) if pd.notna(first.iloc[0][k])
    }
    assert b.predict("sort", context, [2, 4]).mean_s
    b.export_runs(tmp_path / "all.csv")
    with pytest.raises(InvalidInputError, match=r"context.cores=-8"):
        b.record_runs(old.assign(cores=-8))


# ---------------------------------------------------------------------------- D2: wrong types


def test_a_number_given_as_text_is_the_number_for_a_numeric_property(tmp_path: Path) -> None:
    """As Jinja renders it: "8" for cores; same context, same prediction as 8."""
    b = _store(tmp_path)
    _history(b)
    native = b.size("grep", CONTEXT, [2, 4, 8], 300.0)
    rendered = b.size("grep", {k: str(v) for k, v in CONTEXT.items()}, [2, 4, 8], 300.0)
    assert "Ernest fitted on this context's 3 runs" in (native.fallback_reason or "")
    stored = {d["id"]: d for d in b.list_decisions()}
    assert (
        stored[rendered.decision_id]["context_fingerprint"]
        == stored[native.decision_id]["context_fingerprint"]
    )
    assert stored[rendered.decision_id]["context"] == {
        "machine_type": "m5.xlarge",
        "cores": 8.0,
        "data_size_mb": 2048.0,
    }
    assert [c.predicted_s for c in rendered.candidates] == [c.predicted_s for c in native.candidates]
    assert (
        b.predict("grep", {**CONTEXT, "cores": " 8.0 "}, [4]).mean_s == b.predict("grep", CONTEXT, [4]).mean_s
    )
    # a run recorded with rendered values joins the context's history
    b.record_run(
        job_type="grep", framework="spark", scale_out=4, runtime_s=230.0, context={**CONTEXT, "cores": "8"}
    )
    assert len(b.runs_frame("grep", context=CONTEXT)) == 4


def test_text_that_is_no_number_for_a_numeric_property_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    b = _store(tmp_path)
    _history(b)
    with pytest.raises(InvalidInputError, match=r"context\.cores='abc': must be a number") as err:
        b.size("grep", {**CONTEXT, "cores": "abc"}, [2, 4, 8], 300.0)
    assert err.value.field == "context.cores" and err.value.value == "abc"
    with pytest.raises(InvalidInputError, match=r"context\.cores"):
        b.record_run(
            job_type="grep", framework="spark", scale_out=2, runtime_s=1.0, context={**CONTEXT, "cores": True}
        )
    url = str(b.store.url)
    args = ["--store-url", url, "predict", "grep", "--scale-outs", "2,4", "--set", "machine_type=m5.xlarge"]
    assert main([*args, "--set", "cores=abc", "--set", "data_size_mb=2048"]) == 2
    assert "context.cores='abc'" in capsys.readouterr().err
    assert b.count_runs() == 3 and b.list_decisions() == []


def test_a_number_for_a_text_property_is_its_text_when_it_is_an_integer(tmp_path: Path) -> None:
    b = _store(tmp_path)
    _history(b)  # machine_type holds text: "m5.xlarge"
    _history(b, {**CONTEXT, "machine_type": "42"})
    assert {r["context"]["machine_type"] for r in b.list_runs()} == {"m5.xlarge", "42"}
    as_number = b.size("grep", {**CONTEXT, "machine_type": 42}, [2, 4, 8], 300.0)
    assert "Ernest fitted on this context's 3 runs" in (
        as_number.fallback_reason or ""
    )  # found the context's runs
    assert b.list_decisions()[0]["context"]["machine_type"] == "42"
    with pytest.raises(InvalidInputError, match=r"context\.machine_type=4\.5: .*give it as text"):
        b.size("grep", {**CONTEXT, "machine_type": 4.5}, [2, 4, 8], 300.0)


def test_a_number_for_a_text_property_is_the_one_stored_text_reading_as_it(tmp_path: Path) -> None:
    """``version: 1.0`` (YAML reads a float) where the runs hold ``"1.0"`` was ``"1"``: a context
    without runs, silently. The one stored text reading as the number is taken; where several do,
    refused naming them; where none does, an integer is its text (a new value, as before)."""
    b = _store(tmp_path)
    _history(b)  # machine_type holds text: "m5.xlarge"
    _history(b, {**CONTEXT, "machine_type": "1.0"})
    for given in (1.0, 1, np.float64(1.0)):
        decision = b.size("grep", {**CONTEXT, "machine_type": given}, [2, 4, 8], 300.0)
        assert "Ernest fitted on this context's 3 runs" in (decision.fallback_reason or ""), given
        assert b.list_decisions()[0]["context"]["machine_type"] == "1.0"
    b.record_run(
        job_type="grep",
        framework="spark",
        scale_out=2,
        runtime_s=390.0,
        context={**CONTEXT, "machine_type": 1.0},
    )
    assert {r["context"]["machine_type"] for r in b.list_runs()} == {"m5.xlarge", "1.0"}
    _history(b, {**CONTEXT, "machine_type": "1"})
    assert b.size("grep", {**CONTEXT, "machine_type": 1}, [2, 4, 8], 300.0).context["machine_type"] == "1"
    with pytest.raises(InvalidInputError, match=r"context\.machine_type=1\.0: .*'1', '1\.0'") as err:
        b.size("grep", {**CONTEXT, "machine_type": 1.0}, [2, 4, 8], 300.0)
    assert err.value.field == "context.machine_type"
    assert b.size("grep", {**CONTEXT, "machine_type": 2.0}, [2, 4, 8], 300.0).context["machine_type"] == "2"


def test_a_framework_neither_launched_nor_recorded_is_refused_naming_the_known_ones(tmp_path: Path) -> None:
    """``framework="sprak"`` was sized as an unseen framework value (the model reads it as a
    property), silently; a framework of one's own is sized once runs of it are recorded."""
    b = _store(tmp_path)
    _history(b)
    with pytest.raises(InvalidInputError, match=r"known: flink, spark\)") as err:
        b.size("grep", CONTEXT, [2, 4, 8], 300.0, framework="sprak")
    assert (err.value.field, err.value.value) == ("framework", "sprak")
    with pytest.raises(InvalidInputError, match="framework='sprak'"):
        b.predict("grep", CONTEXT, [2, 4], framework="sprak")
    assert b.list_decisions() == []
    assert b.size("grep", CONTEXT, [2, 4, 8], 300.0, framework=" Flink ").framework == "flink"
    b.record_run(job_type="other", framework="dask", scale_out=2, runtime_s=10.0, context={"cores": 1})
    assert b.size("grep", CONTEXT, [2, 4, 8], 300.0, framework="dask").framework == "dask"
    with pytest.raises(InvalidInputError, match=r"known: dask, flink, spark\)"):
        b.size("grep", CONTEXT, [2, 4, 8], 300.0, framework="dsak")


def test_cli_set_keeps_the_text_of_a_text_property(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--set machine_type=08`` is the context whose runs hold "08" (as ``context={"machine_type":
    "08"}`` is): until session 26 the CLI read it as the number 8 first, a context without runs."""
    b = _store(tmp_path)
    _history(b)  # machine_type holds text: "m5.xlarge"
    _history(b, {**CONTEXT, "machine_type": "08"})
    args = ["--store-url", str(b.store.url), "size", "grep", "--scale-outs", "2,4,8", "--target", "300"]
    props = ["--set", "machine_type=08", "--set", "cores=8", "--set", "data_size_mb=2048", "--json"]
    assert main([*args, *props]) in (0, 3)
    decision = json.loads(capsys.readouterr().out)
    assert decision["context"] == {"machine_type": "08", "cores": 8.0, "data_size_mb": 2048.0}
    assert "Ernest fitted on this context's 3 runs" in decision["fallback_reason"]


def test_new_properties_take_their_kind_from_the_batch(tmp_path: Path) -> None:
    b = _store(tmp_path)
    base = {"job_type": "sort", "framework": "spark", "scale_out": 2, "runtime_s": 9.0}
    # all text: a label column, "42" stays text (as a CSV reader keeps it)
    b.record_runs([{**base, "machine_type": "42"}, {**base, "machine_type": "m5"}])
    assert {r["context"]["machine_type"] for r in b.list_runs("sort")} == {"42", "m5"}
    # numbers next to text that is no number: refused, naming the text
    with pytest.raises(InvalidInputError, match=r"runs row 1: iterations='ten': is text while other runs"):
        b.record_runs(
            [{**base, "job_type": "pr", "iterations": 10}, {**base, "job_type": "pr", "iterations": "ten"}]
        )
    # "nan" next to numbers given as text is no text property: refused as NaN
    with pytest.raises(InvalidInputError, match=r"runs row 1: context\.cores='nan': must be a finite number"):
        b.record_runs([{**base, "job_type": "pr", "cores": "8"}, {**base, "job_type": "pr", "cores": "nan"}])
    assert b.count_runs() == 2


def test_conform_is_the_one_place_values_are_converted() -> None:
    from airflow_provider_bellamy.records import StoredKinds, conform_context, conform_property

    assert conform_property("8", None, field="cores") == 8.0
    assert conform_property("8", "text", field="cores") == "8"
    assert conform_property("08", "mixed", field="cores") == "08"
    assert conform_property(8, "mixed", field="cores") == 8.0
    assert conform_property(None, "number", field="cores") is None
    with pytest.raises(InvalidInputError, match="is empty"):
        conform_property(" ", "number", field="cores")
    kinds = StoredKinds.of({"name": "text"})
    assert conform_context({"cores": "1e3", "name": "a"}, kinds) == {"cores": 1000.0, "name": "a"}


def test_stored_kinds_are_one_read_only_value_with_the_number_lookup_built_once() -> None:
    """The stored texts reading as numbers travelled as an attribute of a ``dict`` subclass (a copy
    of the kinds, ``dict(kinds)`` or ``{**kinds}``, silently dropped them: ``1.0`` became ``"1"``,
    a context without runs) and were scanned on every conform call. ``StoredKinds`` carries both,
    read-only, with the lookup (number → stored texts) built once."""
    from airflow_provider_bellamy.records import conform_context, property_kinds

    stored = property_kinds([{"v": "1.0", "m": "m5"}, {"v": "1", "m": "m6"}, {"v": "2.50", "m": "4"}])
    assert dict(stored.kinds) == {"v": "text", "m": "text"}
    assert dict(stored.texts_of("v")) == {1.0: ("1", "1.0"), 2.5: ("2.50",)}
    assert dict(stored.texts_of("m")) == {4.0: ("4",)}
    with pytest.raises(TypeError):
        stored.kinds["v"] = "number"  # type: ignore[index]
    with pytest.raises(dataclasses.FrozenInstanceError):
        stored.kinds = {}  # type: ignore[misc]
    assert conform_context({"v": 1, "m": 4.0}, stored) == {"v": "1", "m": "4"}
    assert conform_context({"v": 2.5}, stored) == {"v": "2.50"}
    with pytest.raises(InvalidInputError, match=r"context\.v=1\.0: .*'1', '1\.0'"):
        conform_context({"v": 1.0}, stored)
    # a batch's new property keeps the stored lookup of the others
    merged = stored.with_new({"cores": "number", "v": "number"})
    assert merged.kind("cores") == "number" and merged.kind("v") == "text"
    assert conform_context({"v": 2.5, "cores": "8"}, merged) == {"v": "2.50", "cores": 8.0}


def test_yaml_config_properties_reach_sizing_converted(tmp_path: Path) -> None:
    from airflow_provider_bellamy.config import load_pipeline_config

    b = _store(tmp_path)
    _history(b)
    path = tmp_path / "jobs.yaml"
    path.write_text(
        "jobs:\n  grep:\n    framework: spark\n    scale_out: [2, 4, 8]\n    target: 300\n"
        "    properties: {machine_type: m5.xlarge, cores: '8', data_size_mb: '2048'}\n"
    )
    job = load_pipeline_config(path).jobs["grep"]
    decision = b.size(job.job_type, job.properties, job.scale_outs, job.target_s)
    assert "Ernest fitted on this context's 3 runs" in (decision.fallback_reason or "")


# --------------------------------------------------------------------- D3: store folder rights


def test_a_store_under_a_file_is_a_clear_error(tmp_path: Path) -> None:
    (tmp_path / "afile").write_text("x")
    b = Bellamy(f"sqlite:///{tmp_path / 'afile' / 'new.db'}")
    with pytest.raises(StoreError, match=r"cannot create the folder of the model store .*afile/new\.db"):
        b.record_run(job_type="grep", framework="spark", scale_out=2, runtime_s=1.0)
    with pytest.raises(StoreError, match="afile"):
        b.upgrade()


def test_a_store_in_a_folder_without_write_permission_is_a_clear_error(tmp_path: Path) -> None:
    """Root ignores permissions: as root the command runs without CAP_DAC_OVERRIDE (setpriv)."""
    readonly = tmp_path / "ro"
    readonly.mkdir()
    readonly.chmod(0o555)
    for store in (readonly / "new.db", readonly / "sub" / "new.db"):
        proc = cli_without_root_rights(str(store), "db", "upgrade")
        assert proc.returncode == 2, proc.stderr
        assert "Traceback" not in proc.stderr
        assert str(store) in proc.stderr and "Permission denied" in proc.stderr
    assert list(readonly.iterdir()) == []


# --------------------------------------------------------------------------- D8: store URLs


@pytest.mark.parametrize(
    "command",
    [
        ["history", "list"],
        ["history", "export", "runs.csv"],
        ["decisions", "list"],
        ["decisions", "show", "1"],
        ["models", "list"],
        ["train"],
        ["predict", "grep", "--set", "a=1", "--scale-outs", "2-8"],
        ["size", "grep", "--set", "a=1", "--scale-outs", "2-8", "--target", "10m"],
    ],
)
def test_a_command_that_reads_refuses_a_store_that_does_not_exist(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, command: list[str]
) -> None:
    """A mistyped SQLite path read as an empty store (exit 0, "no runs stored"); a write still
    creates the store, and an existing store reads as before."""
    monkeypatch.chdir(tmp_path)
    typo = tmp_path / "bellamy-typo.db"
    assert main(["--store-url", f"sqlite:///{typo}", *command]) == 2
    err = capsys.readouterr().err
    assert f"no model store at sqlite+pysqlite:///{typo} (no such file)" in err
    assert not typo.exists() and not (tmp_path / "runs.csv").exists()


def test_the_first_write_still_creates_a_store_a_read_then_finds(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = f"sqlite:///{tmp_path / 'new.db'}"
    assert main(["--store-url", url, "history", "import", "--traces", "bell"]) == 0
    assert main(["--store-url", url, "history", "list", "--limit", "1"]) == 0
    assert "runs (1 newest of" in capsys.readouterr().out
    # the library's reads still see a store that does not exist yet as empty (an operator's
    # look-ups before its first record), without creating it
    missing = tmp_path / "later.db"
    assert Bellamy(f"sqlite:///{missing}").count_runs() == 0 and not missing.exists()


def test_a_non_numeric_port_is_a_clear_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(InvalidInputError, match="port is not a number") as err:
        parse_url("postgresql+psycopg://bellamy:s3cret@db.example:54x2/bellamy")
    assert err.value.field == "store_url" and "s3cret" not in str(err.value)
    url = "postgresql://bellamy:s3cret@db.example:port/bellamy"
    assert main(["--store-url", url, "db", "current"]) == 2
    err_text = capsys.readouterr().err
    assert (
        "store_url='postgresql://bellamy:***@db.example:port/bellamy'" in err_text
        and "s3cret" not in err_text
    )


# ------------------------------------------------------------------------------------- limits


def test_candidate_lists_are_limited_in_one_place(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from airflow_provider_bellamy.config import load_pipeline_config
    from airflow_provider_bellamy.records import MAX_CANDIDATES

    b = _store(tmp_path)
    _history(b)
    with pytest.raises(InvalidInputError, match=f"more than {MAX_CANDIDATES:,} candidates") as err:
        b.size("grep", CONTEXT, range(1, 100_001), 300.0)
    assert err.value.field == "scale_outs"
    assert b.list_decisions() == []
    assert len(b.size("grep", CONTEXT, range(1, MAX_CANDIDATES + 1), 300.0).candidates) == MAX_CANDIDATES
    path = tmp_path / "jobs.yaml"
    path.write_text("jobs:\n  grep:\n    framework: spark\n    scale_out: {min: 1, max: 10000000}\n")
    with pytest.raises(InvalidInputError, match="10,000,000 candidate scale-outs") as err:
        load_pipeline_config(path)
    assert err.value.field == "jobs.grep.scale_out.max" and err.value.value == 10_000_000
    url = str(b.store.url)
    assert main(["--store-url", url, "predict", "grep", "--scale-outs", "1-10000000"]) == 2
    assert "--scale-outs='1-10000000': gives 10,000,000 candidate scale-outs" in capsys.readouterr().err
