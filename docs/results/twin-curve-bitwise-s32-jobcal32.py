"""Session 32 (jobcal32): the twin's curve in one function (``finetuning.twin_log_runtime``) changes
nothing. Run once with main's code and once with this branch's on the PYTHONPATH:

  MODE=dump OUT=x.npz python twin-curve-bitwise-s32-jobcal32.py CACHE   (each code)
  python twin-curve-bitwise-s32-jobcal32.py compare a.npz b.npz

dump: every cached fold model of s21 join (main's session 31 models, read back under either code) fine-tunes the folds benchmark's draws for k = 0..5 and predicts
its band at the test runs and 1..20; then re-pre-trains fold 0 (calibration's simulation of the
twin) and keeps its tables. compare: every array bit for bit.
"""

import json
import os
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).parent
if sys.argv[1] == "compare":
    a, b = np.load(sys.argv[2]), np.load(sys.argv[3])
    assert sorted(a.files) == sorted(b.files), "different keys"
    differ = [k for k in a.files if not np.array_equal(a[k], b[k])]
    print(f"{len(a.files)} arrays, {len(differ)} differ: {differ[:10]}")
    sys.exit(1 if differ else 0)

import hashlib  # noqa: E402
import subprocess  # noqa: E402

from airflow_provider_bellamy.benchmarks import common  # noqa: E402
from airflow_provider_bellamy.benchmarks.common import K_VALUES, benchmark_runs, held_out_tasks, pretrain  # noqa: E402

# the cached models are keyed by the model code that wrote them (main ffb4e8f's): read them back
# under either code
BASE = "ffb4e8f"
repo = Path(__file__).resolve().parents[2]
names = subprocess.run(
    ["git", "-C", str(repo), "ls-tree", "--name-only", BASE, "airflow_provider_bellamy/model/"],
    capture_output=True, text=True, check=True,
).stdout.split()
digest = hashlib.sha256()
for name in sorted(n for n in names if n.endswith(".py")):
    digest.update(subprocess.run(["git", "-C", str(repo), "show", f"{BASE}:{name}"], capture_output=True, check=True).stdout)
common._model_code_digest = lambda: digest.digest()

cache = Path(sys.argv[1])
data = benchmark_runs(traces=HERE / "synthetic-trace-s21.csv", protocol="folds")
out = {}
for task in held_out_tasks(data, 0):
    if task.algorithm != "join":
        continue
    model = pretrain(task, 0, True, cache)
    rng = np.random.default_rng(10_000 + task.fold)
    draws = {k: {cid: task.draw(g, k, rng) for cid, g in task.held_out.groupby("context_id", sort=True)} for k in K_VALUES}
    for k in K_VALUES:
        for cid, (points, test) in draws[k].items():
            if test.empty:
                continue
            ctx = test.iloc[0].to_dict()
            tuned = model.finetune(points.drop(columns=["context_id"])) if k else model
            for tag, ns in (("test", test["scale_out"].tolist()), ("grid", list(range(1, 21)))):
                band = tuned.predict_band(ctx, ns, 0.9)
                out[f"{task.fold}/{k}/{cid}/{tag}"] = np.stack([np.asarray(x, dtype=np.float64) for x in band])
    if task.fold == 0:
        # calibration's simulation of the twin: the fold's model pre-trained afresh
        fresh = pretrain(task, 0, True, None)
        out["fold0/calibration"] = np.frombuffer(
            json.dumps(fresh.calibration.to_dict(), sort_keys=True).encode(), dtype=np.uint8
        )
np.savez(os.environ["OUT"], **out)
print(f"{len(out)} arrays -> {os.environ['OUT']}")
