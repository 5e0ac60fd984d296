"""``SizingSpec``: each sizing argument parsed once — a good value, the same value as Jinja renders
it (text), and a bad value refused naming the field and the value."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

import pytest

from airflow_provider_bellamy.exceptions import InvalidInputError
from airflow_provider_bellamy.records import conform_context
from airflow_provider_bellamy.spec import (
    SIZING_ARGUMENTS,
    SizingSpec,
    parse_argument_list,
    parse_duration,
    parse_mapping,
)

BASE: dict[str, Any] = {"job_type": "grep", "scale_outs": [1, 2, 4]}
DEADLINE = "2026-11-23T06:00:00+00:00"

# (argument, good value, what the spec holds for it, its Jinja-rendered text, a bad value,
#  extra arguments the argument needs)
FIELDS: list[tuple[str, Any, Any, str, Any, dict[str, Any]]] = [
    ("job_type", "grep", "grep", " grep ", "all", {}),
    ("framework", "Spark", "spark", "spark", 3, {}),
    ("properties", {"cores": 8}, {"cores": 8}, '{"cores": 8}', {"cores": float("nan")}, {}),
    # "{{ params.context }}" renders a dict as Python writes it; a literal is read, code never
    (
        "properties",
        {"cores": 8, "m": "r4"},
        {"cores": 8, "m": "r4"},
        "{'cores': 8, 'm': 'r4'}",
        "__import__('os')",
        {},
    ),
    ("scale_outs", [4, 1, 2], [1, 2, 4], "[1, 2, 4]", [1, 0], {}),
    (
        "scale_outs",
        {"min": 2, "max": 6, "step": 2},
        [2, 4, 6],
        "{'min': 2, 'max': 6, 'step': 2}",
        {"min": 3},
        {},
    ),
    ("target", 900, 900.0, "15m", "soon", {}),
    ("target", dt.timedelta(minutes=15), 900.0, "900", 0, {}),
    # a timedelta as Jinja renders it ({{ macros.timedelta(minutes=15) }}), and pendulum's ISO text
    ("target", dt.timedelta(minutes=15), 900.0, "0:15:00", "1h30", {}),
    ("target", dt.timedelta(hours=26), 93_600.0, "1 day, 2:00:00", "P1M", {}),
    ("target", dt.timedelta(hours=26), 93_600.0, "P1DT2H", "15M", {}),
    (
        "deadline",
        dt.datetime(2026, 11, 23, 6, tzinfo=dt.timezone.utc),
        DEADLINE,
        DEADLINE,
        "2026-11-23T06:00",
        {},
    ),
    ("use_dag_deadline", True, True, None, "yes", {}),
    ("deadline_alert_name", "sla", "sla", None, " ", {"deadline": "dag"}),
    ("reserve", 600, 600.0, "10m", "later", {"deadline": DEADLINE}),
    ("reserve", "auto", "auto", "auto", -1, {"deadline": DEADLINE}),
    ("default_task_reserve", 30, 30.0, "30s", "-5", {"deadline": DEADLINE, "reserve": "auto"}),
    ("confidence", 0.95, 0.95, "0.95", 1.5, {}),
    ("objective", "fastest", "fastest", "fastest", "cheapest", {}),
    ("price_per_node_hour", 0.25, 0.25, "0.25", -1, {}),
    ("on_infeasible", "run_max", "run-max", "run-max", "panic", {}),
    ("on_infeasible", "run-likely", "run-likely", " run_likely ", "likely", {}),
    ("default_scale_out", 2, 2, "2", "2.5", {}),
]


def _parse(argument: str, value: Any, extra: dict[str, Any]) -> SizingSpec:
    return SizingSpec.parse({**BASE, **extra, argument: value})


def _held(spec: SizingSpec, argument: str) -> Any:
    return spec.arguments()[argument]


@pytest.mark.parametrize(("argument", "good", "held", "rendered", "bad", "extra"), FIELDS)
def test_each_argument_good_rendered_and_bad(
    argument: str, good: Any, held: Any, rendered: str | None, bad: Any, extra: dict[str, Any]
) -> None:
    assert _held(_parse(argument, good, extra), argument) == held
    if rendered is not None:  # as a template renders it: the same spec
        assert _parse(argument, rendered, extra) == _parse(argument, good, extra)
    with pytest.raises(InvalidInputError) as err:
        _parse(argument, bad, extra)
    assert err.value.field.split(".")[0].split("[")[0] == argument
    assert repr(err.value.value) in str(err.value) or str(err.value.value) in str(err.value)


def test_every_argument_is_in_the_table() -> None:
    assert {row[0] for row in FIELDS} == set(SIZING_ARGUMENTS)


@pytest.mark.parametrize(
    ("arguments", "field", "value"),
    [
        ({"target": 60, "deadline": DEADLINE}, "deadline", DEADLINE),
        ({"target": "1m", "deadline": "dag"}, "deadline", "dag"),
        ({"target": 60, "use_dag_deadline": True}, "use_dag_deadline", True),
        ({"deadline": DEADLINE, "use_dag_deadline": True}, "use_dag_deadline", True),
        ({"reserve": "10m"}, "reserve", "10m"),
        # read only with reserve auto, only with the DAG's DeadlineAlert: refused, not ignored
        ({"target": 60, "default_task_reserve": "1m"}, "default_task_reserve", "1m"),
        ({"deadline": DEADLINE, "reserve": "5m", "default_task_reserve": 30}, "default_task_reserve", 30),
        ({"target": 60, "deadline_alert_name": "sla"}, "deadline_alert_name", "sla"),
        ({"deadline": DEADLINE, "deadline_alert_name": "sla"}, "deadline_alert_name", "sla"),
        ({"objective": "min_cost"}, "price_per_node_hour", None),
        ({"default_scale_out": 3}, "default_scale_out", 3),
        ({"scale_outs": None}, "scale_outs", None),
        ({"scale_outs": "1, two"}, "scale_outs", "1, two"),
        ({"scale_outs": [1, 2, 2.5]}, "scale_outs[2]", 2.5),
        ({"scale_outs": {"min": 1, "max": 10**7}}, "scale_outs.max", 10**7),
        ({"properties": {"scale_out": 4}}, "properties.scale_out", 4),
        ({"properties": "not json"}, "properties", "not json"),
        ({"job_type": None}, "job_type", None),
        ({"targte": 60}, "targte", 60),
        # the likely sizes are chosen among by the objective: fastest would make it warn's
        ({"on_infeasible": "run_likely", "objective": "fastest"}, "on_infeasible", "run_likely"),
    ],
)
def test_rules_between_arguments_name_the_field_and_value(
    arguments: dict[str, Any], field: str, value: Any
) -> None:
    with pytest.raises(InvalidInputError) as err:
        SizingSpec.parse({**BASE, **arguments})
    assert (err.value.field, err.value.value) == (field, value)


@pytest.mark.parametrize("key", [1, "", "  ", " cores", "cores ", None])
def test_a_property_name_that_is_no_clean_text_is_refused_at_parse_naming_it(key: Any) -> None:
    """Each was kept and failed only at launch (1, ""), or kept silently as another property than
    ``cores``, whose runs it never finds (" cores"); refused at parse through every door, and in
    a recorded run's context (records' one rule)."""
    with pytest.raises(InvalidInputError) as err:
        SizingSpec.parse({**BASE, "properties": {"machine": "m5", key: 8}})
    assert (err.value.field, err.value.value) == ("properties key", key)
    with pytest.raises(InvalidInputError) as err:
        conform_context({key: 8})
    assert (err.value.field, err.value.value) == ("context key", key)


def test_errors_carry_the_prefix_the_names_and_the_place() -> None:
    with pytest.raises(InvalidInputError) as err:
        SizingSpec.parse(
            {**BASE, "scale_outs": [1, 0]},
            prefix="jobs.j.",
            names={"scale_outs": "scale_out"},
            where="p.yaml",
        )
    assert str(err.value).startswith("p.yaml: jobs.j.scale_out[1]=0: ")


def test_settings_of_one_combination_wait_for_the_templates_that_decide_it() -> None:
    """``default_task_reserve`` is read only with ``reserve: auto``, ``deadline_alert_name`` only
    with the DAG's DeadlineAlert: with a template still to decide that, the check waits for it."""
    late = {**BASE, "deadline": "{{ params.deadline }}", "reserve": "{{ params.reserve }}"}
    spec = SizingSpec.parse(
        {**late, "default_task_reserve": 30, "deadline_alert_name": "sla"}, defer_templates=True
    )
    assert spec.templated == {"deadline", "reserve"}
    rendered = {**late, "deadline": "dag", "reserve": "auto"}
    spec = SizingSpec.parse({**rendered, "default_task_reserve": 30, "deadline_alert_name": "sla"})
    assert spec.use_dag_deadline and spec.deadline_alert_name == "sla"
    assert spec.default_task_reserve_s == 30.0
    with pytest.raises(InvalidInputError) as err:
        SizingSpec.parse({**rendered, "reserve": "10m", "default_task_reserve": 30})
    assert (err.value.field, err.value.value) == ("default_task_reserve", 30)
    with pytest.raises(InvalidInputError) as err:
        SizingSpec.parse({**rendered, "deadline": DEADLINE, "deadline_alert_name": "sla"})
    assert (err.value.field, err.value.value) == ("deadline_alert_name", "sla")


