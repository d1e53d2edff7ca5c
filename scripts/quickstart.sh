#!/usr/bin/env bash
# The slurm-dl quick start: set up, bring up a local 4-node x 8-GPU Slurm test cluster, submit a
# few GPU jobs with sbatch and show where Slurm placed them. Leaves the cluster up and prints how
# to use it and take it down.
#
#   bash scripts/quickstart.sh            # state in ./.testbed (override: SLURM_DL_TESTBED_DIR)
#
# Structure: each step is a function; STEPS lists them in order, so later steps (the submit filter,
# the prioritizer, dlsubmit) are added as one function + one entry.
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$REPO"
TESTBED_DIR="$(realpath -m "${SLURM_DL_TESTBED_DIR:-$REPO/.testbed}")"  # absolute: DIR/site.toml names its socket
OUT_DIR="$TESTBED_DIR/quickstart"
JOB_IDS=()

banner() { printf '\n==> %s\n' "$*"; }

step_setup() {
  banner "setup (Debian packages, .venv)"
  bash scripts/setup.sh
  # shellcheck disable=SC1091
  . .venv/bin/activate
}

step_testbed_up() {
  banner "testbed up in $TESTBED_DIR (4 nodes x 8 fake h100 GPUs, two leaf switches)"
  # DIR/site.toml: site-configs/testbed.toml with its database in DIR; `testbed env` exports
  # SLURM_DL_CONFIG for it, so every slurm-dl command below finds it without --config or --db.
  slurm-dl testbed up --dir "$TESTBED_DIR" --site-config site-configs/testbed.toml
  eval "$(slurm-dl testbed env --dir "$TESTBED_DIR")"
  # slurmctld keeps its jobs across `testbed down`/`up`: a second quick start begins without the
  # first one's jobs, so what it shows is its own.
  local old
  old="$(squeue -h -o %i | tr '\n' ' ')"
  if [ -n "${old// /}" ]; then
    echo "  cancelling the jobs left from an earlier run: $old"
    # shellcheck disable=SC2086
    scancel $old
    for _ in $(seq 1 50); do [ -z "$(squeue -h -o %i)" ] && break; sleep 0.2; done
  fi
  rm -rf "$OUT_DIR"  # and without its job output and its dlsubmit records for this cluster
  rm -rf "$(python3 -c 'from slurm_dl.dlsubmit.status import state_dir; print(state_dir())')"
  sinfo -N -o "%.8N %.6T %.14G %.5c %.8m"
}

submit() {  # submit NAME SBATCH-ARGS... -- reads the script from stdin; records the job id
  local name="$1"; shift
  local id
  id="$(sbatch --parsable --job-name="$name" --output="$OUT_DIR/%x-%j.out" --time=10 "$@")"
  JOB_IDS+=("$id")
  printf '  submitted %-12s job %s  (sbatch %s)\n' "$name" "$id" "$*"
}

step_submit_gpu_jobs() {
  banner "submit GPU jobs with sbatch"
  mkdir -p "$OUT_DIR"
  local body='#!/bin/bash
echo "job $SLURM_JOB_ID on $SLURM_JOB_NODELIST: CUDA_VISIBLE_DEVICES=$CUDA_VISIBLE_DEVICES"
srun bash -c '\''echo "  step on $SLURMD_NODENAME sees GPUs $CUDA_VISIBLE_DEVICES"'\''
sleep 45'
  submit train-3gpu --gpus=3 <<<"$body"
  submit ddp-2x8 -N2 --ntasks-per-node=1 --gpus-per-node=8 <<<"$body"
  submit infer-2gpu --gres=gpu:h100:2 <<<"$body"
  submit sweep-4gpu --gpus=4 <<<"$body"
  submit big-8gpu --gpus-per-node=8 <<<"$body"   # 3+16+2+4+8 = 33 > 32 GPUs: someone waits
}

