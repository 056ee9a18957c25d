#!/usr/bin/env bash
# The quick CPU protocol's committed baselines (issue #68), two one-thread runs at a time, in the order that lets
# the protocol's DAFA check be read first: TRADES and DAFA seeds 0-1, then PGD-AT and TRADES to ten seeds, DAFA to
# five, and FRL's fine-tunes of PGD-AT seeds 0-4. Idempotent, like cpu_queue.sh: a finished run is reused, a
# stopped or lost one resumed, a seed already collected is not trained again.
#
#   nohup setsid bash experiments/quick_queue.sh DATA_ROOT [WORKTREE] > quick-queue.log 2>&1 < /dev/null &
#
# DATA_ROOT holds cifar-10-batches-py/. WORKTREE (default ../exp-quick) is a git worktree detached at this
# checkout's HEAD when the queue starts, so that edits here never change the code under a run; each finished
# run's small files are copied into this checkout's experiments/results/cifar10-cpu-quick/, to be committed.
set -euo pipefail
data=${1:?usage: quick_queue.sh DATA_ROOT [WORKTREE]}
repo=$(cd "$(dirname "$0")/.." && pwd)
tree=${2:-$repo/../exp-quick}
home=${FAIRTUI_QUICK_HOME:-$repo/../exp-quick-home}
workers=${FAIRTUI_QUICK_WORKERS:-2}
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1
if [ ! -d "$tree" ]; then git -C "$repo" worktree add --detach "$tree" HEAD; fi
git -C "$tree" checkout -q --detach "$(git -C "$repo" rev-parse HEAD)"
cd "$tree"
table() {
  python experiments/cifar10_fairness.py --scale quick --data-root "$data" --home "$home" \
    --results "$repo/experiments/results/cifar10-cpu-quick" --workers "$workers" --threads 1 "$@" || true
}
table --methods trades dafa --seeds 0 1
table --methods at trades --seeds 0 1 2 3 4 5 6 7 8 9
table --methods dafa --seeds 2 3 4
table --methods at frl --seeds 0 1 2 3 4
echo "quick_queue: done; see the log for any run that stopped"
