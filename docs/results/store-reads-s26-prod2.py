"""list_runs(source=...) on a store: min of 3 warm calls (ms)."""
import sys, time
import airflow_provider_bellamy as a
from airflow_provider_bellamy.facade import Bellamy
print(a.__file__)
b = Bellamy(sys.argv[1])
for what, kw in [("list_runs(source=observed, limit=50)", dict(source="observed", limit=50)),
                 ("list_runs(source=trace, limit=50)", dict(source="trace", limit=50)),
                 ("list_runs(status=success, source=observed, limit=50)", dict(status="success", source="observed", limit=50))]:
    best = None
    for _ in range(3):
        t = time.perf_counter(); n = len(b.list_runs(**kw)); d = (time.perf_counter() - t) * 1000
        best = d if best is None else min(best, d)
    print(f"{what:55s} {best:8.1f} ms  ({n})")