step_show_placement() {
  banner "placement (squeue: nodes and GRES per job)"
  local ids; ids="$(IFS=,; echo "${JOB_IDS[*]}")"
  # Give the scheduler a pass (sched_interval=2) so everything that fits is placed.
  for _ in $(seq 1 50); do
    if ! squeue -h -j "$ids" -t PD -o "%r" | grep -qv -e Resources -e Priority; then break; fi
    sleep 0.2
  done
  sleep 1
  squeue -j "$ids" -O "JobID:6,Name:12,State:9,NumNodes:6,tres-per-job:14,tres-per-node:17,NodeList:12,Reason:12"
  banner "GPU indices per node (scontrol -d show job)"
  for id in "${JOB_IDS[@]}"; do
    scontrol -d show job "$id" | awk -v id="$id" '
      /JobState=/ { for (i = 1; i <= NF; i++) if ($i ~ /^JobState=/) st = $i }
      /^ +Nodes=.*GRES=/ { printf "  job %s %s %s %s\n", id, st, $1, $NF; shown = 1 }
      END { if (!shown) printf "  job %s %s (not placed yet)\n", id, st }'
  done
  banner "what a running job sees"
  sleep 1
  for f in "$OUT_DIR"/*.out; do [ -s "$f" ] && sed 's/^/  /' "$f"; done
  return 0
}

step_dlsubmit() {
  banner "dlsubmit: a checkpointing training job and a resumable inference job (output in $OUT_DIR/dlsubmit)"
  local work="$OUT_DIR/dlsubmit"
  mkdir -p "$work"
  cat >"$work/train.py" <<'PY'
import json, os, signal, time
stop = []
signal.signal(signal.SIGUSR2, lambda *a: stop.append(1))  # preemption: checkpoint and exit
ck = os.path.join(os.environ["CKPT_DIR"], "state.json")
state = json.load(open(os.environ["RESUME_FROM"])) if os.environ.get("RESUME_FROM") else {"step": 0, "w": 1.0}
while state["step"] < 20 and not stop:
    state = {"step": state["step"] + 1, "w": state["w"] * 0.9 + 0.1}
    json.dump(state, open(ck + ".tmp", "w")); os.replace(ck + ".tmp", ck)  # write, then rename
    time.sleep(0.5)
print("state", state)
PY
  printf 'item-%02d\n' $(seq 1 10) >"$work/items.txt"
  (
    cd "$work"
    dlsubmit train --gpus 2 --time 10 --name qs-train -- python3 train.py
    dlsubmit infer --gpus 1 --time 10 --name qs-infer --inputs items.txt -- python3 -c 'import sys; print("done", sys.argv[1])' {item}
    sleep 2
    dlsubmit status
  )
}

# The filter service and the prioritizer carry the testbed's marker in their environment, so
# `slurm-dl testbed down` stops them together with the cluster; `testbed up` on a half-dead
# cluster restarts Slurm and leaves them running; `testbed status` shows them.
start_marked() {  # start_marked NAME CMD... -- background process logging to $TESTBED_DIR/log/NAME.log
  local name="$1"; shift
  mkdir -p "$TESTBED_DIR/log"
  SLURM_DL_TESTBED="$(realpath "$TESTBED_DIR")" nohup "$@" >"$TESTBED_DIR/log/$name.log" 2>&1 &
  echo $! >"$TESTBED_DIR/$name.pid"
}

stop_marked() {  # stop a previous quick start's service before starting a new one
  local pid_file="$TESTBED_DIR/$1.pid"
  if [ -f "$pid_file" ] && kill "$(cat "$pid_file")" 2>/dev/null; then sleep 0.5; fi
  rm -f "$pid_file"
}

step_filter() {
  banner "submit filter: job_submit.lua shim + filter service ($SLURM_DL_CONFIG)"
  local sock="$TESTBED_DIR/filter.sock"
  mkdir -p "$OUT_DIR"
  stop_marked filter
  start_marked filter slurm-dl filter serve --socket "$sock"
  for _ in $(seq 1 50); do [ -S "$sock" ] && break; sleep 0.1; done
  slurm-dl filter install --slurm-conf-dir "$(dirname "$SLURM_CONF")" --socket "$sock"
  sleep 1  # slurmctld re-reads job_submit.lua when its mtime changes
  echo "  an unknown GPU type is refused by sbatch with the filter's message:"
  sbatch --gres=gpu:nosuchgpu:1 --time=5 --wrap true 2>&1 | sed 's/^/    /' || true
  echo "  --gpus=16 is reshaped to whole nodes and tagged (a tag forged in --comment is not taken):"
  local id
  id="$(sbatch --parsable --gpus=16 --time=5 --output="$OUT_DIR/%x-%j.out" --job-name=reshaped --comment='sdl1:class=serve;ckpt=0' --wrap 'sleep 20')"
  JOB_IDS+=("$id")
  scontrol -o show job "$id" | tr ' ' '\n' | grep -E '^(NumNodes|TresPerNode|TresPerJob|Comment|AdminComment|Requeue)=' | sed 's/^/    /'
}

step_prioritizer() {
  banner "prioritizer daemon (LAS + fair share + deadlines -> SiteFactor; preemption by USR2 + requeue)"
  stop_marked prioritizer
  slurm-dl db upgrade  # the ledger at this release's schema (a quick start's older ledger is migrated)
  start_marked prioritizer slurm-dl prioritizer run
  sleep 4
  echo "  daemon log ($TESTBED_DIR/log/prioritizer.log):"
  tail -n 5 "$TESTBED_DIR/log/prioritizer.log" | sed 's/^/    /'
}

step_explain() {
  banner "why jobs have their priority (slurm-dl explain)"
  local id out tries
  for id in $(squeue -h -o %i | head -n 3); do
    for tries in 1 2 3 4 5 6 7 8 9 10; do  # a busy machine's cycle may not have seen a new job yet
      out="$(slurm-dl explain "$id" 2>&1)" && break
      case "$out" in *"not seen it yet"*) sleep 2 ;; *) break ;; esac
    done
    printf '%s\n' "$out" | sed 's/^/  /' | head -n 12 || true
  done
}

step_as_a_user() {
  # What a researcher on a login node has: slurm-dl installed, the cluster's slurm.conf and site
  # config, no access to the prioritizer's database (0600, root's). `dlsubmit status` and
  # `slurm-dl explain` then ask the prioritizer's explain endpoint, proving who asks with MUNGE
  # (the testbed runs a munged of its own).
  local user=nobody
  banner "as an ordinary user ($user): a job, dlsubmit status and slurm-dl explain, through the endpoint"
  local pub venv
  pub="$(mktemp -d /tmp/slurm-dl-quickstart.XXXXXX)"
  chmod 755 "$pub"
  cp "$(dirname "$SLURM_CONF")"/*.conf "$SLURM_DL_CONFIG" "$pub/"
  chmod 644 "$pub"/*
  install -d -o "$user" "$pub/work"  # the user's own directory: job logs, checkpoints, dlsubmit's records
  venv="$REPO/.venv"
  if ! runuser -u "$user" -- "$venv/bin/slurm-dl" --version >/dev/null 2>&1; then
    venv="$TESTBED_DIR/user-venv"  # the checkout is not readable by other users: a copy they can run
    if ! runuser -u "$user" -- "$venv/bin/slurm-dl" --version >/dev/null 2>&1 || [ ! -f "$venv/.stamp" ] ||
       [ -n "$(find "$REPO/slurm_dl" "$REPO/prioritizer" "$REPO/jobsubmit" "$REPO/templates" -newer "$venv/.stamp" -print -quit)" ]; then
      echo "  installing slurm-dl for other users into $venv"
      rm -rf "$venv"
      /usr/bin/python3 -m venv "$venv"
      local had_build=0; [ -e "$REPO/build" ] && had_build=1
      "$venv/bin/pip" install -q "$REPO" >"$TESTBED_DIR/log/user-venv.log" 2>&1 ||
        { echo "  pip failed; see $TESTBED_DIR/log/user-venv.log" >&2; return 1; }
      [ "$had_build" = 1 ] || rm -rf "$REPO/build"  # pip's build output in the checkout, if it made it
      touch "$venv/.stamp"
      chmod -R a+rX "$venv"
    fi
  fi
  as_user() {
    (cd "$pub/work" && runuser -u "$user" -- env PATH="$venv/bin:/usr/bin:/bin" SLURM_CONF="$pub/slurm.conf" \
      SLURM_DL_CONFIG="$pub/$(basename "$SLURM_DL_CONFIG")" HOME="$pub/work" COLUMNS=80 "$@")
  }
  echo "  ls -l ledger.db: $(ls -l "$TESTBED_DIR/ledger.db" | cut -d' ' -f1,3) (users cannot read it)"
  local id
  id="$(as_user dlsubmit train --gpus 8 --time 10 --name user-job -- sleep 60 2>/dev/null | awk '/^submitted/ {print $4}')"
  echo "  $user submitted job $id: dlsubmit train --gpus 8 --time 10 --name user-job -- sleep 60"
  local out
  for _ in 1 2 3 4 5 6 7 8 9 10; do  # the prioritizer looks at the queue every few seconds
    out="$(as_user slurm-dl explain "$id" 2>&1)" && break
    case "$out" in *"not seen it yet"*) sleep 2 ;; *) break ;; esac
  done
  echo "  \$ dlsubmit status"
  as_user dlsubmit status 2>&1 | sed 's/^/    /'
  echo "  \$ slurm-dl explain $id"
  printf '%s\n' "$out" | sed 's/^/    /'
}

step_howto() {
  banner "the cluster stays up"
  cat <<MSG
  commands on PATH:      . .venv/bin/activate   (in each new shell, from $PWD)
  use it from a shell:   eval "\$(slurm-dl testbed env --dir $TESTBED_DIR)"
                         sinfo; squeue; sbatch --gpus=2 --wrap 'echo \$CUDA_VISIBLE_DEVICES'
  job output:            $OUT_DIR/
  dlsubmit jobs:         cd $OUT_DIR/dlsubmit && dlsubmit status
  logs:                  $TESTBED_DIR/log/ (filter.log, prioritizer.log, slurmctld.log …)
  why a job waits:       slurm-dl explain JOBID
  what the filter does:  slurm-dl filter check -- --gpus=16 -t 60
  (the site config:      \$SLURM_DL_CONFIG = $SLURM_DL_CONFIG, set by testbed env)
  status:                slurm-dl testbed status --dir $TESTBED_DIR
  take it down:          slurm-dl testbed down --dir $TESTBED_DIR   (also stops the filter and the prioritizer)
MSG
}

STEPS=(step_setup step_testbed_up step_filter step_prioritizer step_submit_gpu_jobs step_show_placement step_dlsubmit step_explain step_as_a_user step_howto)

for step in "${STEPS[@]}"; do
  "$step"
done
