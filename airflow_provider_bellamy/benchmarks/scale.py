"""`bellamy benchmark scale`: the store, sizing and training as a store grows to 10⁶ runs.

A platform team records a run per task try and a decision per launch, for a year. This fills a
store (a temporary SQLite file, or the empty store the user names) with such a year, decade by
decade (10⁴, 10⁵, 10⁶ runs up to ``--runs``), and measures at each decade what grows with it:

* ``size()`` of a context whose fine-tuned copy is current and in this process's model cache
  (a worker's steady state), and of a context that just got a new run, with the process's model
  cache cleared (the general model is read from the store, the context's runs read, fine-tuned,
  the copy stored: the first launch of the day of a daily task);
* recording one run (an observed try, linked to its decision);
* ``train()`` of one job type with the default time budget, in a fresh process: wall time and
  peak memory (the process's maximum resident set, torch included);
* listing the last 50 decisions and the last 50 runs; the database's size.

The runs are synthetic but follow the bundled C3O traces: each context is a C3O context of its
job type with its input size scaled, its runtimes the trace's curve (interpolated in log space
between the measured scale-outs, scaled with the input) times log-normal noise, with a few
outliers and failed tries; contexts are launched with a skewed (Zipf-like) popularity. Rows go in
with bulk inserts. Nothing is written to a store the user did not name.
"""

from __future__ import annotations

import datetime as dt
import json
import math
import os
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from airflow_provider_bellamy.exceptions import InvalidInputError

DECADES = (10_000, 100_000, 1_000_000, 10_000_000)
MIN_RUNS = 1_000
# Past this the fill alone takes hours and tens of GB; nobody's year of runs is this large.
MAX_RUNS = 10_000_000
DEFAULT_RUNS = 1_000_000
DEFAULT_CONTEXTS = 300
TRAINED_JOB = "grep"
SCALE_OUTS = list(range(2, 13))
SAMPLES = 10
CACHED_PER_SAMPLE = 5
CHUNK = 20_000
# one year of launches, ending now
SPAN = dt.timedelta(days=365)
TARGETS = {"size_cached_p50_ms": 20.0, "size_uncached_p50_ms": 1500.0, "record_p50_ms": 20.0}
MAX_GROWTH = 2.0
MAX_TRAIN_RSS_MB = 2048.0

