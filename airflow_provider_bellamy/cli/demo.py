"""`bellamy demo`: the main job, end to end on this machine.

1. a temporary AIRFLOW_HOME with a migrated SQLite metadata DB and the embedded
   Bellamy store under it;
2. the bundled C3O traces imported, general grep and sort models trained;
3. a Spark standalone master + workers started on 127.0.0.1;
4. the example DAG ``bellamy_spark_sla`` run with ``dag.test()`` (twice by default):
   each job sized by the model, run for real with spark-submit, its runtime written
   back — so the second launch is sized by a model fine-tuned on the first;
5. the decisions and the recorded runs printed, the plot written; everything started
   is stopped (and the temporary home removed unless ``--keep``).

Airflow reads AIRFLOW_HOME when it is first imported, so the DAG run happens in a child
process with the temporary home; this process only touches the store and the cluster.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from airflow_provider_bellamy.decisions import band_holds, format_confidence

DAG_ID = "bellamy_spark_sla"
JOB_TYPES = ("grep", "sort")

_RUN_DAG = """
import json, sys
from airflow.dag_processing.dagbag import DagBag
bag = DagBag(dag_folder=sys.argv[1])
if sys.argv[2] not in bag.dags:
    raise SystemExit(f"DAG {sys.argv[2]} not found; import errors: {bag.import_errors}")
