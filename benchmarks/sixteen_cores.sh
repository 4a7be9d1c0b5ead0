#!/usr/bin/env bash
# Issue 27's measurements on a lent 16-core machine in one call (about 7.5 minutes there):
# scaling.py at 1-16 workers with the ceiling on the 6.4M x 40 rows, call_cost.py at
# 16 workers, and search.py's grid and ASHA against scikit-learn with n_jobs=16. The machine
# reaches no package index: the packages it lacks come as wheels in .whl/ (see README.md,
# "On a 16-core machine"). Everything it writes goes to $OUT (default ./sixteen-cores):
# copies of RESULTS.md with the generated blocks, the logs, the scaling rows as JSON.
set -u
OUT=${OUT:-$PWD/sixteen-cores}
mkdir -p "$OUT"
if [ -d .whl ]; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target /tmp/site .whl/*.whl || exit 3
    export PYTHONPATH=/tmp/site:$PWD
fi
export PYTHONUNBUFFERED=1
python3 -c "import sklearn, dask, distributed, zarr, taskdml.parallel" || exit 4
for name in scaling grid adaptive; do cp benchmarks/RESULTS.md "$OUT/$name.md"; done
cd benchmarks || exit 5
timeout 390 python3 scaling.py --workers 1,2,4,8,16 --rows 6400000 --features 40 --epochs 3 \
    --parts scaling --out "$OUT/scaling.md" --save-rows "$OUT/rows.json" \
    --note "16 cores, the issue 27 workload" > "$OUT/scaling.log" 2>&1
echo "scaling rc $?"
timeout 60 python3 call_cost.py --workers 16 > "$OUT/call_cost.log" 2>&1
echo "call_cost rc $?"
timeout 150 python3 search.py --workers 16 --parts grid --cold-repeats 1 --repeats 3 \
    --results "$OUT/grid.md" --note "16 cores: scikit-learn n_jobs=16" > "$OUT/grid.log" 2>&1
echo "grid rc $?"
timeout 300 python3 search.py --workers 16 --parts adaptive --sizes 1000000 \
    --results "$OUT/adaptive.md" --note "16 cores: halving n_jobs=16, Optuna 16 threads" \
    > "$OUT/adaptive.log" 2>&1
echo "adaptive rc $?"
tail -n 30 "$OUT/scaling.log" "$OUT/call_cost.log"