_TRAIN_CHILD = """
import json, resource, sys, time
t0 = time.perf_counter()
from airflow_provider_bellamy.facade import Bellamy
args = json.loads(sys.argv[1])
reports = Bellamy(args["url"]).train(args["job_type"], force=True, time_budget_s=args["budget"])
r = reports[0]
print(json.dumps({"wall_s": time.perf_counter() - t0, "train_s": r.seconds, "outcome": r.outcome,
                  "train_rows": r.train_rows, "holdout_rows": r.holdout_rows,
                  "data_rows": r.metrics.get("data_rows"), "window_rows": r.metrics.get("window_rows"),
                  "maxrss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""


_WARM_CHILD = """
import torch
from airflow_provider_bellamy.facade import Bellamy
from airflow_provider_bellamy.records import runs_frame
from airflow_provider_bellamy.model import training
torch.optim.Adam([torch.zeros(1, requires_grad=True)])
"""


def validate_count(value: Any, field: str, minimum: int, maximum: int) -> int:
    """An integer within bounds; ``1e6`` and ``1_000_000`` are read as 1000000."""
    number: float
    if isinstance(value, bool):
        raise InvalidInputError(field, value, f"must be an integer in [{minimum:,}, {maximum:,}]")
    if isinstance(value, str):
        try:
            number = float(value.strip().replace("_", ""))
        except ValueError:
            raise InvalidInputError(field, value, "must be an integer such as 100000 or 1e6") from None
    elif isinstance(value, (int, float)):
        number = float(value)
    else:
        raise InvalidInputError(field, value, "must be an integer")
    if not math.isfinite(number) or number != int(number):
        raise InvalidInputError(field, value, "must be a whole number")
    if number < minimum or number > maximum:
        raise InvalidInputError(field, value, f"must be in [{minimum:,}, {maximum:,}]")
    return int(number)


def levels_for(runs: int) -> list[int]:
    """The decades up to ``runs``, and ``runs`` itself where it is not one."""
    out = [d for d in DECADES if d <= runs]
    if not out or out[-1] != runs:
        out.append(runs)
    return out


# ------------------------------------------------------------------------------ synthetic runs


@dataclass
class _Context:
    job_type: str
    properties: dict[str, Any]
    fingerprint: str
    log_curve: np.ndarray  # log runtime per scale-out in SCALE_OUTS


class Synthetic:
    """A year of runs of ``contexts`` contexts, generated from the bundled C3O traces."""

    def __init__(self, contexts: int, total: int, seed: int = 0) -> None:
        from airflow_provider_bellamy.datasets import load_traces
        from airflow_provider_bellamy.records import context_columns, context_fingerprint, normalize_context

        self.rng = np.random.default_rng(seed)
        self.total = total
        self.start = dt.datetime.now(dt.timezone.utc) - SPAN
        traces = load_traces("c3o")
        jobs = sorted(traces["job_type"].unique())
        bases: dict[str, list[tuple[dict[str, Any], np.ndarray]]] = {}
        for job in jobs:
            frame = traces[traces["job_type"] == job]
            cols = [c for c in context_columns(frame.columns) if frame[c].notna().all()]
            for _, group in frame.groupby(cols, sort=True):
                means = group.groupby("scale_out")["runtime_s"].mean()
                curve = np.interp(SCALE_OUTS, means.index.to_numpy(), np.log(means.to_numpy()))
                bases.setdefault(job, []).append((group.iloc[0][cols].to_dict(), curve))
        self.contexts: list[_Context] = []
        for i in range(contexts):
            job = jobs[i % len(jobs)]
            props, curve = bases[job][(i // len(jobs)) % len(bases[job])]
            # a larger or smaller input of the same job: runtimes scale a little less than linearly
            factor = float(np.exp(self.rng.uniform(-0.7, 0.7)))
            props = {**props, "data_size_mb": round(float(props["data_size_mb"]) * factor, 1)}
            ctx = normalize_context(props, where="synthetic context")
            self.contexts.append(
                _Context(job, ctx, context_fingerprint(job, ctx), curve + 0.9 * np.log(factor))
            )
        # a few contexts run hourly, most daily or weekly
        weights = 1.0 / np.arange(1, contexts + 1) ** 0.8
        self.popularity = self.rng.permutation(weights / weights.sum())
        self.generated = 0
        self._context_json = [json.dumps(c.properties) for c in self.contexts]
        self._dag_task = [(f"etl_{i % 40}", f"{c.job_type}_{i}") for i, c in enumerate(self.contexts)]
        self._candidates: dict[tuple[int, int], str] = {}

    def _candidates_json(self, ctx: int, chosen: int) -> str:
        """A decision's candidates as ``size`` stores them (cached per context and choice)."""
        key = (ctx, chosen)
        text = self._candidates.get(key)
        if text is None:
            predicted = np.exp(self.contexts[ctx].log_curve)
            text = json.dumps(
                [
                    {
                        "scale_out": s,
                        "predicted_s": round(float(p), 1),
                        "lower_s": round(float(p) * 0.9, 1),
                        "upper_s": round(float(p) * 1.15, 1),
                        "node_hours": round(float(p) * s / 3600, 4),
                        "cost": None,
                        "meets_target": s >= chosen,
                    }
                    for s, p in zip(SCALE_OUTS, predicted, strict=True)
                ]
            )
            self._candidates[key] = text
        return text

    def chunk(self, n: int, first_run_id: int, first_decision_id: int) -> tuple[list[tuple], list[tuple]]:
        """The next ``n`` runs (observed tries, ids from ``first_run_id``) and their decisions, as
        rows in ``RUN_COLUMNS`` / ``DECISION_COLUMNS`` order (JSON as text, times as naive UTC)."""
        rng = self.rng
        ctx_idx = rng.choice(len(self.contexts), size=n, p=self.popularity)
        scale = rng.choice(SCALE_OUTS, size=n)
        log_mean = np.array([c.log_curve for c in self.contexts])[ctx_idx, scale - SCALE_OUTS[0]]
        outlier = np.where(rng.random(n) < 0.02, np.log(1.5), 0.0)
        runtime = np.exp(log_mean + rng.normal(0.0, 0.06, size=n) + outlier)
        failed = rng.random(n) < 0.03
        runtime = np.round(np.where(failed, runtime * rng.uniform(0.05, 0.9, size=n), runtime), 2)
        seq = self.generated + np.arange(n)
        start_us = np.datetime64(self.start.replace(tzinfo=None), "us")
        started = start_us + (seq * (SPAN.total_seconds() * 1e6 / self.total)).astype("timedelta64[us]")
        ended = started + (runtime * 1e6).astype("timedelta64[us]")

        def text(times: np.ndarray) -> list[str]:
            return list(np.char.replace(np.datetime_as_string(times, unit="us"), "T", " "))

        started_s, ended_s = text(started), text(ended)
        recorded_s = text(ended + np.timedelta64(5, "s"))
        decided_s = text(started - np.timedelta64(2, "s"))
        status = np.where(failed, "failed", "success")
        runs: list[tuple] = []
        decisions: list[tuple] = []
        for k in range(n):
            i = int(ctx_idx[k])
            ctx = self.contexts[i]
            run_id, decision_id, n_nodes = first_run_id + k, first_decision_id + k, int(scale[k])
            airflow_run = f"scheduled__{int(seq[k])}"
            dag, task = self._dag_task[i]
            runs.append(
                (run_id, ctx.job_type, "spark", n_nodes, float(runtime[k]), self._context_json[i],
                 ctx.fingerprint, str(status[k]), "observed", None, dag, task, airflow_run, -1, 1,
                 started_s[k], ended_s[k], f"application_{int(seq[k])}", decision_id, recorded_s[k])
            )  # fmt: skip
            decisions.append(
                (decision_id, ctx.job_type, "spark", self._context_json[i], ctx.fingerprint,
                 self._candidates_json(i, n_nodes), round(float(np.exp(log_mean[k])) * 1.2, 1), 0.9,
                 "min_scale_out", None, n_nodes, True,
                 f"smallest scale-out whose 90% upper bound meets the target: {n_nodes}", None,
                 f"{ctx.job_type}/v1", None, None, dag, task, airflow_run, -1, 1, decided_s[k], run_id)
            )  # fmt: skip
        self.generated += n
        return runs, decisions


