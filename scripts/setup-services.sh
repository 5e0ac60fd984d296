#!/usr/bin/env bash
# Installs the services the test suite starts on loopback: PostgreSQL (Debian), Java for Spark,
# and the Flink distribution in its own virtual environment (PyFlink conflicts with pandas 3).
# Idempotent: a second run installs nothing.
set -euo pipefail
cd "$(dirname "$0")/.."

apt_updated=0
apt_install() {
  if [ "$(id -u)" != 0 ]; then
    echo "setup-services: need root to apt-get install $*; tests needing it will skip" >&2
    return 0
  fi
  if [ "$apt_updated" = 0 ]; then apt-get update -qq; apt_updated=1; fi
  apt-get install -y -qq --no-install-recommends "$@" >/dev/null
}

if ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; then
  apt_install postgresql
fi
if ! command -v java >/dev/null 2>&1; then
  apt_install openjdk-17-jre-headless
fi
if [ -f scripts/setup-flink.sh ]; then
  bash scripts/setup-flink.sh
fi