@pytest.mark.parametrize("nothing", ["", "   ", "\n", None])
def test_a_target_that_rendered_nothing_is_no_target(nothing: Any) -> None:
    """``"{{ params.target or '' }}"``: a template rendering nothing (or only white space) means
    "no target", as leaving it out: sizing by the objective alone, or by a deadline."""
    assert SizingSpec.parse({**BASE, "target": nothing}) == SizingSpec.parse(BASE)
    assert SizingSpec.parse({**BASE, "target": nothing}).target_s is None
    with_deadline = SizingSpec.parse({**BASE, "target": nothing, "deadline": DEADLINE})
    assert with_deadline.deadline == DEADLINE and with_deadline.target_s is None


def test_deadline_dag_is_the_dags_deadline_alert() -> None:
    spec = SizingSpec.parse({**BASE, "deadline": "dag", "reserve": "auto"})
    assert spec.use_dag_deadline and spec.deadline is None and spec.reserve == "auto"


def test_templates_wait_for_rendering_and_are_parsed_then() -> None:
    raw = {
        **BASE,
        "scale_outs": "{{ params.sizes }}",
        "confidence": "{{ params.q }}",
        "default_scale_out": "{{ params.n }}",
        "properties": {"cores": "{{ params.cores }}", "machine": "m5"},
    }
    spec = SizingSpec.parse(raw, defer_templates=True)
    assert spec.templated == {"scale_outs", "confidence", "default_scale_out"}
    # what the templates render to is parsed as any value
    rendered = {
        **raw,
        "scale_outs": "[2, 4]",
        "confidence": "0.8",
        "default_scale_out": "4",
        "properties": {},
    }
    assert SizingSpec.parse(rendered).scale_outs == [2, 4]
    with pytest.raises(InvalidInputError, match="default_scale_out"):
        SizingSpec.parse({**rendered, "default_scale_out": "3"})
    # an argument Airflow never renders is never a template: refused at once
    with pytest.raises(InvalidInputError) as err:
        SizingSpec.parse({**BASE, "objective": "{{ params.objective }}"}, defer_templates=True)
    assert err.value.field == "objective"
    # unrendered, a template is no value
    with pytest.raises(InvalidInputError, match="scale_outs"):
        SizingSpec.parse({**BASE, "scale_outs": "{{ params.sizes }}"})