RUN_COLUMNS = (
    "id", "job_type", "framework", "scale_out", "runtime_s", "context", "context_fingerprint", "status",
    "source", "dataset", "dag_id", "task_id", "run_id", "map_index", "try_number", "started_at", "ended_at",
    "external_id", "decision_id", "recorded_at",
)  # fmt: skip
DECISION_COLUMNS = (
    "id", "job_type", "framework", "context", "context_fingerprint", "candidates", "target_s", "confidence",
    "objective", "price_per_node_hour", "chosen_scale_out", "feasible", "reason", "shortfall_s",
    "model_version", "model_version_id", "fallback_reason", "dag_id", "task_id", "run_id", "map_index",
    "try_number", "created_at", "run_row_id",
)  # fmt: skip


def fill(store: Any, synthetic: Synthetic, n: int, progress: Callable[[str], None]) -> float:
    """Add ``n`` runs and their decisions in bulk; returns the seconds it took.

    Through the driver directly (SQLite ``executemany``, PostgreSQL ``COPY``): the ORM's per-row
    work would make a million rows take the better part of an hour.
    """
    started = time.perf_counter()
    done = 0
    raw = store.engine.raw_connection()
    try:
        cur = raw.cursor()
        postgres = store.dialect == "postgresql"
        if not postgres:
            # a larger page cache for the fill only (random index inserts); reset before the
            # connection goes back to the pool, so the measurements see SQLite's default
            cur.execute("PRAGMA cache_size = -262144")
        while done < n:
            size = min(CHUNK, n - done)
            if not postgres:
                cur.execute("BEGIN IMMEDIATE")
            cur.execute("SELECT coalesce(max(id), 0) FROM runs")
            first_run = int(cur.fetchone()[0]) + 1
            cur.execute("SELECT coalesce(max(id), 0) FROM decisions")
            first_dec = int(cur.fetchone()[0]) + 1
            runs, decisions = synthetic.chunk(size, first_run, first_dec)
            for table, columns, rows in (
                ("runs", RUN_COLUMNS, runs),
                ("decisions", DECISION_COLUMNS, decisions),
            ):
                if postgres:
                    with cur.copy(f"COPY {table} ({', '.join(columns)}) FROM STDIN") as copy:
                        for row in rows:
                            copy.write_row(row)
                else:
                    marks = ", ".join("?" * len(columns))
                    cur.executemany(f"INSERT INTO {table} ({', '.join(columns)}) VALUES ({marks})", rows)
            if postgres:
                # explicit ids do not advance the sequences that ordinary inserts draw from
                for table in ("runs", "decisions"):
                    cur.execute(
                        f"SELECT setval(pg_get_serial_sequence('{table}', 'id'), (SELECT max(id) FROM {table}))"
                    )
                raw.commit()
            else:
                cur.execute("COMMIT")
            done += size
            if done % 200_000 == 0 or done == n:
                progress(f"  {done:,}/{n:,} runs added")
        if postgres:
            cur.execute("ANALYZE runs")
            cur.execute("ANALYZE decisions")
            raw.commit()
        else:
            cur.execute("PRAGMA cache_size = -2000")
    finally:
        raw.close()
    return time.perf_counter() - started