dr = bag.dags[sys.argv[2]].test()
print("BELLAMY-DEMO-RESULT " + json.dumps({"run_id": dr.run_id, "state": str(getattr(dr.state, "value", dr.state))}))
"""


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "demo", help="end to end: traces → model → Spark on 127.0.0.1 → sized DAG run → recorded runtime"
    )
    parser.add_argument("--workers", type=int, default=3, help="Spark workers to start (1 core each)")
    parser.add_argument(
        "--runs", type=int, default=3, help="DAG runs, 1 to 5 (each learns from the ones before)"
    )
    parser.add_argument("--train-budget", type=float, default=40.0, help="training seconds per job type")
    parser.add_argument("--plot", default="bellamy-demo.png", help="where to write the plot (PNG)")
    parser.add_argument("--keep", action="store_true", help="keep the temporary AIRFLOW_HOME")
    parser.add_argument(
        "--dags-folder", default=None, help="folder with the example DAGs (default: the checkout's)"
    )
    parser.set_defaults(func=run_demo)


def _dags_folder(given: str | None) -> Path:
    from airflow_provider_bellamy.exceptions import InvalidInputError

    folder = Path(given) if given else Path(__file__).resolve().parents[2] / "dags_examples"
    if not (folder / "spark_sla_sizing.py").is_file():
        raise InvalidInputError(
            "--dags-folder",
            str(folder),
            "has no spark_sla_sizing.py (run from a checkout or pass the folder)",
        )
    return folder.resolve()


def _step(console: Any, text: str) -> float:
    console.rule(f"[bold]{text}")
    return time.monotonic()


def run_demo(args: argparse.Namespace) -> int:
    from rich.console import Console

    from airflow_provider_bellamy.exceptions import InvalidInputError

    if args.workers < 1 or args.workers > 8:
        raise InvalidInputError("--workers", args.workers, "must be between 1 and 8")
    if args.runs < 1 or args.runs > 5:
        raise InvalidInputError("--runs", args.runs, "must be between 1 and 5")
    # piped output (CI, `make demo | tee`) gets a width that fits the tables
    console = Console(width=None if sys.stdout.isatty() else 160)
    dags = _dags_folder(args.dags_folder)
    home = Path(tempfile.mkdtemp(prefix="bellamy-demo-airflow-"))
    # Everything below reads the temporary home: the embedded store, and (in children) Airflow.
    os.environ["AIRFLOW_HOME"] = str(home)
    env = dict(os.environ)
    env.update(
        {
            "AIRFLOW_HOME": str(home),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__CORE__DAGS_FOLDER": str(dags),
            "AIRFLOW__CORE__DAGBAG_IMPORT_TIMEOUT": "300",
        }
    )
    env.pop("AIRFLOW_CONN_BELLAMY_DEFAULT", None)  # the demo uses the embedded default store
    # spark-submit comes with the pyspark wheel, beside this interpreter; Airflow's Spark hook
    # looks for it on PATH (`make demo` puts it there, `.venv/bin/bellamy demo` alone did not)
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    cluster = None
    started = time.monotonic()
    try:
        t = _step(console, f"1/5 Airflow metadata DB in {home}")
        _airflow_db_migrate(env, home)
        console.print(f"migrated in {time.monotonic() - t:.1f} s")

        t = _step(console, "2/5 traces and models (embedded SQLite store)")
        facade = _train(console, args.train_budget)
        console.print(f"store {facade.store.display_url}; {time.monotonic() - t:.1f} s")

        t = _step(console, f"3/5 Spark standalone master + {args.workers} workers on 127.0.0.1")
        from airflow_provider_bellamy.cli._local_spark import start_standalone_cluster

        cluster = start_standalone_cluster(args.workers, cores_per_worker=1, memory_per_worker="1g")
        console.print(f"{cluster.master_url} (web UI {cluster.webui_url}) up in {time.monotonic() - t:.1f} s")
        env["AIRFLOW_CONN_SPARK_DEFAULT"] = json.dumps(
            {
                "conn_type": "spark",
                "host": "spark://127.0.0.1",
                "port": cluster.master_port,
                "extra": {"deploy-mode": "client", "master-webui": cluster.webui_url},
            }
        )

        results = []
        for i in range(args.runs):
            t = _step(
                console,
                f"4/5 dag.test() of {DAG_ID}, run {i + 1}/{args.runs}: sized by the model, real spark-submit, "
                "runtime written back",
            )
            result = _run_dag(env, dags, home / f"dag-test-{i + 1}.log")
            results.append(result)
            console.print(
                f"DAG run {result['run_id']}: [bold]{result['state']}[/] in {time.monotonic() - t:.1f} s"
            )
            _report(console, facade, [r["run_id"] for r in results], tables_for=result["run_id"])

        _step(console, "5/5 what the model learned, and the plot")
        decisions, runs = _report(console, facade, [r["run_id"] for r in results], tables_for=None)
        from airflow_provider_bellamy.plotting import plot_decisions

        plot = plot_decisions(decisions, runs, Path(args.plot).resolve(), title=f"{DAG_ID} — Bellamy sizing")
        console.print(f"plot written to [bold]{plot}[/]")
        failed = [r for r in results if r["state"] != "success"]
        if failed:
            console.print(f"[red]{len(failed)} DAG run(s) did not succeed; logs in {home} (use --keep)")
            return 1
        console.print(f"demo finished in {time.monotonic() - started:.0f} s")
        return 0
    finally:
        if cluster is not None:
            cluster.stop()
            console.print("Spark cluster stopped")
        if args.keep:
            console.print(f"kept AIRFLOW_HOME {home}")
        else:
            shutil.rmtree(home, ignore_errors=True)


def _airflow_db_migrate(env: dict[str, str], home: Path) -> None:
    from airflow_provider_bellamy.exceptions import BellamyError

    proc = subprocess.run(
        [sys.executable, "-m", "airflow", "db", "migrate"],
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    if proc.returncode != 0:
        raise BellamyError(f"airflow db migrate failed in {home}: {proc.stderr[-2000:]}")


def _train(console: Any, budget: float) -> Any:
    from rich.table import Table

    from airflow_provider_bellamy.facade import Bellamy

    facade = Bellamy()
    facade.upgrade()
    added = facade.import_traces("c3o")
    console.print(f"imported the bundled C3O traces: {added}")
    table = Table("job type", "outcome", "train rows", "held-out rows", "held-out MRE", "seconds")
    for job_type in JOB_TYPES:
        for report in facade.train(job_type, time_budget_s=budget):
            mre = report.metrics.get("holdout_mre")
            table.add_row(
                report.job_type,
                report.outcome,
                str(report.train_rows),
                str(report.holdout_rows),
                f"{mre:.1%}" if isinstance(mre, float) else "–",
                f"{report.seconds:.1f}",
            )
    console.print(table)
    return facade


def _run_dag(env: dict[str, str], dags: Path, log_path: Path) -> dict[str, Any]:
    from airflow_provider_bellamy.exceptions import BellamyError

    with log_path.open("w") as log:  # Airflow's task logs go here, readable while it runs
        proc = subprocess.run(
            [sys.executable, "-c", _RUN_DAG, str(dags), DAG_ID],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            timeout=1800,
            check=False,
        )
    for line in log_path.read_text(errors="replace").splitlines():
        if line.startswith("BELLAMY-DEMO-RESULT "):
            return json.loads(line.removeprefix("BELLAMY-DEMO-RESULT "))
    tail = log_path.read_text(errors="replace")[-3000:]
    raise BellamyError(
        f"dag.test() of {DAG_ID} did not finish (exit {proc.returncode}); log {log_path}:\n{tail}"
    )


def _report(
    console: Any, facade: Any, run_ids: list[str], *, tables_for: str | None
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Print the decision tables of the run ``tables_for``, or (None) the summary of all runs."""
    from rich.table import Table

    order = {run_id: i for i, run_id in enumerate(run_ids)}
    decisions = [d for d in facade.list_decisions(limit=None) if d.get("run_id") in order]
    decisions.sort(key=lambda d: (order[d["run_id"]], d["id"]))
    runs = [r for r in facade.list_runs(source="observed", limit=None) if r.get("run_id") in order]
    by_decision = {r.get("decision_id"): r for r in runs}
    if tables_for is not None:
        for d in (d for d in decisions if d["run_id"] == tables_for):
            table = Table(
                "scale-out",
                "predicted (s)",
                "band (s)",
                "meets target",
                "node-hours",
                title=_decision_title(d),
            )
            for c in sorted(d["candidates"], key=lambda c: c["scale_out"]):
                chosen = c["scale_out"] == d["chosen_scale_out"]
                mark = "[bold green]" if chosen else ""
                table.add_row(
                    f"{mark}{c['scale_out']}{' ◀' if chosen else ''}",
                    _num(c.get("predicted_s")),
                    f"{_num(c.get('lower_s'))} – {_num(c.get('upper_s'))}",
                    "yes" if c.get("meets_target") else "no",
                    f"{c['node_hours']:.4f}" if c.get("node_hours") is not None else "–",
                )
            console.print(table)
            # the reason's notes are in [brackets], which rich would read as markup
            console.print(f"  reason: {d['reason']}", markup=False)
            if d.get("fallback_reason"):
                console.print(f"  note: {d['fallback_reason']}", markup=False)
            run = by_decision.get(d["id"])
            if run is not None:
                console.print(
                    f"  recorded: run {run['id']}, {run['status']}, {run['runtime_s']:.1f} s at scale-out "
                    f"{run['scale_out']} (Spark app {run.get('external_id') or '–'})"
                )
        return decisions, runs
    _print_story(console, launches(decisions, runs, run_ids))
    return decisions, runs


