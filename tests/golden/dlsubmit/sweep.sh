#!/bin/bash
# Rendered by dlsubmit (sweep). Re-render with dlsubmit rather than editing by hand.
#SBATCH --job-name=hpo
#SBATCH --output=hpo-%A_%a.out
#SBATCH --open-mode=append
#SBATCH --requeue
#SBATCH --signal=B:USR2@10
#SBATCH --time=240
#SBATCH --nodes=1
#SBATCH --ntasks-per-node=1
#SBATCH --gpus-per-node=1
#SBATCH --partition=gpu
#SBATCH --array=0-2%2
#SBATCH --comment=dl:class=sweep;ckpt=1
#
# Checkpoint convention: write a checkpoint as "$CKPT_DIR/NAME.tmp" (or .partial), then rename it
# to "$CKPT_DIR/NAME". RESUME_FROM is the newest complete one whose name matches dl_ckpt_globs
# (below), empty on the first run.
set -u
export PYTHONUNBUFFERED=1
DL_KIND=sweep
DL_MAX_RESTARTS=5
DL_GRACE_S=10
DL_TIME_LIMIT_S=14400
DL_RESTART=${SLURM_RESTART_COUNT:-0}
DL_STARTED_AT=$(date +%s)
export DL_RESTART
CKPT_DIR=checkpoints/hpo
case "$CKPT_DIR" in /*) ;; *) CKPT_DIR="${SLURM_SUBMIT_DIR:-$PWD}/$CKPT_DIR" ;; esac
CKPT_DIR="$CKPT_DIR/task-${SLURM_ARRAY_TASK_ID:-0}"
export CKPT_DIR
mkdir -p -- "$CKPT_DIR/.dlsubmit" || { echo "dlsubmit: cannot create checkpoint directory $CKPT_DIR" >&2; exit 2; }

dl_log() {
    printf '%s dlsubmit[%s]: %s\n' "$(date -u +%Y-%m-%dT%H:%M:%SZ)" "${SLURM_JOB_ID:-?}" "$*"
    printf '%s job=%s restart=%s %s\n' "$(date +%s)" "${SLURM_JOB_ID:-?}" "$DL_RESTART" "$*" >> "$CKPT_DIR/.dlsubmit/events"
}
# A line for the person reading the job's log (not kept in the events file).
dl_say() {
    printf '%s dlsubmit[%s]: %s\n' "$(date -u +%Y-%m-%dT%H:%M:%SZ)" "${SLURM_JOB_ID:-?}" "$*"
}

# What is a checkpoint: entries of CKPT_DIR whose name matches one of these (--ckpt-glob), never
# hidden ones or *.tmp / *.partial / *.incomplete (a save still being written).
dl_ckpt_globs=( '*.pt' '*.pth' '*.ckpt' '*.safetensors' '*.bin' '*.pkl' '*.pickle' '*.npz' '*.h5' '*.msgpack' 'checkpoint-*' 'checkpoint_*' 'ckpt-*' 'ckpt_*' 'step-*' 'step_*' 'epoch-*' 'epoch_*' 'global_step*' )
dl_is_checkpoint() {
    local g
    case "$1" in .*|*.tmp|*.partial|*.incomplete) return 1 ;; esac
    for g in "${dl_ckpt_globs[@]}"; do
        # shellcheck disable=SC2254
        case "$1" in $g) return 0 ;; esac
    done
    return 1
}
# The newest checkpoint (RESUME_FROM): a log or other file kept in CKPT_DIR never is one.
dl_newest_checkpoint() {
    local newest="" f
    for f in "$CKPT_DIR"/*; do
        [ -e "$f" ] || continue
        dl_is_checkpoint "${f##*/}" || continue
        if [ -z "$newest" ] || [ "$f" -nt "$newest" ]; then newest=$f; fi
    done
    printf '%s' "$newest"
}
dl_mtime() { stat -c %Y -- "$1" 2>/dev/null || echo 0; }

if [ "$DL_RESTART" -gt "$DL_MAX_RESTARTS" ]; then
    dl_log "event=restart-cap restarts=$DL_RESTART max=$DL_MAX_RESTARTS: not starting again"
    exit 3
fi
RESUME_FROM=$(dl_newest_checkpoint)
export RESUME_FROM
# A preemption whose save never finished (the requeue came first) left its marker behind,
# and no checkpoint newer than its signal.
DL_SAVING="$CKPT_DIR/.dlsubmit/saving-${SLURM_JOB_ID:-0}"
dl_signalled_at=0
[ -s "$DL_SAVING" ] && read -r dl_signalled_at < "$DL_SAVING"
case "$dl_signalled_at" in ''|*[!0-9]*) dl_signalled_at=0 ;; esac
dl_saved_at=0
[ -n "$RESUME_FROM" ] && dl_saved_at=$(dl_mtime "$RESUME_FROM")
if [ "$dl_signalled_at" -gt 0 ] && [ "$dl_saved_at" -lt "$dl_signalled_at" ]; then
    dl_log "event=lost-work signalled=$dl_signalled_at saved=$dl_saved_at: requeued before its checkpoint finished; the work since the checkpoint it resumes from was lost"
    dl_say "the last preemption requeued this job before its checkpoint finished: the work since its newest checkpoint was lost (give it a longer --grace, or save faster)"
