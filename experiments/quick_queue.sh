#!/usr/bin/env bash
# The quick CPU protocol's rows, two one-thread runs at a time, from a detached worktree. Idempotent, like
# cpu_queue.sh: a finished run is reused, a stopped or lost one resumed, a seed already collected in RESULTS is
# not trained again. Every pair of one RESULTS folder must train on one CPU kind (the kernels of two kinds give
# other numbers from the first step on): start a new folder on a new kind.
#
#   nohup setsid bash experiments/quick_queue.sh DATA_ROOT RESULTS [STEP ...] > quick-queue.log 2>&1 < /dev/null &
#
# DATA_ROOT holds cifar-10-batches-py/; RESULTS is the folder (in this checkout) the finished runs' small files are
# copied to, to be committed. A STEP is METHODS@SEEDS ("trades,dafa@0-1"), trained in the order given; without
# steps, the whole table in the order that lets DAFA's reading come first: TRADES and DAFA seeds 0-1, PGD-AT and
# TRADES to ten seeds, DAFA to five, FRL's fine-tunes of PGD-AT seeds 0-4, CFA on AT and on TRADES, then TRIX and
# ABSLD (each seed's teacher first).
# The plans that trained the committed folders: cifar10-cpu-quick/ (2026-11-28, AMD EPYC with AVX512-BF16) the
# default's first four steps; cifar10-cpu-quick-xeon/ (2026-12-02, Intel Xeon) "trades,dafa@0-1" "at,frl@0-4"
# "trades,dafa@2-4" "cfa-at,cfa-trades@0-4"; the DAFA rows of cifar10-cpu-quick/ under the scaled protocols'
# rule (2026-12-02, AMD EPYC with AVX512-BF16) "dafa@0-4"; its CFA rows on a 100-image validation split
# (2026-12-02/03, the same AMD kind) "cfa-at,cfa-trades@0-4".
# The worktree (FAIRTUI_QUICK_TREE, default ../exp-quick) is detached at this checkout's HEAD when the queue
# starts, so that edits here never change the code under a run; its home is FAIRTUI_QUICK_HOME.
set -euo pipefail
usage="usage: quick_queue.sh DATA_ROOT RESULTS [METHODS@SEEDS ...]"
data=${1:?$usage}
results=${2:?$usage}
shift 2
steps=("$@")
if [ ${#steps[@]} -eq 0 ]; then
  steps=("trades,dafa@0-1" "at,trades@0-9" "dafa@2-4" "at,frl@0-4" "cfa-at,cfa-trades@0-4" "trix,teacher,absld@0-4")
fi
for step in "${steps[@]}"; do  # every step read before anything trains: a slip is one line, not a stopped queue
  [[ $step =~ ^[a-z-]+(,[a-z-]+)*@[0-9]+(-[0-9]+)?$ ]] || { echo "quick_queue: '$step' is not METHODS@SEEDS" >&2; exit 2; }
done
repo=$(cd "$(dirname "$0")/.." && pwd)
case $results in /*) ;; *) results=$repo/$results ;; esac
tree=${FAIRTUI_QUICK_TREE:-$repo/../exp-quick}
home=${FAIRTUI_QUICK_HOME:-$repo/../exp-quick-home}
workers=${FAIRTUI_QUICK_WORKERS:-2}
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1
if [ ! -d "$tree" ]; then git -C "$repo" worktree add --detach "$tree" HEAD; fi
git -C "$tree" checkout -q --detach "$(git -C "$repo" rev-parse HEAD)"
cd "$tree"
for step in "${steps[@]}"; do
  methods=${step%@*}
  seeds=${step#*@}
  first=${seeds%-*}
  last=${seeds#*-}
  echo "quick_queue: ${methods//,/ } seeds $first-$last"
  python experiments/cifar10_fairness.py --scale quick --data-root "$data" --home "$home" \
    --results "$results" --workers "$workers" --threads 1 \
    --methods ${methods//,/ } --seeds $(seq "$first" "$last") || true
done
echo "quick_queue: done; see the log for any run that stopped"
