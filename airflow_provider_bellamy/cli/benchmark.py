"""`bellamy benchmark accuracy|sizing|speed|overhead|scale`: the measured figures docs/benchmarks.md quotes."""

from __future__ import annotations

import argparse
from typing import Any


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser("benchmark", help="reproduce the accuracy and sizing benchmarks")
    sub = parser.add_subparsers(dest="benchmark", required=True, metavar="BENCHMARK")

    acc = sub.add_parser("accuracy", help="MRE of Bellamy vs Ernest vs gradient boosting, k = 0..5 points")
    _add_runs_arguments(acc)
    acc.add_argument(
        "--confidence",
        type=float,
        default=0.9,
        help="the band measured on the test runs: shares under its upper bound, above its lower bound "
        "and inside both, and its width",
    )
    acc.add_argument("--seeds", type=int, default=3)
    acc.add_argument(
        "--quick", action="store_true", help="1 seed and a smaller ensemble (< 3 min on 2 cores)"
    )
    acc.add_argument(
        "--draws",
        type=int,
        default=1,
        help="draws of each held-out context's k fine-tuning runs (default 1); every figure pools "
        "them: more draws, band cells that one context's draw does not move",
    )
    acc.add_argument("--json", dest="json_path", default=None, help="write the results as JSON here")
    _add_workers_argument(acc)
    acc.set_defaults(func=_accuracy)

    siz = sub.add_parser("sizing", help="SLA attainment and node-seconds of sizing policies (replay)")
    _add_runs_arguments(siz)
    siz.add_argument("--confidence", type=float, default=0.9)
    siz.add_argument("--seeds", type=int, default=3)
    siz.add_argument("--quick", action="store_true")
    siz.add_argument(
        "--min-draws",
        type=int,
        default=None,
        help="fine-tuning draws per held-out task and k, at least (default 4; more: a narrower interval)",
    )
    siz.add_argument("--json", dest="json_path", default=None)
    siz.add_argument(
        "--decisions",
        metavar="FILE",
        default=None,
        help="write every decision as a JSON line (target, real runs, each policy's prediction, "
        "choice and outcome): where a figure comes from",
    )
    _add_workers_argument(siz)
    siz.set_defaults(func=_sizing)

    spd = sub.add_parser("speed", help="pre-train, fine-tune, predict and size() latency, in process")
    spd.add_argument("--samples", type=int, default=200)
    spd.add_argument("--json", dest="json_path", default=None)
    spd.set_defaults(func=_speed)

    from airflow_provider_bellamy.benchmarks.import_cost import add_parser as add_imports
    from airflow_provider_bellamy.benchmarks.overhead import add_parser as add_overhead

    add_overhead(sub)
    add_imports(sub)

    sca = sub.add_parser(
        "scale", help="size(), record, train() and listing as a store grows to 10^6 runs (SQLite, PostgreSQL)"
    )
    sca.add_argument("--runs", default="1000000", help="runs to store at the end (measured at each decade)")
    sca.add_argument("--contexts", default="300", help="distinct contexts the runs are spread over")
    sca.add_argument(
        "--store-url",
        dest="scale_store_url",
        default=None,
        help="an empty store to fill (default: a temporary SQLite file, deleted afterwards)",
    )
    sca.add_argument("--force", action="store_true", help="fill a store that already holds runs")
    sca.add_argument("--samples", default="10", help="contexts (launches) measured per decade")
    sca.add_argument(
        "--train-budget", type=float, default=None, help="seconds for train() (default: train()'s default)"
    )
    sca.add_argument(
        "--train-at",
        default="each",
        help="each: train() at every level; ends: at the first and the last only (the levels between "
        "keep the first's model; saves their training time)",
    )
    sca.add_argument("--json", dest="json_path", default=None, help="write the results as JSON here")
    sca.set_defaults(func=_scale)


