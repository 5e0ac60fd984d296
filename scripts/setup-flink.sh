#!/usr/bin/env bash
# Installs PyFlink (the apache-flink wheel ships the whole Flink distribution: bin/flink,
# jobmanager.sh, taskmanager.sh, lib/*.jar) into its own virtual environment, .venv-flink.
# PyFlink pins pandas 2 / numpy 2.1 / pyarrow 16 and so cannot share .venv (pandas 3).
# Idempotent: a stamp holding the lock file's hash makes a second run install nothing.
set -euo pipefail
cd "$(dirname "$0")/.."

VENV=.venv-flink
LOCK=requirements-flink.lock
STAMP="$VENV/.installed"

# PyFlink 2.3 supports CPython 3.9-3.12: take the first interpreter in that range.
pick_python() {
  local candidate
  for candidate in "${FLINK_PYTHON:-}" python3.11 python3.12 python3.10 python3.9 python3; do
    [ -n "$candidate" ] || continue
    command -v "$candidate" >/dev/null 2>&1 || continue
    if "$candidate" -c 'import sys; sys.exit(0 if (3, 9) <= sys.version_info[:2] <= (3, 12) else 1)'; then
      command -v "$candidate"
      return 0
    fi
  done
  return 1
}

lock_hash=$(sha256sum "$LOCK" | cut -d' ' -f1)
if [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$lock_hash" ] && [ -x "$VENV/bin/python" ]; then
  echo "setup-flink: $VENV is up to date"
  exit 0
fi

if ! command -v java >/dev/null 2>&1; then
  echo "setup-flink: no java on PATH; Flink needs Java 11+ (scripts/setup-services.sh installs it)" >&2
fi

python=$(pick_python) || {
  echo "setup-flink: no Python 3.9-3.12 found for PyFlink; Flink tests will skip" >&2
  exit 0
}

start=$(date +%s)
if [ ! -x "$VENV/bin/python" ]; then
  "$python" -m venv "$VENV"
fi
# uv (installed into .venv by the Makefile) resolves and links ~10x faster than pip; both
# install exactly the pinned versions.
if [ -x .venv/bin/uv ]; then
  .venv/bin/uv pip install -q --compile-bytecode --python "$VENV/bin/python" -r "$LOCK"
else
  "$VENV/bin/python" -m pip install -q --disable-pip-version-check -r "$LOCK"
fi

flink_bin=$("$VENV/bin/python" -c 'import os, pyflink; print(os.path.join(os.path.dirname(pyflink.__file__), "bin", "flink"))')
if [ ! -x "$flink_bin" ]; then
  echo "setup-flink: $flink_bin is missing after the install" >&2
  exit 1
fi
echo "$lock_hash" > "$STAMP"
echo "setup-flink: installed $("$VENV/bin/python" -c 'import pyflink.version as v; print(v.__version__)') into $VENV in $(( $(date +%s) - start )) s"
