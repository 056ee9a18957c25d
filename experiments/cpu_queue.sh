#!/usr/bin/env bash
# The CPU experiments of issue #52, one run at a time with one thread (the other core stays free for tests), in
# the order that serves the issue. Every stage is idempotent: a finished run is reused, a stopped or lost one
# resumed, so a session that was cut off starts this again and loses only the run in flight.
#
#   nohup setsid bash experiments/cpu_queue.sh DATA_ROOT [WORKTREE] > cpu-queue.log 2>&1 < /dev/null &
#
# FAIRTUI_QUEUE_STAGES (default "1 2 3 4") picks the stages and their order: a second lane on the other core,
# when no tests need it, runs the later stages from its own worktree, so the two never train the same run:
#
#   FAIRTUI_QUEUE_STAGES="4 3" nohup setsid bash experiments/cpu_queue.sh DATA_ROOT ../exp2 > lane2.log 2>&1 &
#
# DATA_ROOT holds cifar-10-batches-py/ (python ../shared/data/cifar10_from_jpeg.py --out DATA_ROOT). WORKTREE
# (default ../exp) is a git worktree of this repository, detached at this checkout's HEAD when the queue starts,
# so that the code that trains does not change under a run while the checkout is edited; the small files of each
# finished run are copied into this checkout's experiments/results/, to be committed. A row's seed already collected
# there is not trained again, even from a new home, unless a fine-tune still to be collected starts from it.
set -euo pipefail
data=${1:?usage: cpu_queue.sh DATA_ROOT [WORKTREE]}
repo=$(cd "$(dirname "$0")/.." && pwd)
tree=${2:-$repo/../exp}
homes=${FAIRTUI_QUEUE_HOMES:-$repo/../exp-homes}
cifar_home=${FAIRTUI_QUEUE_CIFAR_HOME:-$repo/../exp-home}  # where the 2026-11-27 session's queue trained
for n in ${FAIRTUI_QUEUE_STAGES:-1 2 3 4}; do
  case $n in 1|2|3|4) ;; *) echo "cpu_queue: FAIRTUI_QUEUE_STAGES holds $n; the stages are 1 2 3 4" >&2; exit 2;; esac
done
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1
if [ ! -d "$tree" ]; then git -C "$repo" worktree add --detach "$tree" HEAD; fi
git -C "$tree" checkout -q --detach "$(git -C "$repo" rev-parse HEAD)"
cd "$tree"
results=$repo/experiments/results
table() { python experiments/cifar10_fairness.py --scale cpu --data-root "$data" --workers 1 --threads 1 "$@"; }


stage1() {
# 1. DAFA's row, all five seeds, on the authors' forward order (#54; the old seeds are in cifar10-cpu-superseded),
#    first: the table has no DAFA row until its seeds land, while every other row has three.
table --home "$cifar_home" --results "$results/cifar10-cpu" --seeds 0 1 2 3 4 --methods dafa || true
}
stage2() {
# 2. Seeds 3 and 4 of every row but DAFA (FAAL, FRL and CSR fine-tune the same seed's PGD-AT or TRADES run).
table --home "$cifar_home" --results "$results/cifar10-cpu" --seeds 3 4 \
  --methods at trades wat cfa-trades frl cfa-at tian faal bat csr || true
}
stage3() {
# 3. The tuned digits rows of CFA on AT and on TRADES, from spaces that hold train.lr (their studies without it are
#    in tune-digits-cfa-without-lr/, superseded).
python experiments/tune_all.py --methods cfa-at cfa-trades --home "$homes/tune" --results "$results/tune-digits" \
  --parallel 1 || true
}
stage4() {
# 4. The probe of CFA on TRADES's step size at CPU scale: the lr and weight decay that undo CCR's 1/(1 + beta_y)
#    (its mean over the committed runs' epochs is 6.5): lr 0.025 x 6.5, weight decay 5e-4 / 6.5. Not a row.
table --home "$homes/probe-cfa-trades" --results "$results/cifar10-cpu-probes/cfa-trades-lr-x6.5" --seeds 0 1 2 \
  --methods cfa-trades --set train.lr=0.1625 --set train.weight_decay=7.69e-5 || true
}
for n in ${FAIRTUI_QUEUE_STAGES:-1 2 3 4}; do "stage$n"; done
echo "cpu_queue: stages ${FAIRTUI_QUEUE_STAGES:-1 2 3 4} ran; see the log for any that stopped"
