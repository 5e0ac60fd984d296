"""Pipeline configs: good ones load, bad ones name the file, the job and the key."""

from __future__ import annotations

from pathlib import Path

import pytest

from airflow_provider_bellamy.config import load_pipeline_config
from airflow_provider_bellamy.exceptions import InvalidInputError

EXAMPLES = Path(__file__).resolve().parents[2] / "dags_examples" / "pipelines"

GOOD = """
defaults:
  framework: spark
  confidence: 0.8
jobs:
  nightly_grep:
    job_type: grep
    properties: {machine_type: local-2c, data_size_mb: 64}
    scale_out: {min: 1, max: 4}
    target: 2m30s
    on_infeasible: run-max
    spark:
      application: jobs/grep.py
      application_args: [--lines, "1000"]
  sort_by_six:
    scale_out: [1, 2, 4]
    deadline: 2025-01-01T06:00:00+00:00
    reserve: 10m
    objective: min_cost
    price_per_node_hour: 0.25
    default_scale_out: 2
"""


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "pipeline.yaml"
    path.write_text(text)
    return path


def test_good_config(tmp_path: Path) -> None:
    (tmp_path / "jobs").mkdir()
    (tmp_path / "jobs" / "grep.py").write_text("print('grep')\n")
    cfg = load_pipeline_config(write(tmp_path, GOOD))
    grep = cfg.job("nightly_grep")
    assert grep.job_type == "grep" and grep.framework == "spark"
    assert grep.scale_outs == [1, 2, 3, 4]
    assert grep.target_s == 150
    assert grep.confidence == 0.8  # from defaults
    assert grep.on_infeasible == "run-max"
    assert grep.spark["application_args"] == ["--lines", "1000"]
    assert grep.spark["application"] == str(tmp_path / "jobs" / "grep.py")  # relative to the file
    sort = cfg.job("sort_by_six")
    assert sort.job_type == "sort_by_six"
    assert sort.deadline == "2025-01-01T06:00:00+00:00"
    assert sort.reserve == 600
    kwargs = sort.sizing_kwargs()
    assert kwargs["scale_outs"] == [1, 2, 4] and kwargs["price_per_node_hour"] == 0.25
    with pytest.raises(InvalidInputError, match="jobs: nightly_grep, sort_by_six"):
        cfg.job("missing")


def test_bundled_example_configs_load() -> None:
    files = sorted(EXAMPLES.glob("*.yaml"))
    assert files, "dags_examples/pipelines/ has no configs"
    for path in files:
        assert load_pipeline_config(path).jobs


BAD = [
    ("jobs: {j: {framework: spark, scale_out: [1, 2], confidence: 1.5}}", "jobs.j.confidence", "1.5"),
    ("jobs: {j: {framework: spark, scale_out: [1, 0]}}", "jobs.j.scale_out[1]", "0"),
    ("jobs: {j: {framework: spark, scale_out: {min: 4, max: 2}}}", "jobs.j.scale_out.max", "2"),
    ("jobs: {j: {framework: spark}}", "jobs.j.scale_out", "None"),
    ("jobs: {j: {scale_out: [1]}}", "jobs.j.framework", "None"),
    ("jobs: {j: {framework: spark, scale_out: [1], target: soon}}", "jobs.j.target", "'soon'"),
    (
        "jobs: {j: {framework: spark, scale_out: [1], deadline: '2025-01-01T06:00:00'}}",
        "jobs.j.deadline",
        "2025",
    ),
    ("jobs: {j: {framework: spark, scale_out: [1], target: 10, deadline: dag}}", "jobs.j.deadline", "dag"),
    ("jobs: {j: {framework: spark, scale_out: [1], on_infeasible: panic}}", "jobs.j.on_infeasible", "panic"),
    ("jobs: {j: {framework: spark, scale_out: [1], objective: cheapest}}", "jobs.j.objective", "cheapest"),
    (
        "jobs: {j: {framework: spark, scale_out: [1], objective: min_cost}}",
        "jobs.j.price_per_node_hour",
        "None",
    ),
    (
        "jobs: {j: {framework: spark, scale_out: [1, 2], default_scale_out: 3}}",
        "jobs.j.default_scale_out",
        "3",
    ),
    ("jobs: {j: {framework: spark, scale_out: [1], reserve: 60}}", "jobs.j.reserve", "60"),
    (
        "jobs: {j: {framework: spark, scale_out: [1], target: 60, default_task_reserve: 30s}}",
        "jobs.j.default_task_reserve",
        "30s",
    ),
    (
        "jobs: {j: {framework: spark, scale_out: [1], target: 60, deadline_alert_name: sla}}",
        "jobs.j.deadline_alert_name",
        "sla",
    ),
    (
        "defaults: {deadline_alert_name: sla}\njobs: {j: {framework: spark, scale_out: [1], target: 60}}",
        "defaults.deadline_alert_name",
        "sla",
    ),
    ("jobs: {j: {framework: spark, scale_out: [1], targte: 60}}", "jobs.j.targte", "60"),
    (
        "jobs: {j: {framework: spark, scale_out: [1], properties: {scale_out: 3}}}",
        "jobs.j.properties.scale_out",
        "3",
    ),
    (
        "jobs: {j: {framework: spark, scale_out: [1], spark: {num_executors: 3}}}",
        "jobs.j.spark.num_executors",
        "3",
    ),
    (
        "jobs: {j: {framework: spark, scale_out: [1], spark: {application_args: x}}}",
        "jobs.j.spark.application_args",
        "x",
    ),
    (
        "jobs: {j: {framework: spark, scale_out: [1], spark: {application: nope.py}}}",
        "jobs.j.spark.application",
        "nope",
    ),
    ("jobs: []", "jobs", "[]"),
    ("pipelines: {}", "pipelines", "{}"),
    ("jobs: {j: [1, 2]}", "jobs.j", "[1, 2]"),
]


