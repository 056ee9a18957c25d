#!/usr/bin/env bash
# One device command of a lent GPU session (#36), run on the device machine from the repository root:
#
#   bash experiments/gpu_call.sh DEADLINE_S [PHASE...]
#
# Sets the machine up once (the carried wheels of .whl/ into /tmp/site, CIFAR-10 decoded from .gpu/'s JPEG
# pack into /tmp/cifar), starts experiments/gpu_session.sh with the PHASEs detached (setsid: it outlives this
# command until the machine goes back), then waits until the session is done, one of its phases has failed,
# or DEADLINE_S seconds have passed, and packs the session's small files (tables, logs, each run's
# events.jsonl, profile.toml, meta.json and engine.log; never checkpoints) into $OUT/gs.tgz. Without
# PHASEs it only waits and packs: the next command of the same session collects what was still running.
# Before each call, here: `bash experiments/gpu_prepare.sh` (the wheels, the pack, .gpu/HEAD); carry .whl and .gpu.
# DRY=1 checks the script on a machine without a GPU (tiny CPU runs; $OUT defaults to /tmp/gs-out).
set -u
cd "$(dirname "$0")/.."
DEADLINE=$1; shift
export R=${R:-/tmp/gs} DATA=${DATA:-/tmp/cifar} PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/gs-out}
T0=$(date +%s)
mkdir -p "$R" "$OUT"
if [ ! -f /tmp/gs-setup.ok ]; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
        .whl/*.whl || { echo "wheels did not install"; exit 3; }
    if [ ! -f "$DATA/cifar-10-batches-py/test_batch" ]; then
        python3 .gpu/cifar10_from_jpeg.py --pack .gpu/cifar10-jpeg.xz --out "$DATA" > "$R/decode.txt" 2>&1 \
            || { cat "$R/decode.txt"; exit 4; }
    fi
    touch /tmp/gs-setup.ok
fi
export PYTHONPATH=/tmp/site:$PWD
echo "setup: $(( $(date +%s) - T0 )) s"
nvidia-smi > "$R/nvidia-smi-$(date +%H%M%S).txt" 2>&1
# The device's git metadata can be the session's starting checkout, not the tree that was sent: the caller
# writes `git rev-parse HEAD > .gpu/HEAD` (carried) before each call, and the runs' provenance is read with it.
cp .gpu/HEAD "$R/tree-commit.txt" 2>/dev/null || git rev-parse HEAD > "$R/tree-commit.txt" 2>/dev/null || true
STARTED=$#
if [ $# -gt 0 ]; then
    rm -f "$R/DONE"
    setsid nohup bash experiments/gpu_session.sh "$@" > "$R/session.out" 2>&1 < /dev/null &
fi
while [ ! -f "$R/DONE" ] && [ $(( $(date +%s) - T0 )) -lt "$DEADLINE" ]; do
    # the table row this call started failed: say so at once (a collecting call waits for the rest)
    [ "$STARTED" -gt 0 ] && grep -q "table: exit [1-9]" "$R/driver.log" 2>/dev/null && break
    sleep 5
done
(cd "$R" && find . -type f -size -8M \( -name '*.json' -o -name '*.txt' -o -name '*.log' -o -name '*.err' \
    -o -name '*.jsonl' -o -name 'profile.toml' -o -name 'meta.json' -o -name 'session.out' \) \
    -not -path '*/checkpoints/*' | tar czf "$OUT/gs.tgz" -T -)
echo "--- after $(( $(date +%s) - T0 )) s; done: $([ -f "$R/DONE" ] && echo yes || echo no)"
cat "$R/driver.log" 2>/dev/null
for f in "$R"/table.txt "$R"/smoke-*.txt; do [ -f "$f" ] && { echo "--- $f"; cat "$f"; }; done
for f in "$R"/*.err; do [ -s "$f" ] && { echo "--- $f"; tail -c 1500 "$f"; }; done
exit 0
