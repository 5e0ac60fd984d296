"""The cached fold models' fine-tuning settings and out-of-fold MRE: main's (old cache) against this branch's."""
import sys
from pathlib import Path

from airflow_provider_bellamy.model import RuntimeModel


def read(folder):
    out = {}
    for p in sorted(Path(folder).glob("*.safetensors")):
        m = RuntimeModel.load(p)
        md = m.metadata
        import hashlib, json
        ctxs = sorted(json.dumps(c["context"], sort_keys=True, default=str) for c in md["curves"]["contexts"])
        key = (tuple(md["job_types"]), md["n_runs"], md["n_contexts"], hashlib.md5("".join(ctxs).encode()).hexdigest()[:8])
        ft = m.calibration.fine_tuning
        t = m.calibration.tables
        out[key] = (ft.residual_correction, ft.prior_scale, round(ft.likelihood_sd, 5),
                    None if t is None else [round(v * 100, 2) for v in t.validation_mre])
    return out


old, new = read(sys.argv[1]), read(sys.argv[2])
for key in sorted(set(old) | set(new), key=str):
    o, n = old.get(key), new.get(key)
    same = o is not None and n is not None and o[:3] == n[:3]
    print(key, "settings same" if same else "SETTINGS DIFFER")
    print("   main:", o)
    print("   this:", n)
