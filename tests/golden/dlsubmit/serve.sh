#!/bin/bash
# Rendered by dlsubmit (serve). Re-render with dlsubmit rather than editing by hand.
#SBATCH --job-name=api
#SBATCH --output=api-%j.out
#SBATCH --open-mode=append
#SBATCH --requeue
#SBATCH --time=1440
#SBATCH --nodes=1
#SBATCH --ntasks-per-node=1
#SBATCH --gpus-per-node=1
#SBATCH --partition=gpu
#SBATCH --comment=dl:class=serve;ckpt=0
#
# Checkpoint convention: write a checkpoint as "$CKPT_DIR/NAME.tmp" (or .partial), then rename it
# to "$CKPT_DIR/NAME". RESUME_FROM is the newest complete one whose name matches dl_ckpt_globs
# (below), empty on the first run.
set -u
export PYTHONUNBUFFERED=1
DL_KIND=serve
DL_MAX_RESTARTS=5
DL_GRACE_S=10
DL_TIME_LIMIT_S=86400
DL_RESTART=${SLURM_RESTART_COUNT:-0}
DL_STARTED_AT=$(date +%s)
export DL_RESTART
CKPT_DIR=checkpoints/api
case "$CKPT_DIR" in /*) ;; *) CKPT_DIR="${SLURM_SUBMIT_DIR:-$PWD}/$CKPT_DIR" ;; esac
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
dl_ckpt_globs=( )
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

# A free port, chosen at start (again after each restart), published as "host port" in the
# endpoint file for clients; the file is removed when the server stops.
PORT=$(python3 -c 'import socket; s = socket.socket(); s.bind(("", 0)); print(s.getsockname()[1])') || {
    dl_log "event=error cannot pick a free port"; exit 2; }
export PORT
DL_ENDPOINT=api.endpoint
case "$DL_ENDPOINT" in /*) ;; *) DL_ENDPOINT="${SLURM_SUBMIT_DIR:-$PWD}/$DL_ENDPOINT" ;; esac
export DL_ENDPOINT
SERVE_HOST=$(hostname)
export SERVE_HOST
printf '%s %s\n' "$SERVE_HOST" "$PORT" > "$DL_ENDPOINT.tmp" && mv -f -- "$DL_ENDPOINT.tmp" "$DL_ENDPOINT"
dl_log "event=serving host=$SERVE_HOST port=$PORT endpoint=$DL_ENDPOINT"
trap 'rm -f -- "$DL_ENDPOINT"' EXIT
# Not preemptible: no preemption signal is requested; TERM (cancel, node failure) stops the server.
dl_child=""
dl_stop=""
trap '[ -n "$dl_child" ] && kill -TERM "$dl_child" 2>/dev/null' TERM
dl_wait_child() {
    local rc
    while :; do
        wait "$dl_child"
        rc=$?
        if [ "$rc" -gt 128 ] && kill -0 "$dl_child" 2>/dev/null; then continue; fi
        return "$rc"
    done
}
dl_finish() { dl_log "event=exit rc=$1"; exit "$1"; }

dl_cmd=( python3 -m http.server "${PORT}" )
"${dl_cmd[@]}" &
dl_child=$!
dl_wait_child
dl_finish $?