fi
rm -f -- "$DL_SAVING"
if [ -n "$RESUME_FROM" ]; then
    dl_log "event=resume restart=$DL_RESTART from=$RESUME_FROM"
else
    dl_log "event=start restart=$DL_RESTART (no checkpoint yet)"
fi

# What a framework needs: rendezvous address and port (the first node), world size.
if [ "${SLURM_JOB_NUM_NODES:-1}" -gt 1 ]; then
    MASTER_ADDR=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)
else
    MASTER_ADDR=127.0.0.1
fi
export MASTER_ADDR
export MASTER_PORT=$(( 20000 + ${SLURM_JOB_ID:-0} % 20000 ))
export DL_NNODES=${SLURM_JOB_NUM_NODES:-1}
export DL_GPUS_PER_NODE=1
export WORLD_SIZE=1
# One parameter set per array task; at most 2 tasks run at once.
dl_params=(
    lr=0.1
    lr=0.01
    'lr=0.001 wd=0.1'
)
DL_PARAM=${dl_params[${SLURM_ARRAY_TASK_ID:-0}]}
export DL_PARAM
# This task's result: JSON in this file, or print "DLSUBMIT_RESULT {json}".
export DL_RESULT="$CKPT_DIR/.dlsubmit/result.json"
dl_log "event=task index=${SLURM_ARRAY_TASK_ID:-0} param=$DL_PARAM"
# Preemption: the prioritizer sends USR2 to this shell (scancel --batch --signal=USR2); once the
# program has saved and exited the script requeues itself at once (the prioritizer requeues it
# only if it still runs after its grace period). Slurm sends the same USR2 10 s before
# the time limit (--signal=B:USR2@10); the time left tells the two apart.
dl_child=""
dl_child_is_launcher=0
dl_stop=""
dl_signalled_at=0
dl_on_usr2() {
    local now
    now=$(date +%s)
    local left=$(( DL_TIME_LIMIT_S - (now - DL_STARTED_AT) ))
    if [ "$left" -le $(( DL_GRACE_S + 90 )) ]; then dl_stop=timeout; else dl_stop=preempt; fi
    dl_signalled_at=$now
    # removed once a new checkpoint is there; found at the next start, it means the save was cut
    [ "$dl_stop" = preempt ] && printf '%s\n' "$now" > "$DL_SAVING"
    dl_log "event=$dl_stop signal=USR2 time_left_s=$left: checkpoint now"
    if [ -n "$dl_child" ]; then
        if [ "$dl_child_is_launcher" = 1 ]; then
            pkill -USR2 -P "$dl_child" 2>/dev/null || kill -USR2 "$dl_child" 2>/dev/null
        else
            kill -USR2 "$dl_child" 2>/dev/null
        fi
    fi
}
trap dl_on_usr2 USR2

# Wait for the step; a trapped signal interrupts `wait`, so wait again while it still runs.
dl_wait_child() {
    local rc
    while :; do
        wait "$dl_child"
        rc=$?
        if [ "$rc" -gt 128 ] && kill -0 "$dl_child" 2>/dev/null; then continue; fi
        return "$rc"
    done
}

dl_requeue_self() {
    dl_log "event=requeue-self: $1"
    scontrol requeue "$SLURM_JOB_ID" || dl_log "event=requeue-failed"
    sleep 60 &
    wait $!
}

# After the signal: did the program write a checkpoint since? (its marker goes if it did)
dl_saved_since_signal() {
    local newest
    newest=$(dl_newest_checkpoint)
    [ -n "$newest" ] && [ "$(dl_mtime "$newest")" -ge "$dl_signalled_at" ] || return 1
    rm -f -- "$DL_SAVING"
    printf '%s' "$newest"
}

# How this run ends: finished, checkpointed for a preemption, or checkpointed at the time limit.
dl_finish() {
    local rc=$1
    case "$dl_stop" in
        preempt)
            local saved took=$(( $(date +%s) - dl_signalled_at ))
            if saved=$(dl_saved_since_signal); then
                dl_log "event=checkpointed rc=$rc took_s=$took file=$saved"
            else
                dl_log "event=no-checkpoint rc=$rc took_s=$took: the program wrote no new checkpoint after the signal"
            fi
            dl_say "preempted on purpose for a higher-priority job, not an error: the job requeues itself and resumes from its newest checkpoint (Slurm's CANCELLED/REQUEUE line below is expected)"
            dl_requeue_self "preempted: requeued at once to resume"
            exit 0
            ;;
        timeout)
            dl_log "event=timeout-checkpointed rc=$rc: time limit reached; submit again to resume from $CKPT_DIR"
            exit 124
            ;;
        *)
            dl_log "event=exit rc=$rc"
            exit "$rc"
            ;;
    esac
}

dl_cmd=( python3 train.py --hp="${DL_PARAM}" )
"${dl_cmd[@]}" &
dl_child=$!
dl_wait_child
dl_finish $?