def test_arguments_round_trip() -> None:
    spec = SizingSpec.parse(
        {**BASE, "deadline": DEADLINE, "reserve": "5m", "objective": "min_cost", "price_per_node_hour": "0.5"}
    )
    assert SizingSpec.parse(spec.arguments()) == spec


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("90", 90.0),
        ("1e3", 1000.0),
        ("90s", 90.0),
        (" 15m ", 900.0),
        ("1h 30m", 5400.0),
        ("0.5h", 1800.0),
        ("1d12h", 129_600.0),
        ("2w", 1_209_600.0),
        (str(dt.timedelta(minutes=15)), 900.0),
        (str(dt.timedelta(days=2, seconds=0.5)), 172_800.5),
        ("PT15M", 900.0),
        ("pt1h", 3600.0),
        ("P2W", 1_209_600.0),
    ],
)
def test_duration_text_every_door_reads(text: str, seconds: float) -> None:
    assert parse_duration(text, "target") == seconds


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("1h30", "must be a duration"),  # 30 minutes or 30 seconds?
        ("15M", "must be a duration"),  # minutes, or ISO 8601's months?
        ("P1M", "must be a duration"),  # a month has no fixed length
        ("15 min", "must be a duration"),
        ("PT", "must be a duration"),
        ("inf", "must be a duration"),
        ("-5", "> 0"),
        (str(-dt.timedelta(minutes=15)), "> 0"),
        ("0:00:00", "> 0"),
    ],
)
def test_ambiguous_or_negative_duration_text_is_refused_naming_it(text: str, problem: str) -> None:
    with pytest.raises(InvalidInputError) as err:
        parse_duration(text, "target")
    assert err.value.field == "target" and err.value.value == text
    assert problem in str(err.value)


