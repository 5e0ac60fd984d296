#!/usr/bin/env bash
# Installs what the demo and the tests start on loopback. Idempotent: a second run installs nothing.
#   setup-services.sh            everything the tests need: Java (Spark), PostgreSQL, Flink
#   setup-services.sh java       only Java, for `make demo` (Spark ships in the pyspark wheel)
set -euo pipefail
cd "$(dirname "$0")/.."
want="${1:-all}"

apt_updated=0
apt_install() {
  if [ "$(id -u)" != 0 ]; then
    echo "setup-services: need root to apt-get install $*; tests needing it will skip" >&2
    return 0
  fi
  if [ "$apt_updated" = 0 ]; then apt-get update -qq; apt_updated=1; fi
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@" >/dev/null
}

if ! command -v java >/dev/null 2>&1; then
  apt_install openjdk-17-jre-headless
fi
[ "$want" = java ] && exit 0

if ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; then
  apt_install postgresql
fi
bash scripts/setup-flink.sh