@pytest.mark.parametrize(("text", "field", "value"), BAD)
def test_bad_config_names_file_job_and_key(tmp_path: Path, text: str, field: str, value: str) -> None:
    path = write(tmp_path, text)
    with pytest.raises(InvalidInputError) as err:
        load_pipeline_config(path)
    message = str(err.value)
    assert err.value.field == field
    assert message.startswith(str(path)), message
    assert value in message


def test_unparseable_yaml_and_missing_file(tmp_path: Path) -> None:
    with pytest.raises(InvalidInputError, match=r"path=.*pipeline.yaml.*not valid YAML at line \d+"):
        load_pipeline_config(write(tmp_path, "jobs:\n  j: {framework: [\n"))
    with pytest.raises(InvalidInputError, match="no such pipeline config file"):
        load_pipeline_config(tmp_path / "absent.yaml")


MERGED = """
defaults:
  framework: spark
  properties: {environment: prod, machine_type: m5.xlarge}
  spark: {conn_id: spark_prod, executor_memory: 4g, conf: {spark.eventLog.enabled: "true"}}
jobs:
  grep:
    scale_out: [1, 2]
    properties: {data_size_mb: 1024, machine_type: m5.2xlarge}
    spark:
      application: job.py
      conf: {spark.sql.shuffle.partitions: "6"}
  sort:
    scale_out: [1, 2]
    spark:
"""


def test_a_jobs_blocks_add_to_the_defaults_blocks_key_by_key(tmp_path: Path) -> None:
    # A job naming its own application must not lose the defaults' connection (it would launch
    # on spark_default, silently), nor its data size the defaults' machine type and environment.
    (tmp_path / "job.py").write_text("print('grep')\n")
    cfg = load_pipeline_config(write(tmp_path, MERGED))
    grep = cfg.job("grep")
    assert grep.properties == {"environment": "prod", "machine_type": "m5.2xlarge", "data_size_mb": 1024}
    assert grep.spark == {
        "conn_id": "spark_prod",
        "executor_memory": "4g",
        "application": str(tmp_path / "job.py"),
        "conf": {"spark.eventLog.enabled": "true", "spark.sql.shuffle.partitions": "6"},
    }
    sort = cfg.job("sort")  # an empty block (None in YAML) keeps the defaults' block
    assert sort.properties == {"environment": "prod", "machine_type": "m5.xlarge"}
    assert sort.spark == {
        "conn_id": "spark_prod",
        "executor_memory": "4g",
        "conf": {"spark.eventLog.enabled": "true"},
    }


def test_numbers_are_read_as_yaml_1_2_reads_them_so_spec_reads_the_text(tmp_path: Path) -> None:
    """PyYAML's YAML 1.1 read ``target: 15:00`` as 900 s (base 60) while the text "15:00" is
    refused (15 minutes or 15 hours?), and ``010`` as 8 (octal): a file said what a template
    could not."""
    job = "jobs:\n  j:\n    framework: spark\n    scale_out: [1, 2]\n"
    with pytest.raises(InvalidInputError) as err:
        load_pipeline_config(write(tmp_path, job + "    target: 15:00\n"))
    assert (err.value.field, err.value.value) == ("jobs.j.target", "15:00")
    # h:mm:ss (a timedelta as Jinja renders it) is one reading
    assert load_pipeline_config(write(tmp_path, job + "    target: 1:30:00\n")).job("j").target_s == 5400.0
    loaded = load_pipeline_config(
        write(
            tmp_path, job + "    target: 1_000\n    properties: {a: 010, b: 1:20, c: 0x10, d: 2.5, e: -3}\n"
        )
    ).job("j")
    assert loaded.target_s == 1000.0
    assert loaded.properties == {"a": "010", "b": "1:20", "c": 16, "d": 2.5, "e": -3}


