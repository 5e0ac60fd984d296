import sys, time, json
from airflow_provider_bellamy.facade import Bellamy
from airflow_provider_bellamy.store import RunRepository
import airflow_provider_bellamy as a
url = sys.argv[1]
b = Bellamy(url)
b.count_runs()  # connection, schema check
ctx = b.list_runs("grep", limit=1)[0]["context"]
def t(name, fn, reps=3):
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter(); out = fn(); ts.append(time.perf_counter() - t0)
    return name, round(min(ts) * 1000, 1), out
def jt(successful_only):
    with b.store.read() as s:
        return RunRepository(s).job_types(successful_only=successful_only)
rows = [
    t("job_types()", lambda: len(b.job_types())),
    t("job_types(successful_only)", lambda: len(jt(True))),
    t("list_runs(grep, limit=50)", lambda: len(b.list_runs("grep"))),
    t("runs_frame(grep, context) trainable", lambda: len(b.runs_frame("grep", context=ctx))),
    t("runs_frame(grep, context) every run", lambda: len(b.runs_frame("grep", successful_only=False, context=ctx))),
]
print(a.__file__)
for r in rows: print(f"{r[0]:40s} {r[1]:>9} ms  ({r[2]})")
