"""The sizing decision as XCom driving cloud operators: EMR instance counts, Databricks workers.

``BellamySizingOperator`` returns the decision (``chosen_scale_out``, the candidates, the
reason) as a JSON-serialisable XCom; any operator can use it through templating. With
``render_template_as_native_obj=True`` the rendered count stays an ``int``.

Needs the ``examples`` extra (apache-airflow-providers-amazon and -databricks) and the
``aws_default`` / ``databricks_default`` connections. The runtime of a cloud job is
recorded when the task that waits for it finishes: name that task in ``sized_task_id``
and the listener plugin (or ``on_success_callback=record_runtime``) writes it back.
"""

from __future__ import annotations

import datetime as dt

from airflow.providers.amazon.aws.operators.emr import EmrCreateJobFlowOperator
from airflow.providers.databricks.operators.databricks import DatabricksSubmitRunOperator
from airflow.sdk import DAG

from airflow_provider_bellamy.operators.sizing import BellamySizingOperator

# A C3O-like context: the bundled traces were measured on these machines and inputs.
SORT_CONTEXT = {
    "machine_type": "c4.2xlarge",
    "environment": "aws-emr",
    "cores": 8,
    "memory_mb": 15000,
    "data_size_mb": 15150,
    "lines": 150_000_000,
    "line_length": 100,
}
GREP_CONTEXT = {**SORT_CONTEXT, "p_occurrence": 0.5}

with DAG(
    dag_id="bellamy_sizing_emr_databricks",
    description="Bellamy sizing decisions as XCom: EMR core instance count, Databricks num_workers",
    schedule=None,
    start_date=dt.datetime(2025, 1, 1, tzinfo=dt.timezone.utc),
    catchup=False,
    render_template_as_native_obj=True,
    tags=["bellamy", "example", "emr", "databricks"],
) as dag:
    size_sort = BellamySizingOperator(
        task_id="size_sort",
        job_type="sort",
        properties=SORT_CONTEXT,
        scale_outs=[2, 4, 6, 8, 10, 12],
        target=dt.timedelta(minutes=4),
        objective="min_cost",
        price_per_node_hour=0.398,  # c4.2xlarge on-demand + EMR fee
        default_scale_out=6,
        sized_task_id="emr_sort",
    )
    emr_sort = EmrCreateJobFlowOperator(
        task_id="emr_sort",
        job_flow_overrides={
            "Name": "bellamy-sort-{{ ds_nodash }}",
            "ReleaseLabel": "emr-7.5.0",
            "Applications": [{"Name": "Spark"}],
            "Instances": {
                "InstanceGroups": [
                    {
                        "Name": "primary",
                        "InstanceRole": "MASTER",
                        "InstanceType": "m5.xlarge",
                        "InstanceCount": 1,
                    },
                    {
                        "Name": "core",
                        "InstanceRole": "CORE",
                        "InstanceType": "c4.2xlarge",
                        "InstanceCount": "{{ ti.xcom_pull(task_ids='size_sort')['chosen_scale_out'] }}",
                    },
                ],
                "KeepJobFlowAliveWhenNoSteps": False,
            },
            "Tags": [
                {
                    "Key": "bellamy-decision",
                    "Value": "{{ ti.xcom_pull(task_ids='size_sort')['decision_id'] }}",
                }
            ],
        },
        wait_for_completion=True,  # the task spans the job flow: its duration is the runtime
    )
    size_grep = BellamySizingOperator(
        task_id="size_grep",
        job_type="grep",
        properties=GREP_CONTEXT,
        scale_outs=[2, 4, 6, 8, 10, 12],
        target=dt.timedelta(minutes=3),
        default_scale_out=4,
        sized_task_id="databricks_grep",
    )
    databricks_grep = DatabricksSubmitRunOperator(
        task_id="databricks_grep",
        run_name="bellamy-grep-{{ ds_nodash }}",
        new_cluster={
            "spark_version": "15.4.x-scala2.12",
            "node_type_id": "c4.2xlarge",
            "num_workers": "{{ ti.xcom_pull(task_ids='size_grep')['chosen_scale_out'] }}",
        },
        spark_python_task={"python_file": "dbfs:/jobs/grep.py", "parameters": ["--word", "bellamy"]},
        wait_for_termination=True,  # the task spans the run: its duration is the runtime
    )
    size_sort >> emr_sort
    size_grep >> databricks_grep