@pytest.mark.parametrize(
    ("defaults", "job", "field", "value"),
    [
        ("  confidance: 0.8\n", "", "defaults.confidance", 0.8),
        ("  confidence: 1.5\n", "", "defaults.confidence", 1.5),
        ("  confidence: 1.5\n", "    confidence: 2\n", "jobs.j.confidence", 2),
        ("  default_scale_out: 3\n", "", "defaults.default_scale_out", 3),
        ("  properties: {cores: nan}\n", "    properties: {mem: 1}\n", "defaults.properties.cores", "nan"),
        ("  properties: {cores: 1}\n", "    properties: {mem: nan}\n", "jobs.j.properties.mem", "nan"),
        ("  spark: {num_executors: 3}\n", "", "defaults.spark.num_executors", 3),
        # depth 2 (a mapping merged key by key inside the operator block): named where written,
        # whether or not the job's own block has the inner mapping
        ("  spark: {conf: {spark.a: null}}\n", "", "defaults.spark.conf.spark.a", None),
        (
            "  spark: {conf: {spark.a: null}}\n",
            "    spark: {conf: {b: 1}}\n",
            "defaults.spark.conf.spark.a",
            None,
        ),
        ("  spark: {conf: {spark.a: null}}\n", "    spark: {name: x}\n", "defaults.spark.conf.spark.a", None),
        ("  spark:\n    conf: {x: [1]}\n", "    spark:\n", "defaults.spark.conf.x", [1]),
        (
            "  spark: {conf: {b: 1}}\n",
            "    spark: {conf: {spark.a: {c: 1}}}\n",
            "jobs.j.spark.conf.spark.a",
            {"c": 1},
        ),
        # the job's own value replaces the defaults' at the same path
        (
            "  spark: {conf: {spark.a: 1}}\n",
            "    spark: {conf: {spark.a: null}}\n",
            "jobs.j.spark.conf.spark.a",
            None,
        ),
        ("  flink: {conf: {a=b: 1}}\n", "    flink: {conf: {c: 2}}\n", "defaults.flink.conf.a=b", "a=b"),
        # an argument left empty in YAML was passed on as "None"
        ("  spark: {application_args: [--out, null]}\n", "", "defaults.spark.application_args[1]", None),
        ("", "    spark: {application_args: [--out, [a]]}\n", "jobs.j.spark.application_args[1]", ["a"]),
        # a job's own scale_out replaces the defaults' whole: an error in it is the job's
        ("  scale_out: {min: 1, max: 2}\n", "    scale_out: {min: 0, max: 4}\n", "jobs.j.scale_out.min", 0),
    ],
)
def test_a_bad_value_from_the_defaults_is_named_in_the_defaults(
    tmp_path: Path, defaults: str, job: str, field: str, value: object
) -> None:
    """The job has no such key to find: until session 26 a typo under ``defaults:`` was named
    ``jobs.<each job>.<key>``."""
    text = f"defaults:\n{defaults}jobs:\n  j:\n    framework: spark\n    scale_out: [1, 2]\n{job}"
    with pytest.raises(InvalidInputError) as err:
        load_pipeline_config(write(tmp_path, text))
    assert (err.value.field, err.value.value) == (field, value)
    if field.startswith("defaults.") and "unknown key" not in err.value.problem:
        assert err.value.problem.endswith("(for jobs.j)")


def test_a_missing_framework_names_the_frameworks_the_operators_launch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The text is read from spec.LAUNCHED_FRAMEWORKS (one list: sizing's refusal names the same),
    not written out beside it."""
    import airflow_provider_bellamy.config as config

    path = write(tmp_path, "jobs: {j: {scale_out: [1]}}")
    with pytest.raises(InvalidInputError) as err:
        load_pipeline_config(path)
    assert "is required (spark or flink)" in str(err.value)
    monkeypatch.setattr(config, "LAUNCHED_FRAMEWORKS", ("spark", "flink", "beam"))
    with pytest.raises(InvalidInputError) as err:
        load_pipeline_config(path)
    assert err.value.field == "jobs.j.framework"
    assert "is required (spark or flink or beam)" in str(err.value)
