#!/usr/bin/env bash
# The model benchmarks docs/benchmarks.md quotes: full mode, 3 seeds, each command spread over the
# machine's cores (--workers) and sharing pre-trained models between accuracy and sizing
# (--model-cache). Writes NAME.json and NAME.txt (the printed tables) per benchmark.
#
#   scripts/run-benchmarks.sh [OUT_DIR [NAME ...]]     (default: docs/results, every NAME below)
#
# BELLAMY: the command to run (default `bellamy`); WORKERS: processes (default: the cores).
set -euo pipefail
out=${1:-docs/results}
shift || true
names=("$@")
if [ ${#names[@]} -eq 0 ]; then
  names=(accuracy-c3o-leave-machine-type-out sizing-c3o-leave-machine-type-out accuracy-c3o sizing-c3o
         accuracy-c3o-leave-size-out sizing-c3o-leave-size-out accuracy-bell sizing-bell
         sizing-c3o-leave-job-out accuracy-c3o-larger-scale-outs sizing-c3o-larger-scale-outs
         accuracy-bell-larger-scale-outs sizing-bell-larger-scale-outs accuracy-c3o-smaller-scale-outs
         sizing-c3o-smaller-scale-outs accuracy-bell-smaller-scale-outs sizing-bell-smaller-scale-outs)
fi
read -r -a bellamy <<< "${BELLAMY:-bellamy}"
workers=${WORKERS:-$(nproc)}
cache=${MODEL_CACHE:-$(mktemp -d)}
mkdir -p "$out"
export COLUMNS=${COLUMNS:-150}

run() {  # NAME benchmark-arguments...
  local name=$1
  shift
  echo "$(date -u +%FT%TZ) $name: bellamy benchmark $*" >&2
  "${bellamy[@]}" benchmark "$@" --seeds 3 --workers "$workers" --model-cache "$cache" \
    --json "$out/$name.json" >"$out/$name.txt"
}

for name in "${names[@]}"; do
  case $name in
    accuracy-c3o-leave-machine-type-out) run "$name" accuracy --dataset c3o --protocol leave-machine-type-out ;;
    sizing-c3o-leave-machine-type-out) run "$name" sizing --dataset c3o --protocol leave-machine-type-out ;;
    accuracy-c3o-leave-size-out) run "$name" accuracy --dataset c3o --protocol leave-size-out ;;
    sizing-c3o-leave-size-out) run "$name" sizing --dataset c3o --protocol leave-size-out ;;
    accuracy-*-scale-outs | sizing-*-scale-outs)
      # BENCHMARK-DATASET-(larger|smaller)-scale-outs
      IFS=- read -r benchmark dataset side _ <<< "$name"
      run "$name" "$benchmark" --dataset "$dataset" --protocol "$side-scale-outs" ;;
    accuracy-c3o) run "$name" accuracy --dataset c3o ;;
    sizing-c3o) run "$name" sizing --dataset c3o ;;
    accuracy-bell) run "$name" accuracy --dataset bell ;;
    sizing-bell) run "$name" sizing --dataset bell ;;
    sizing-c3o-leave-job-out)
      # the traces through a store and back, as a user's history would come
      store=$(mktemp -d)
      "${bellamy[@]}" --store-url "sqlite:///$store/c3o.db" history import --traces c3o >&2
      "${bellamy[@]}" --store-url "sqlite:///$store/c3o.db" history export "$store/c3o.csv" >&2
      run "$name" sizing --traces "$store/c3o.csv" --protocol leave-job-out
      rm -rf "$store" ;;
    *) echo "unknown benchmark $name" >&2; exit 2 ;;
  esac
done
echo "$(date -u +%FT%TZ) done" >&2
