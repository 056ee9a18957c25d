#!/usr/bin/env bash
# The quick protocol's rows under the scaled-protocol rule (issue #84), retrained on one CPU kind, two one-thread
# runs at a time: TRADES and DAFA (warm-up 3) seeds 0-1 first, so that DAFA's reading comes early, then PGD-AT
# and FRL (alphas 1.0, fine-tuning the same seed's PGD-AT run), the rest of TRADES and DAFA, then CFA on AT and
# on TRADES (FAWA gate 0.02), five seeds each. The baselines are trained here again because the committed ones
# (experiments/results/cifar10-cpu-quick/) trained on another CPU kind, whose kernels give other numbers: every
# pair of this folder is trained on one CPU. Idempotent, like quick_queue.sh.
#
#   nohup setsid bash experiments/quick_rule_queue.sh DATA_ROOT RESULTS [WORKTREE] > queue.log 2>&1 < /dev/null &
#
# DATA_ROOT holds cifar-10-batches-py/; RESULTS is the folder (in this checkout) the finished runs' small files
# are copied to, to be committed; WORKTREE (default ../exp-rule) is a git worktree detached at this checkout's
# HEAD when the queue starts, so that edits here never change the code under a run.
set -euo pipefail
data=${1:?usage: quick_rule_queue.sh DATA_ROOT RESULTS [WORKTREE]}
results=${2:?usage: quick_rule_queue.sh DATA_ROOT RESULTS [WORKTREE]}
repo=$(cd "$(dirname "$0")/.." && pwd)
case $results in /*) ;; *) results=$repo/$results ;; esac
tree=${3:-$repo/../exp-rule}
home=${FAIRTUI_RULE_HOME:-$repo/../exp-rule-home}
workers=${FAIRTUI_RULE_WORKERS:-2}
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1
if [ ! -d "$tree" ]; then git -C "$repo" worktree add --detach "$tree" HEAD; fi
git -C "$tree" checkout -q --detach "$(git -C "$repo" rev-parse HEAD)"
cd "$tree"
table() {
  python experiments/cifar10_fairness.py --scale quick --data-root "$data" --home "$home" \
    --results "$results" --workers "$workers" --threads 1 "$@" || true
}
table --methods trades dafa --seeds 0 1
table --methods at frl --seeds 0 1 2 3 4
table --methods trades dafa --seeds 2 3 4
table --methods cfa-at cfa-trades --seeds 0 1 2 3 4
echo "quick_rule_queue: done; see the log for any run that stopped"
