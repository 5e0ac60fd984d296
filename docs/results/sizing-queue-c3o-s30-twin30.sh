#!/bin/bash
# base = main 4e5eaf7 (/work/main), twin = /work/wt/twin30 reading base's cached models (pre-training unchanged)
log=/tmp/size30b/queue.log
for tr in c3o bell; do
  T=$tr
  for tag in base twin; do
    if [ $tag = base ]; then dir=/work/main; else dir=/work/wt/int30; fi
    echo "### $(date -u +%T) start $tag $tr load $(cut -d' ' -f1-3 /proc/loadavg)" >> $log
    (cd $dir && PYTHONPATH=$dir PATH=/work/main/.venv/bin:$PATH COLUMNS=110 nice -n 10 /work/main/.venv/bin/python - <<PY > /tmp/size30b/sizing-$tr-$tag.txt 2>&1
import sys
sys.path.insert(0, "/tmp/twin30")
if "$tag" == "twin":
    import oldmodels; oldmodels.patch("4e5eaf7")
from airflow_provider_bellamy.cli import main
sys.argv = ["bellamy", "benchmark", "sizing", "--dataset", "$T", "--quick", "--seeds", "1", "--workers", "1",
            "--model-cache", "/tmp/size30b/cache-$tr", "--json", "/tmp/size30b/sizing-$tr-$tag.json"]
sys.exit(main())
PY
    )
    echo "### $(date -u +%T) end $tag $tr rc=$? load $(cut -d' ' -f1-3 /proc/loadavg)" >> $log
  done
done
echo "### done" >> $log