@dataclass(frozen=True)
class Launch:
    """One task of one DAG run, as the story needs it: what the decision claimed at the size the
    job ran at, and what happened."""

    launch: int  # 1-based DAG run
    task_id: str
    job_type: str
    extrapolating: bool | None  # None: the decision does not say (no model, or not recorded)
    extrapolates_in: str  # the signals' sentence ("" inside the training data)
    model: str
    fallback_reason: str | None
    feasible: bool
    chosen: int
    target_s: float | None
    confidence: float
    ran_at: int | None  # the executors it was granted (may be fewer than chosen)
    predicted_s: float | None  # at ``ran_at`` (at ``chosen`` while nothing ran)
    lower_s: float | None
    upper_s: float | None
    observed_s: float | None
    status: str | None

    candidates: tuple[dict[str, Any], ...] = ()

    @property
    def inside(self) -> bool | None:
        """The observed runtime lies in the decision's band at the size it ran at."""
        if self.observed_s is None or self.status != "success" or self.ran_at is None:
            return None
        return band_holds(self.candidates, self.ran_at, self.observed_s)

    @property
    def met_target(self) -> bool | None:
        if self.observed_s is None or self.status != "success" or self.target_s is None:
            return None
        return self.observed_s <= self.target_s


def launches(decisions: list[dict[str, Any]], runs: list[dict[str, Any]], run_ids: list[str]) -> list[Launch]:
    """The demo's decisions (as stored) and the runs they led to, launch by launch."""
    order = {run_id: i for i, run_id in enumerate(run_ids)}
    by_decision = {r.get("decision_id"): r for r in runs if r.get("decision_id") is not None}
    out = []
    for d in sorted(decisions, key=lambda d: (order.get(d.get("run_id"), len(order)), d["id"])):
        run = by_decision.get(d["id"])
        ran_at = int(run["scale_out"]) if run is not None else None
        at = ran_at if ran_at is not None else d["chosen_scale_out"]
        cand = next((c for c in d.get("candidates") or [] if c["scale_out"] == at), None) or {}
        ext = d.get("extrapolation") or {}
        known = bool(ext) and ext.get("known", True)
        out.append(
            Launch(
                launch=order.get(d.get("run_id"), len(order)) + 1,
                task_id=str(d.get("task_id") or d["job_type"]),
                job_type=d["job_type"],
                extrapolating=bool(ext.get("kinds") or ext.get("job_type_unseen")) if known else None,
                extrapolates_in=str(ext.get("sentence") or "") if known else "",
                model=d.get("model_version") or "default",
                fallback_reason=d.get("fallback_reason"),
                feasible=bool(d.get("feasible")),
                chosen=int(d["chosen_scale_out"]),
                target_s=d.get("target_s"),
                confidence=float(d["confidence"]),
                ran_at=ran_at,
                predicted_s=cand.get("predicted_s"),
                lower_s=cand.get("lower_s"),
                upper_s=cand.get("upper_s"),
                observed_s=float(run["runtime_s"]) if run is not None else None,
                status=run["status"] if run is not None else None,
                candidates=tuple(d.get("candidates") or ()),
            )
        )
    return out