# ------------------------------------------------------------------------------ measurements

VM_STEP = 10  # SQLite calls the progress handler every VM_STEP virtual-machine instructions
TRAIN_AT = ("each", "ends")


@dataclass
class StoreWork:
    """What the store was asked meanwhile: the statements (SELECT, INSERT, UPDATE, DELETE, WITH)
    and, on SQLite, the virtual-machine instructions they took (to ``VM_STEP``): counts that do
    not depend on the machine's load, unlike the timings."""

    statements: list[tuple[str, Any]] = field(default_factory=list)
    vm_steps: int = 0


@contextmanager
def store_work(store: Any) -> Iterator[StoreWork]:
    from sqlalchemy import event

    work = StoreWork()
    sqlite = store.dialect == "sqlite"

    def capture(conn: Any, cursor: Any, statement: str, parameters: Any, context: Any, many: bool) -> None:
        if statement.lstrip().upper().startswith(("SELECT", "INSERT", "UPDATE", "DELETE", "WITH")):
            work.statements.append((statement, parameters))

    def step() -> int:
        work.vm_steps += VM_STEP
        return 0

    def checkout(dbapi_conn: Any, record: Any, proxy: Any) -> None:
        if sqlite:
            dbapi_conn.set_progress_handler(step, VM_STEP)

    def checkin(dbapi_conn: Any, record: Any) -> None:
        if sqlite:
            dbapi_conn.set_progress_handler(None, 0)

    listeners = [("before_cursor_execute", capture), ("checkout", checkout), ("checkin", checkin)]
    for name, fn in listeners:
        event.listen(store.engine, name, fn)
    try:
        yield work
    finally:
        for name, fn in listeners:
            event.remove(store.engine, name, fn)


def _work_summary(works: list[StoreWork], sqlite: bool) -> dict[str, Any]:
    return {
        "statements": max(len(w.statements) for w in works),
        "vm_steps_p50": float(np.median([w.vm_steps for w in works])) if sqlite else None,
    }


def _pct(values: list[float], q: float) -> float:
    return float(np.percentile(np.asarray(values) * 1000.0, q))


def _summary_ms(values: list[float]) -> dict[str, float]:
    return {"p50_ms": _pct(values, 50), "p95_ms": _pct(values, 95), "n": len(values)}


def database_bytes(store: Any) -> int:
    import sqlalchemy as sa

    if store.sqlite_file is not None:
        files = [store.sqlite_file, store.sqlite_file.with_name(store.sqlite_file.name + "-wal")]
        return sum(f.stat().st_size for f in files if f.exists())
    with store.engine.connect() as conn:
        return int(
            conn.execute(
                sa.text(
                    "SELECT sum(pg_total_relation_size(c)) FROM unnest(ARRAY['runs', 'decisions', "
                    "'model_versions']::regclass[]) AS c"
                )
            ).scalar_one()
        )


