#!/usr/bin/env bash
# One lent GPU's work for issue #36, run detached (setsid) so that it outlives each device command.
#
#   R=/tmp/gs DATA=/tmp/cifar bash experiments/gpu_session.sh PHASE...
#
# Phases, in the order the session runs them:
#   bench    benchmarks/bench_gpu.py alone on the GPU (timings need it to themselves)
#   (first session) then:
#   parallel everything whose timings do not matter, at once: the paper profiles' 2-epoch smoke (three
#            groups, each profile with its own settings: since the first session, the CUDA defaults), DDP
#            with two ranks on the one GPU (NCCL), the CPU-scale PGD-AT run of seed 0 on the GPU,
#            and the defaults check (at.toml for a few epochs, fp32 eager against bf16 + compile, two seeds)
#   next     the next session's plan: `ratio` (bench_gpu's compiled ways, bf16, the GPU to itself), then
#            `table` (CIFAR-10 short-schedule rows at, trades, wat, cfa-trades, seed 0; TABLE_METHODS,
#            TABLE_SEEDS, TABLE_WORKERS change that) beside `smoke_rest` (frl, frl-rw, cfa-trades, tian-trades)
#   third    a session of 15 device minutes: `table` for PGD-AT alone beside `smoke_sub` (the six paper profiles
#            never run on CUDA, 2 epochs on a 5,000-image subset)
#   fourth   the next 15-minute session: `ratio`, then `table` for TRADES (TABLE_METHODS), the row after PGD-AT
#   pack     #51's first loan: benchmarks/bench_pack.py, 1, 2, 4 and 6 concurrent at.toml runs (and under MPS)
#   rows     every loan after it: two short-schedule rows at once under MPS (TABLE_METHODS, TABLE_SEEDS)
#   app      the app in tmux at 80x24 (experiments/gpu_app_capture.sh): launch dialog and run screen as text
#   loan     the next loan: `rows` and `app` side by side (`bash experiments/gpu_call.sh 570 loan`, then
#            `bash experiments/gpu_call.sh 240` to collect)
# Every phase writes under $R (tables, JSON, logs); run folders live in homes under $R/homes, whose small
# files (events.jsonl, profile.toml, meta.json, engine.log) are what comes back, never checkpoints.
# DRY=1 shrinks every phase to a seconds-long CPU check of this script (random data, tiny sizes).
set -u
R=${R:-/tmp/gs}
DATA=${DATA:-/tmp/cifar}
EPOCHS_DEFAULTS=${EPOCHS_DEFAULTS:-5}
mkdir -p "$R/homes"
cd "$(dirname "$0")/.."
export PYTHONUNBUFFERED=1
log() { echo "$(date +%T) $*" | tee -a "$R/driver.log"; }