def _yes_no(value: bool | None) -> str:
    return "–" if value is None else ("[green]yes[/]" if value else "[red]NO[/]")


def _print_story(console: Any, story: list[Launch]) -> None:
    """The table of every launch, then what it shows in words: the first launch flagged as
    extrapolating, the bands from the second launch on, the sizes chosen."""
    from rich.markup import escape
    from rich.table import Table

    table = Table(
        "launch",
        "task",
        "extrapolating",
        "model",
        "target (s)",
        "chosen",
        "ran at",
        "predicted (s)",
        "band (s)",
        "observed (s)",
        "in band",
        "met target",
        title="the launches: what each decision claimed at the size the job ran at, and what happened",
    )
    for x in story:
        table.add_row(
            str(x.launch),
            x.task_id,
            "?" if x.extrapolating is None else ("[yellow]yes[/]" if x.extrapolating else "no"),
            escape(x.model),
            _num(x.target_s) if x.target_s is not None else "–",
            str(x.chosen),
            str(x.ran_at) if x.ran_at is not None else "–",
            _num(x.predicted_s) if x.predicted_s is not None else "–",
            f"{_num(x.lower_s)} – {_num(x.upper_s)}" if x.predicted_s is not None else "–",
            (f"{x.observed_s:.1f}" if x.observed_s is not None else "–")
            + ("" if x.status in (None, "success") else f" ({x.status})"),
            _yes_no(x.inside),
            _yes_no(x.met_target),
        )
    console.print(table)
    for task in dict.fromkeys(x.task_id for x in story):
        mine = [x for x in story if x.task_id == task]
        first, later = mine[0], mine[1:]
        if first.extrapolating:
            flag = f"flagged as extrapolating: {first.extrapolates_in}"
        elif first.extrapolating is None:
            flag = f"no extrapolation signals ({first.fallback_reason or 'not recorded'})"
        else:
            flag = "[red]not flagged as extrapolating[/]"
        console.print(f"[bold]{escape(task)}[/], launch 1: {escape(flag) if first.extrapolating else flag}")
        if first.inside is not None:
            console.print(
                f"  its {format_confidence(first.confidence)} band at {first.ran_at}: {_num(first.lower_s)} – "
                f"{_num(first.upper_s)} s; observed {first.observed_s:.1f} s: "
                + ("inside" if first.inside else "[red]outside[/]")
                + (
                    ""
                    if first.feasible
                    else f" (no size met the target: it launched the likeliest, {first.chosen})"
                )
            )
        judged = [x for x in later if x.inside is not None]
        if judged:
            inside = sum(bool(x.inside) for x in judged)
            colour = "green" if inside == len(judged) else "red"
            console.print(
                f"  launches 2–{mine[-1].launch}: [{colour}]{inside} of {len(judged)}[/] observed runtimes inside "
                f"their band; chosen sizes {' → '.join(str(x.chosen) for x in mine)}"
            )


def _decision_title(d: dict[str, Any]) -> str:
    target = f"target {d['target_s']:.0f} s" if d.get("target_s") else "no target"
    return (
        f"{d.get('task_id')} ({d['job_type']}): {target}, confidence {format_confidence(d['confidence'])}, "
        f"chosen {d['chosen_scale_out']}, model {d.get('model_version') or '–'}"
    )


def _num(value: Any) -> str:
    return "∞" if value is None else f"{float(value):.1f}"


def main() -> int:
    parser = argparse.ArgumentParser(prog="bellamy demo")
    sub = parser.add_subparsers(dest="command", required=True)
    register(sub)
    args = parser.parse_args(["demo", *sys.argv[1:]])
    return int(args.func(args))


if __name__ == "__main__":
    sys.exit(main())