def _child(code: str, *args: str, timeout: float) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    # a deployed worker has its bytecode cached; without it torch's lazily imported modules
    # (compiled from source in every process) eat most of a training budget
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    return subprocess.run(
        [sys.executable, "-c", code, *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def warm_bytecode() -> None:
    """Import what training imports once, so that its bytecode is cached for the measured runs."""
    _child(_WARM_CHILD, timeout=900)


def _train(url: str, budget: float) -> dict[str, Any]:
    payload = json.dumps({"url": url, "job_type": TRAINED_JOB, "budget": budget})
    proc = _child(_TRAIN_CHILD, payload, timeout=budget * 3 + 600)
    if proc.returncode != 0:
        raise RuntimeError(f"training child failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _record_try(
    facade: Any, synthetic: Synthetic, ctx: _Context, decision: Any, i: int, try_number: int
) -> None:
    """Record the run sample ``i``'s decision led to (``try_number``: a retried try of it)."""
    facade.record_run(
        job_type=TRAINED_JOB,
        framework="spark",
        scale_out=decision.chosen_scale_out,
        runtime_s=float(np.exp(ctx.log_curve[decision.chosen_scale_out - SCALE_OUTS[0]])),
        context=ctx.properties,
        dag_id="bench_scale",
        task_id=f"task_{i}",
        run_id=f"bench__{synthetic.generated}_{i}",
        try_number=try_number,
        # as a task records it: with Airflow's id of the try (a UUID; here one per sample and try)
        ti_id=str(uuid.uuid5(uuid.NAMESPACE_URL, f"bench_scale/{synthetic.generated}/{i}/{try_number}")),
        decision_id=decision.decision_id,
    )


def measure(
    facade: Any,
    synthetic: Synthetic,
    *,
    samples: int,
    budget: float,
    progress: Callable[[str], None],
    train: bool = True,
) -> dict[str, Any]:
    from airflow_provider_bellamy.facade import clear_model_cache

    url = facade.store.url.render_as_string(hide_password=False)
    trained_report: dict[str, Any] | None = None
    if train:
        progress(f"  training {TRAINED_JOB} in a fresh process (budget {budget:.0f} s)")
        trained_report = _train(url, budget)
    else:
        progress(f"  not training: the {TRAINED_JOB} model trained at a smaller level stays active")
    clear_model_cache()
    trained = [c for c in synthetic.contexts if c.job_type == TRAINED_JOB][:samples]
    # each measured context gets its fine-tuned copy first, as its earlier launches would have
    warm = time.perf_counter()
    for ctx in trained:
        facade.size(TRAINED_JOB, ctx.properties, SCALE_OUTS, 600.0, framework="spark")
    warm_s = time.perf_counter() - warm
    record, uncached, cached = [], [], []
    sqlite = facade.store.dialect == "sqlite"
    record_work: list[StoreWork] = []
    cached_work: list[StoreWork] = []
    for i in range(samples):
        ctx = trained[i % len(trained)]
        with store_work(facade.store) as work:
            decision = facade.size(TRAINED_JOB, ctx.properties, SCALE_OUTS, 600.0, framework="spark")
        cached_work.append(work)  # the copy is current: a cached launch (untimed, counted)
        t0 = time.perf_counter()
        _record_try(facade, synthetic, ctx, decision, i, 1)
        record.append(time.perf_counter() - t0)
        with store_work(facade.store) as work:  # the same again (a retried try), counted
            _record_try(facade, synthetic, ctx, decision, i, 2)
        record_work.append(work)
        clear_model_cache()  # the context has a new run and nothing is loaded: read, fine-tune, store
        t0 = time.perf_counter()
        first = facade.size(TRAINED_JOB, ctx.properties, SCALE_OUTS, 600.0, framework="spark")
        uncached.append(time.perf_counter() - t0)
        if first.model_version is None or "ctx-" not in first.model_version:
            raise RuntimeError(f"size() did not use a fine-tuned model: {first.fallback_reason}")
        for _ in range(CACHED_PER_SAMPLE):
            t0 = time.perf_counter()
            facade.size(TRAINED_JOB, ctx.properties, SCALE_OUTS, 600.0, framework="spark")
            cached.append(time.perf_counter() - t0)
    decisions, runs = [], []
    for _ in range(samples):
        t0 = time.perf_counter()
        listed = facade.list_decisions(limit=50)
        decisions.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        facade.list_runs(limit=50)
        runs.append(time.perf_counter() - t0)
    assert len(listed) == 50
    return {
        "size_cached": _summary_ms(cached),
        "size_uncached": _summary_ms(uncached),
        "record_run": _summary_ms(record),
        "list_decisions_50": _summary_ms(decisions),
        "list_runs_50": _summary_ms(runs),
        "train": trained_report,
        "size_cached_work": _work_summary(cached_work, sqlite),
        "record_run_work": _work_summary(record_work, sqlite),
        "warm_contexts": len(trained),
        "warm_s": round(warm_s, 2),
        "database_mb": round(database_bytes(facade.store) / 2**20, 1),
    }


@contextmanager
def _store_for(store_url: str | None, force: bool) -> Iterator[tuple[Any, bool]]:
    """The store to fill: a temporary SQLite one, or the named store (empty unless ``force``)."""
    from airflow_provider_bellamy.facade import Bellamy

    if store_url is None:
        with tempfile.TemporaryDirectory(prefix="bellamy-scale-") as tmp:
            facade = Bellamy(f"sqlite:///{Path(tmp) / 'bellamy.db'}")
            facade.upgrade()
            yield facade, True
        return
    facade = Bellamy(store_url, connect_timeout_s=5.0)
    facade.store.ping()  # an unreachable store: StoreError naming it, before anything else
    state = facade.schema_status().state
    if state in ("missing", "empty"):
        facade.upgrade()
    existing = facade.count_runs()  # an outdated or foreign store: its error, nothing written
    if existing and not force:
        raise InvalidInputError(
            "--store-url",
            facade.store.display_url,
            f"already holds {existing:,} runs; the benchmark adds a million synthetic ones: give an "
            "empty store, or --force to add them anyway",
        )
    yield facade, False


def run_scale(
    runs: Any = DEFAULT_RUNS,
    contexts: Any = DEFAULT_CONTEXTS,
    *,
    store_url: str | None = None,
    force: bool = False,
    samples: Any = SAMPLES,
    train_budget_s: float | None = None,
    train_at: str = "each",
    progress: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    from airflow_provider_bellamy.retraining import DEFAULT_TRAIN_BUDGET_S

    say = progress or (lambda _msg: None)
    total = validate_count(runs, "--runs", MIN_RUNS, MAX_RUNS)
    n_contexts = validate_count(contexts, "--contexts", 5, min(100_000, total // 10))
    n_samples = validate_count(samples, "--samples", 3, 1000)
    budget = DEFAULT_TRAIN_BUDGET_S if train_budget_s is None else float(train_budget_s)
    if not math.isfinite(budget) or budget <= 0:
        raise InvalidInputError("--train-budget", train_budget_s, "must be a number of seconds > 0")
    if train_at not in TRAIN_AT:
        raise InvalidInputError("--train-at", train_at, f"must be one of {list(TRAIN_AT)}")
    synthetic = Synthetic(n_contexts, total)
    say("caching the bytecode training imports")
    warm_bytecode()
    report: dict[str, Any] = {
        "benchmark": "scale",
        "date": time.strftime("%Y-%m-%d"),
        "cores": os.cpu_count(),
        "runs": total,
        "contexts": n_contexts,
        "samples": n_samples,
        "train_budget_s": budget,
        "train_at": train_at,
        "trained_job_type": TRAINED_JOB,
        "levels": [],
    }
    with _store_for(store_url, force) as (facade, temporary):
        report["store"] = "temporary SQLite" if temporary else facade.store.display_url
        report["dialect"] = facade.store.dialect
        levels = levels_for(total)
        for level in levels:
            say(f"filling to {level:,} runs")
            fill_s = fill(facade.store, synthetic, level - synthetic.generated, say)
            say(f"measuring at {level:,} runs")
            # "ends": the first level trains (size() needs a model) and the last (training at the
            # largest store); the levels between keep the first one's model, to save their time
            train = train_at == "each" or level in (levels[0], levels[-1])
            result = measure(facade, synthetic, samples=n_samples, budget=budget, progress=say, train=train)
            result.update(level=level, stored_runs=facade.count_runs(), fill_s=round(fill_s, 1))
            report["levels"].append(result)
    report["growth"] = growth(report["levels"])
    report["verdicts"] = verdicts(report)
    return report


def growth(levels: list[dict[str, Any]]) -> dict[str, float]:
    """Ratio of each launch-path p50 at the largest level to the smallest."""
    if len(levels) < 2:
        return {}
    first, last = levels[0], levels[-1]
    return {
        key: round(last[key]["p50_ms"] / first[key]["p50_ms"], 2)
        for key in ("size_cached", "size_uncached", "record_run", "list_decisions_50", "list_runs_50")
    }


def verdicts(report: dict[str, Any]) -> dict[str, bool]:
    last = report["levels"][-1]
    out = {
        "size_cached_p50_ms": last["size_cached"]["p50_ms"] <= TARGETS["size_cached_p50_ms"],
        "size_uncached_p50_ms": last["size_uncached"]["p50_ms"] <= TARGETS["size_uncached_p50_ms"],
        "record_p50_ms": last["record_run"]["p50_ms"] <= TARGETS["record_p50_ms"],
        "train_within_budget": last["train"]["train_s"] <= report["train_budget_s"],
        "train_peak_memory": last["train"]["maxrss_mb"] <= MAX_TRAIN_RSS_MB,
    }
    for key in ("size_cached", "size_uncached", "record_run"):
        if key in report["growth"]:
            out[f"growth_{key}"] = report["growth"][key] < MAX_GROWTH
    return out


def render_scale(report: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    levels = report["levels"]
    table = Table(
        title=f"Scale ({report['store']}, {report['dialect']}; {report['contexts']} contexts; "
        f"{report['cores']} cores; p50 (p95))"
    )
    table.add_column("what")
    for lv in levels:
        table.add_column(f"{lv['level']:,} runs", justify="right")
    if report["growth"]:
        table.add_column("growth", justify="right")
    table.add_column("target", justify="right")

    def ms(entry: dict[str, float]) -> str:
        return f"{entry['p50_ms']:,.1f} ms ({entry['p95_ms']:,.1f})"

    rows: list[tuple[str, str, Callable[[dict[str, Any]], str], str]] = [
        ("size(), cached context", "size_cached", lambda lv: ms(lv["size_cached"]), "≤ 20 ms"),
        ("size(), context fine-tuned on first use", "size_uncached", lambda lv: ms(lv["size_uncached"]), "≤ 1.5 s"),
        ("record one run", "record_run", lambda lv: ms(lv["record_run"]), "≤ 20 ms"),
        ("list last 50 decisions", "list_decisions_50", lambda lv: ms(lv["list_decisions_50"]), ""),
        ("list last 50 runs", "list_runs_50", lambda lv: ms(lv["list_runs_50"]), ""),
        ("statements per cached size()", "", lambda lv: str(lv["size_cached_work"]["statements"]), ""),
        ("statements per recorded run", "", lambda lv: str(lv["record_run_work"]["statements"]), ""),
        ("SQLite VM steps per cached size()", "", lambda lv: _steps(lv["size_cached_work"]), ""),
        ("SQLite VM steps per recorded run", "", lambda lv: _steps(lv["record_run_work"]), ""),
        ("train() (its own report)", "", lambda lv: _train_cell(lv, lambda t: f"{t['train_s']:.1f} s"), f"≤ {report['train_budget_s']:.0f} s"),
        ("train() process wall, imports included", "", lambda lv: _train_cell(lv, lambda t: f"{t['wall_s']:.1f} s"), ""),
        ("train() peak memory (process max RSS)", "", lambda lv: _train_cell(lv, lambda t: f"{t['maxrss_mb']:,.0f} MB"), "< 2 GB"),
        ("train() runs stored / read", "", lambda lv: _train_cell(lv, lambda t: f"{t['data_rows']:,} / {t['window_rows']:,}"), ""),
        ("database size", "", lambda lv: f"{lv['database_mb']:,.1f} MB", ""),
        ("fill time (this decade)", "", lambda lv: f"{lv['fill_s']:.0f} s", ""),
    ]  # fmt: skip
    for label, key, cell, target in rows:
        row = [label, *(cell(lv) for lv in levels)]
        if report["growth"]:
            row.append(f"{report['growth'][key]:.2f}×" if key else "")
        row.append(target)
        table.add_row(*row)
    console = Console()
    console.print(table)
    failed = [k for k, ok in report["verdicts"].items() if not ok]
    console.print("targets: all met" if not failed else f"targets MISSED: {', '.join(failed)}")


def _steps(work: dict[str, Any]) -> str:
    return "—" if work["vm_steps_p50"] is None else f"{work['vm_steps_p50']:,.0f}"


def _train_cell(level: dict[str, Any], cell: Callable[[dict[str, Any]], str]) -> str:
    return "not trained" if level["train"] is None else cell(level["train"])