if [ "${DRY:-0}" = 1 ]; then
    GPUS=cpu; BENCH=(--device cpu --tiny); SMOKE_SET=(--set data.train_per_class=20 --set data.val_fraction=0
        --set data.val_per_class=5 --set model.arch=\"small_cnn\" --set attack.steps=1 --set data.test_per_class=10)
    SMALL=(--set data.train_per_class=20 --set data.val_per_class=5 --set model.arch=\"small_cnn\"
           --set attack.steps=1 --set data.test_per_class=10 --set train.epochs=3)
    # the table's rows: DAFA's short profile warms up for 19 epochs and refuses a run with no DAFA epoch after it
    TABLE_SET=(--set train.epochs=21)
else
    GPUS=0; BENCH=(--data-root "$DATA"); SMOKE_SET=(); SMALL=(); TABLE_SET=()
fi

bench() {
    log "bench: at fp32 (eager ways), at bf16 (all four), cfa-at bf16 (compiled ways)"
    python3 benchmarks/bench_gpu.py "${BENCH[@]}" --profiles at --precisions fp32 --ways bare_eager,engine_eager \
        --json "$R/bench_at_fp32.json" > "$R/bench_at_fp32.txt" 2> "$R/bench_at_fp32.err"
    log "bench at fp32: exit $?"
    python3 benchmarks/bench_gpu.py "${BENCH[@]}" --profiles at --precisions bf16 \
        --json "$R/bench_at_bf16.json" > "$R/bench_at_bf16.txt" 2> "$R/bench_at_bf16.err"
    log "bench at bf16: exit $?"
    python3 benchmarks/bench_gpu.py "${BENCH[@]}" --profiles cfa-at --precisions bf16 \
        --ways bare_compiled,engine_compiled --json "$R/bench_cfa_bf16.json" > "$R/bench_cfa_bf16.txt" \
        2> "$R/bench_cfa_bf16.err"
    log "bench cfa-at bf16: exit $?"
}

smoke_group() {  # $1: group name, $2: profiles, then any extra --set pairs for its runs
    OMP_NUM_THREADS=2 python3 experiments/paper_profiles_smoke.py --data-root "$DATA" --epochs 2 --gpus "$GPUS" \
        --home "$R/homes/smoke-$1" --profiles "$2" --json "$R/smoke-$1.json" "${SMOKE_SET[@]}" "${@:3}" \
        > "$R/smoke-$1.txt" 2> "$R/smoke-$1.err"
    log "smoke $1: exit $?"
}

ddp() {  # two ranks on the one GPU: NCCL, the per-epoch rank check, one CIFAR-10 epoch
    local gpus=0,0
    [ "$GPUS" = cpu ] && gpus=cpu
    OMP_NUM_THREADS=2 python3 -m fairtui run profiles/at.toml --home "$R/homes/ddp" --name ddp-2ranks-1gpu --json \
        --gpus "$gpus" --set train.epochs=1 --set 'train.milestones=[]' --set "data.root=\"$DATA\"" \
        --set 'eval.attacks=["clean"]' --set 'eval.checkpoints=["last"]' "${SMALL[@]}" \
        > "$R/ddp.json" 2> "$R/ddp.err"
    log "ddp: exit $?"
}

cpu_scale() {  # the CPU-scale table's PGD-AT recipe, seed 0, on the GPU (beside its committed CPU run)
    OMP_NUM_THREADS=2 python3 -m fairtui run profiles/cifar10-cpu-at.toml --home "$R/homes/cpu-scale" --json \
        --name cifar10-cpu-at-s0-gpu --gpus "$GPUS" --set seed=0 --set "data.root=\"$DATA\"" "${SMALL[@]}" \
        > "$R/cpu_scale.json" 2> "$R/cpu_scale.err"
    log "cpu-scale at s0: exit $?"
}

defaults_run() {  # $1: fp32|bf16, $2: seed
    local fast=(--set train.compile=\"off\" --set train.amp=\"none\" --set train.channels_last=false)
    [ "$1" = bf16 ] && fast=(--set train.compile=\"on\" --set train.amp=\"bf16\" --set train.channels_last=true)
    OMP_NUM_THREADS=2 python3 -m fairtui run profiles/at.toml --home "$R/homes/defaults" --json \
        --name "defaults-$1-s$2" --gpus "$GPUS" --set "seed=$2" --set "train.epochs=$EPOCHS_DEFAULTS" \
        --set 'train.milestones=[]' --set "data.root=\"$DATA\"" --set 'eval.attacks=["clean","pgd20"]' \
        --set 'eval.checkpoints=["last"]' "${fast[@]}" "${SMALL[@]}" \
        > "$R/defaults-$1-s$2.json" 2> "$R/defaults-$1-s$2.err"
    log "defaults $1 s$2: exit $?"
}

parallel() {
    log "parallel: smoke (3 groups), ddp, cpu-scale, defaults (4 runs)"
    smoke_group a at,trades,frl,frl-rw &
    smoke_group b frl-rm,cfa-at,cfa-trades &
    smoke_group c cfa-fat,wat,tian-trades &
    ddp &
    cpu_scale &
    for prec in fp32 bf16; do for seed in 0 1; do defaults_run $prec $seed & done; done
    wait
    log "parallel: done"
}

ratio() {  # the engine against a bare loop compiled the engine's way: the 5% target (bf16, both profiles)
    python3 benchmarks/bench_gpu.py "${BENCH[@]}" --profiles at,cfa-at --precisions bf16 \
        --ways bare_compiled,engine_compiled --json "$R/bench_ratio.json" > "$R/bench_ratio.txt" 2> "$R/bench_ratio.err"
    log "bench ratio: exit $?"
}

smoke_rest() {  # the paper profiles the first session did not reach
    smoke_group d "${SMOKE_REST:-frl,frl-rw,cfa-trades,tian-trades}"
}

table() {  # rows of the CIFAR-10 short-schedule table in the issue's order, side by side; small files to $R/table
    # shellcheck disable=SC2086
    python3 experiments/cifar10_fairness.py --scale short --data-root "$DATA" --home "$R/homes/table" \
        --results "$R/table" --methods ${TABLE_METHODS:-at trades wat cfa-trades} --seeds ${TABLE_SEEDS:-0} \
        --workers "${TABLE_WORKERS:-4}" --threads 2 --gpus "$GPUS" "${SMALL[@]}" "${TABLE_SET[@]}" \
        > "$R/table.txt" 2> "$R/table.err"
    log "table: exit $?"
}

smoke_sub() {  # the paper profiles never run on CUDA, 2 epochs on a 5,000-image training subset (500 a class,
    # validation 50 a class, clean final evaluation): their code paths on CUDA at little GPU time, beside `table`
    local sub=(--set data.train_per_class=500 --set data.val_fraction=0 --set data.val_per_class=50
               --set 'eval.attacks=["clean"]')
    [ "${DRY:-0}" = 1 ] && sub=()
    smoke_group e "${SMOKE_SUB_A:-frl,cfa-trades,bat}" "${sub[@]}" &
    smoke_group f "${SMOKE_SUB_B:-frl-rw,tian-trades,csr}" "${sub[@]}" &
    wait
}

third() {  # a 15-minute session's plan: the table's first row (PGD-AT, 30 epochs, the GPU nearly to itself) beside
    # the subset smoke runs, whose GPU work is small (their time is mostly compilation on the CPU)
    TABLE_METHODS=${TABLE_METHODS:-at} TABLE_WORKERS=${TABLE_WORKERS:-1} table &
    smoke_sub &
    wait
}

fourth() {  # the next 15-minute session's plan: the ratio with the GPU to itself (about 4 minutes), then the
    # table's next row (TRADES, about 8) detached; a second device command collects it
    ratio
    TABLE_METHODS=${TABLE_METHODS:-trades} TABLE_WORKERS=1 table
}

pack() {  # issue #51's first loan: aggregate throughput of 1, 2, 4, 6 concurrent at.toml runs (the engine's
    # CUDA defaults), then under MPS where the machine has it; counts that would pass PACK_DEADLINE_S are skipped.
    # PACK_RUNS= (set and empty) measures no count without MPS, PACK_MPS= none with it
    python3 benchmarks/bench_pack.py "${BENCH[@]}" --runs "${PACK_RUNS-1,2,4,6}" --mps-runs "${PACK_MPS-4,6,2}" \
        --deadline-s "${PACK_DEADLINE_S:-480}" --json "$R/pack.json" > "$R/pack.txt" 2> "$R/pack.err"
    log "pack: exit $?"
}

rows() {  # the table phase as the packing measurement decided (docs/gpus.md, 2026-11-27 on an H200): TABLE_WORKERS
    # (default 2) rows at once under CUDA MPS where the machine has it, which took 1.43x one run's throughput;
    # two 30-epoch short-schedule rows should then take about 11 minutes (projected from the measured epochs),
    # inside a 15-minute loan. Started with
    # `bash experiments/gpu_call.sh 570 rows`, collected with a second `bash experiments/gpu_call.sh 240`.
    local mps=0
    if [ "$GPUS" != cpu ] && command -v nvidia-cuda-mps-control > /dev/null; then
        nvidia-cuda-mps-control -d && mps=1
    fi
    log "rows: MPS $([ $mps = 1 ] && echo on || echo off), methods ${TABLE_METHODS:-trades dafa}, seeds ${TABLE_SEEDS:-0}"
    TABLE_METHODS=${TABLE_METHODS:-trades dafa} TABLE_WORKERS=${TABLE_WORKERS:-2} table
    if [ $mps = 1 ]; then echo quit | nvidia-cuda-mps-control; fi
}

app() {  # #51's item 5: the app in tmux at 80x24, its launch dialog and a run's screen captured as text
    bash experiments/gpu_app_capture.sh
    log "app: exit $?"
}

loan() {  # the next loan's plan: two rows under MPS, with the app's captures beside them (a 3-epoch run)
    # the app's run starts after rows has started the MPS daemon, so that it joins MPS as a client too
    rows & sleep 5; app & wait
}

next() {  # the second session's plan: the ratio alone, then the table rows beside the remaining smoke runs
    ratio
    table & smoke_rest & wait
}

for phase in "$@"; do
    log "phase $phase"
    "$phase"
done
log "all phases done"
touch "$R/DONE"
