#!/usr/bin/env bash
# Issue #51's item 5: the terminal app on a GPU machine, driven through tmux at 80x24 as a user would drive it
# over SSH, its screens captured as text (`tmux capture-pane -p`) into $R/app-*.txt:
#
#   R=/tmp/gs DATA=/tmp/cifar bash experiments/gpu_app_capture.sh        (phase `app` of gpu_session.sh)
#
#   app-runs.txt           the runs screen of an empty home
#   app-launch.txt         the launch dialog (`n`): the profiles, and the GPUs as NVML lists them
#   app-launch-filled.txt  the same with the short PGD-AT profile filtered, GPU 0 marked and the overrides typed
#   app-queued.txt         the runs screen just after ctrl+l
#   app-run-N.txt          the run's screen (enter) after its Nth epoch event: the per-class bars streaming
# The run trains APP_EPOCHS (3) epochs of cifar10-short-at on GPU 0, then its clean-only test evaluation.
# DRY=1 drives the same keys on a machine without a GPU: a fake `nvidia-smi` lists one GPU, the quickstart
# profile is chosen, and no GPU is marked, so the run trains on the CPU.
set -u
R=${R:-/tmp/gs}
DATA=${DATA:-/tmp/cifar}
EPOCHS=${APP_EPOCHS:-3}
cd "$(dirname "$0")/.."
home=$R/homes/app
mkdir -p "$home"
log() { echo "$(date +%T) app: $*" | tee -a "$R/driver.log"; }
if ! command -v tmux > /dev/null; then log "tmux is not on this machine: nothing captured"; exit 3; fi
if [ "${DRY:-0}" = 1 ]; then
    mkdir -p "$R/fakebin"
    printf '#!/bin/sh\necho "0, NVIDIA H200 (fake: DRY=1), 0, 143771, 0"\n' > "$R/fakebin/nvidia-smi"
    chmod +x "$R/fakebin/nvidia-smi"
    export PATH=$R/fakebin:$PATH
    profile=quickstart overrides=""
else
    profile=cifar10-short-at
    overrides="train.epochs=$EPOCHS data.root=$DATA eval.attacks=[\"clean\"] eval.checkpoints=[\"last\"]"
fi
session=fairtui-app-$$
cap() { tmux capture-pane -p -t "$session" > "$R/app-$1.txt"; log "captured $1"; }
keys() { tmux send-keys -t "$session" "$@"; sleep 1; }
# a tmux server already running keeps its own environment: hand the app this one's PATH and PYTHONPATH
tmux new-session -d -s "$session" -x 80 -y 24 \
    "env PATH='$PATH' PYTHONPATH='${PYTHONPATH:-}' python3 -m fairtui --home '$home' --profiles profiles; sleep 3600"
sleep 10
cap runs
keys n
sleep 3
cap launch
keys -l "$profile"
if [ "${DRY:-0}" = 1 ]; then
    keys Tab Tab Tab                  # past the profile list and the (fake) GPU list: a CPU run
else
    keys Tab Tab Space Tab            # past the profile list, mark GPU 0, on to the overrides
fi
[ -n "$overrides" ] && keys -l "$overrides"
cap launch-filled
keys C-l
sleep 5
cap queued
keys Enter
events() { find "$home/runs" -name events.jsonl -exec grep -c '"epoch_end"' {} + 2>/dev/null | tail -1; }
seen=0
for _ in $(seq 1 600); do
    n=$(events); n=${n:-0}; n=${n##*:}
    if [ "$n" -gt "$seen" ]; then sleep 2; seen=$n; cap "run-$n"; fi
    [ "$seen" -ge "$EPOCHS" ] && break
    if find "$home/runs" -name events.jsonl -exec grep -l '"run_failed"' {} + 2>/dev/null | grep -q .; then
        cap run-failed; break
    fi
    sleep 1
done
tmux kill-session -t "$session" 2>/dev/null
# the run outlives the app (its engine is its own process): stop it, so that it does not hold the machine
pkill -f -- "$home" || true
log "done: $seen epoch events"