class _Reference:
    """Stands for an XCom reference (``task.output``): what ``is_template`` knows it by."""

    def iter_references(self) -> list[Any]:
        return []


def test_argument_lists_and_mappings_as_given_and_as_rendered() -> None:
    ref = _Reference()
    assert parse_argument_list(["--lines", 400, ref]) == ["--lines", "400", ref]  # ref: rendered later
    assert parse_argument_list("['--lines', '400']") == ["--lines", "400"]  # a list as Jinja renders it
    assert parse_argument_list(None) == []
    for bad in ("--lines 400", "[--lines, 400", {"a": 1}, 3):
        with pytest.raises(InvalidInputError, match=r"application_args=.*must be a list of arguments"):
            parse_argument_list(bad)
    assert parse_mapping("{'a': 1}", "conf") == {"a": 1} == parse_mapping('{"a": 1}', "conf")
    assert parse_mapping(None, "conf") == {}
    for bad in ("a=1", "[1, 2]", "__import__('os')"):
        with pytest.raises(InvalidInputError, match="conf="):
            parse_mapping(bad, "conf")


@pytest.mark.parametrize(
    ("text", "candidates"),
    [
        ("1-4", [1, 2, 3, 4]),
        (" 2 - 12 : 5 ", [2, 7, 12]),
        ("4,1,2", [1, 2, 4]),
        ("[4, 1, 2]", [1, 2, 4]),
        ("8,", [8]),
    ],
)
def test_candidates_text_reads_the_same_through_every_door(
    tmp_path: Path, text: str, candidates: list[int]
) -> None:
    """One grammar of candidates: the operators' rendered text, a pipeline file and the CLI's
    ``--scale-outs`` (which read "1-4" and "[1, 2, 4]" differently before, each refusing the other's)."""
    from airflow_provider_bellamy.cli._args import scale_outs_from
    from airflow_provider_bellamy.config import load_pipeline_config

    assert SizingSpec.parse({**BASE, "scale_outs": text}).scale_outs == candidates
    assert scale_outs_from(text) == candidates
    path = tmp_path / "p.yaml"
    path.write_text(f"jobs:\n  j:\n    framework: spark\n    scale_out: '{text}'\n")
    assert load_pipeline_config(path).job("j").scale_outs == candidates


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ("4-1", "max must be >= min (4)"),
        ("0-3", "min must be an integer >= 1"),
        ("2-8:0", "step must be an integer >= 1"),
        ("1-99999", "gives 99,999 candidate scale-outs"),
        ("1..4", "must be candidate scale-outs"),
        ("1,2,,4", "must be candidate scale-outs"),
        # one number: the only candidate, or all up to it ("{{ params.max_nodes }}")?
        (8, "give [8] (or 8,) for one candidate, or 1-8 for 1 to 8"),
        ("8", "give [8] (or 8,) for one candidate, or 1-8 for 1 to 8"),
    ],
)
def test_bad_candidates_are_named_by_the_value_given(value: Any, problem: str) -> None:
    from airflow_provider_bellamy.cli._args import scale_outs_from

    with pytest.raises(InvalidInputError) as err:
        SizingSpec.parse({**BASE, "scale_outs": value})
    assert (err.value.field, err.value.value) == ("scale_outs", value) and problem in err.value.problem
    if isinstance(value, str):
        with pytest.raises(InvalidInputError) as err:
            scale_outs_from(value)
        assert (err.value.field, err.value.value) == ("--scale-outs", value)
