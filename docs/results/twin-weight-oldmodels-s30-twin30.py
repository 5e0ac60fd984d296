# Throw-away (session 30, twin30): reads join29's cached fold models back (their key holds the model code of 100046f;
# pre-training has not changed since). Copied to /tmp/twin30/oldmodels.py, where the harnesses import it from.
"""Load join29's cached fold models (model code of 100046f) under the current code."""
import hashlib, subprocess
from pathlib import Path
import airflow_provider_bellamy.benchmarks.common as common

def old_digest(commit="100046f"):
    files = subprocess.run(["git", "ls-tree", "--name-only", commit, "airflow_provider_bellamy/model/"], capture_output=True, text=True, check=True).stdout.split()
    d = hashlib.sha256()
    for f in sorted(p for p in files if p.endswith(".py")):
        d.update(subprocess.run(["git", "show", f"{commit}:{f}"], capture_output=True, check=True).stdout)
    return d.digest()

def patch(commit="100046f"):
    dg = old_digest(commit)
    common._model_code_digest = lambda: dg
