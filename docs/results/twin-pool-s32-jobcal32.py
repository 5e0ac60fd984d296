"""Session 32 (jobcal32): does a held-out join context of s21 lose its twins to its own fold? Per
fold of the folds protocol (seed 0): the join contexts with its ratios (``features.DERIVED``: data
per node memory, data per core; the twin rule's equality) that are held out with it, and how many
held-out contexts are left with none in the training data. Calibration's out-of-fold context has
every other training context to find its twins in."""

from pathlib import Path

from airflow_provider_bellamy.benchmarks.common import benchmark_runs, held_out_tasks

data = benchmark_runs(traces=Path(__file__).parent / "synthetic-trace-s21.csv", protocol="folds")
runs = data.runs[data.evaluated]
ctx = runs[runs.job_type == "join"].groupby("context_id").first()
key = {c: (ctx.loc[c, "data_size_mb"] / ctx.loc[c, "memory_mb"], ctx.loc[c, "data_size_mb"] / ctx.loc[c, "cores"]) for c in ctx.index}
groups = ctx.assign(key=[key[c] for c in ctx.index]).groupby("key").size()
print(f"join: {len(ctx)} contexts in {len(groups)} groups of equal ratios, sizes {groups.value_counts().to_dict()}")
for task in held_out_tasks(data, 0):
    if task.algorithm != "join":
        continue
    held = set(task.held_out.context_id.unique())
    lost = sum(1 for c in held for d in ctx.index if d != c and d in held and key[d] == key[c])
    alone = sum(1 for c in held if not any(d not in held and key[d] == key[c] for d in ctx.index if d != c))
    print(f"fold {task.fold}: {len(held)} held out; same-ratio contexts held out with them {lost}; left with none {alone}")