def _add_runs_arguments(parser: argparse.ArgumentParser) -> None:
    runs = parser.add_mutually_exclusive_group()
    runs.add_argument("--dataset", choices=("c3o", "bell"), default=None, help="a bundled set (default c3o)")
    runs.add_argument(
        "--traces",
        metavar="FILE",
        default=None,
        help="your own runs instead (CSV/TSV in the canonical columns, as `history import` reads them)",
    )
    # the names are checked where the splits live (benchmarks.common.benchmark_runs), which refuses
    # one that does not fit the runs, naming the field
    parser.add_argument(
        "--protocol",
        default=None,
        help="how the runs are split: folds (5 folds of each job type's contexts; --traces default), "
        "leave-job-out (each job type held out whole, pre-trained on the others and the bundled "
        "traces; bell's), leave-machine-type-out (each machine type held out whole per job type, "
        "pre-trained on the job type's other machine types; c3o or --traces), leave-environment-out "
        "(each environment held out whole, pre-trained on the other environments' runs and the "
        "bundled traces; --traces), leave-size-out (per job type its largest, then its smallest "
        "third of input sizes held out, pre-trained on its other sizes; c3o or --traces), "
        "larger-scale-outs (per job type the largest third of its scale-outs held out: contexts "
        "fine-tuned below, tested above, no training run above; c3o, bell or --traces), "
        "smaller-scale-outs (its mirror: the smallest third held out, fine-tuned above, tested "
        "below, no training run below; c3o, bell or --traces)",
    )


def _add_workers_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--workers",
        type=int,
        default=1,
        help="processes the held-out tasks are spread over, each on its share of the cores "
        "(the same figures as one process; a machine with more cores finishes sooner)",
    )
    parser.add_argument(
        "--model-cache",
        metavar="DIR",
        default=None,
        help="keep pre-trained models here and read them back (keyed by the training runs, seed, "
        "config and model code): accuracy and sizing on the same splits pre-train once",
    )


def _runs(args: argparse.Namespace) -> dict[str, Any]:
    return {"dataset": args.dataset or "c3o", "traces": args.traces, "protocol": args.protocol}


def _progress() -> Any:
    from rich.console import Console

    console = Console(stderr=True)
    return lambda msg: console.log(msg)


def _accuracy(args: argparse.Namespace) -> int:
    from airflow_provider_bellamy.benchmarks.accuracy import render_accuracy, run_accuracy, write_json

    seeds = 1 if args.quick and args.seeds == 3 else args.seeds
    if seeds < 1:
        from airflow_provider_bellamy.exceptions import InvalidInputError

        raise InvalidInputError("--seeds", seeds, "must be >= 1")
    report = run_accuracy(
        seeds=seeds,
        quick=args.quick,
        confidence=args.confidence,
        progress=_progress(),
        workers=args.workers,
        model_cache=args.model_cache,
        draws=args.draws,
        **_runs(args),
    )
    render_accuracy(report)
    if args.json_path:
        write_json(report, args.json_path)
    return 0


def _sizing(args: argparse.Namespace) -> int:
    from airflow_provider_bellamy.benchmarks.accuracy import write_json
    from airflow_provider_bellamy.benchmarks.sizing import MIN_DRAWS_PER_TASK, render_sizing, run_sizing

    seeds = 1 if args.quick and args.seeds == 3 else args.seeds
    report = run_sizing(
        **_runs(args),
        confidence=args.confidence,
        seeds=seeds,
        quick=args.quick,
        workers=args.workers,
        model_cache=args.model_cache,
        progress=_progress(),
        min_draws=MIN_DRAWS_PER_TASK if args.min_draws is None else args.min_draws,
        decisions=args.decisions,
    )
    render_sizing(report)
    if args.json_path:
        write_json(report, args.json_path)
    return 0


def _speed(args: argparse.Namespace) -> int:
    from airflow_provider_bellamy.benchmarks.accuracy import write_json
    from airflow_provider_bellamy.benchmarks.speed import render_speed, run_speed

    report = run_speed(samples=args.samples, progress=_progress())
    render_speed(report)
    if args.json_path:
        write_json(report, args.json_path)
    return 0


def _scale(args: argparse.Namespace) -> int:
    from airflow_provider_bellamy.benchmarks.accuracy import write_json
    from airflow_provider_bellamy.benchmarks.scale import render_scale, run_scale
    from airflow_provider_bellamy.exceptions import InvalidInputError

    url = args.scale_store_url
    if args.store_url is not None and url is not None and args.store_url != url:
        raise InvalidInputError("--store-url", url, f"differs from the global --store-url {args.store_url!r}")
    report = run_scale(
        args.runs,
        args.contexts,
        store_url=url if url is not None else args.store_url,
        force=args.force,
        samples=args.samples,
        train_budget_s=args.train_budget,
        train_at=args.train_at,
        progress=_progress(),
    )
    render_scale(report)
    if args.json_path:
        write_json(report, args.json_path)
    return 0
