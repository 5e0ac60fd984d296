"""Before/after on a filled SQLite store: cached size(), record, first use after a new run.

Ad-hoc (docs/benchmarks.md "The launch path after the fix" quotes its output, scale-launch-probe.jsonl).
The store: benchmarks.scale.fill() of Synthetic(300 contexts, N runs) into a migrated SQLite file, then
grep trained (benchmarks.scale._train, budget 30 s). Run once per code version, alternating:
    PYTHONPATH=<worktree> python scale-launch-probe.py sqlite:///STORE.db TAG
Each run measures 25 cached size() of 5 grep contexts, then per context a recorded run and the
first size() after it with the model cache cleared; SQLite VM steps counted every 100 instructions.
"""
import json, sys, time
from collections import Counter
import numpy as np
from sqlalchemy import event
from airflow_provider_bellamy.facade import Bellamy, clear_model_cache
from airflow_provider_bellamy.benchmarks import scale as sc
url, tag = sys.argv[1], sys.argv[2]
b = Bellamy(url)
syn = sc.Synthetic(300, 10**6)
steps = Counter()
def co(dbapi, rec, proxy):
    dbapi.set_progress_handler(lambda: steps.update(n=1) or 0, 100)
event.listen(b.store.engine, "checkout", co)
ctxs = [c for c in syn.contexts if c.job_type == "grep"][3:8]
size = lambda c: b.size("grep", c.properties, sc.SCALE_OUTS, 600.0, framework="spark")
for c in ctxs:
    size(c)
cached, rec, unc, cs, rs, cpu_c, cpu_r = [], [], [], [], [], [], []
for k in range(5):
    for c in ctxs:
        steps.clear(); t = time.perf_counter(); u = time.process_time(); d = size(c); cpu_c.append(time.process_time() - u); cached.append(time.perf_counter() - t); cs.append(steps["n"] * 100)
for k, c in enumerate(ctxs):
    steps.clear(); t = time.perf_counter(); u = time.process_time()
    b.record_run(job_type="grep", framework="spark", scale_out=4, runtime_s=100.0, context=c.properties,
                 dag_id="probe2", task_id=tag, run_id=f"{tag}{time.time()}", decision_id=d.decision_id)
    cpu_r.append(time.process_time() - u); rec.append(time.perf_counter() - t); rs.append(steps["n"] * 100)
    clear_model_cache()
    t = time.perf_counter(); size(c); unc.append(time.perf_counter() - t)
ms = lambda v: round(float(np.median(v)) * 1000, 1)
print(json.dumps({"tag": tag, "cached_p50_ms": ms(cached), "record_p50_ms": ms(rec), "first_use_p50_ms": ms(unc),
                  "cached_cpu_p50_ms": ms(cpu_c), "record_cpu_p50_ms": ms(cpu_r), "cached_vm_steps": int(np.median(cs)), "record_vm_steps": int(np.median(rs)), "n": [len(cached), len(rec), len(unc)]}))
