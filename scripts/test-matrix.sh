#!/usr/bin/env bash
# The live test matrix: every supported Slurm release x backend, on this machine (root).
#
#   bash scripts/test-matrix.sh [RELEASE ...]      # default: 22.05 24.11 26.05
#
# Per release R:
#   1. the integration suite on R (SLURM_DL_TEST_SLURM=R): testbed, CLI backend contract,
#      filter, prioritizer, dlsubmit end to end, idle watcher, telemetry;
#   2. where pyslurm has a tag for R (22.05, 24.11): pyslurm built from the vendored source
#      (scripts/build-pyslurm.sh) and the backend contract suite with it, which must skip nothing.
#      On 24.11 that suite runs inside the release's Debian root (pyslurm loads 24.11's libslurm),
#      against a testbed started outside it.
# Prints one line per step and a summary; exit 1 if any step failed. Log: $MATRIX_LOG_DIR
# (default /tmp/slurm-dl-matrix), one file per step.
set -uo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$REPO"
RELEASES=("$@")
[ "${#RELEASES[@]}" -gt 0 ] || RELEASES=(22.05 24.11 26.05)
LOGS="${MATRIX_LOG_DIR:-/tmp/slurm-dl-matrix}"
mkdir -p "$LOGS"
PY="$REPO/.venv/bin/python"
[ -x "$PY" ] || { echo "test-matrix: error: no .venv; run bash scripts/setup.sh --accounting" >&2; exit 1; }
SUMMARY=()
FAILED=0

step() {  # step NAME LOG CMD...: run, record "NAME: pytest summary line" or the exit status
  local name="$1" log="$2"; shift 2
  local t0=$(date +%s)
  echo "test-matrix: $name ..."
  "$@" > "$log" 2>&1
  local rc=$?
  local last
  last="$(grep -E '(passed|failed|error|skipped|no tests ran)' "$log" | tail -n 1 | tr -d '=' | sed 's/^ *//')"
  [ -n "$last" ] || last="exit $rc"
  SUMMARY+=("$(printf '%-34s %s (%d s)' "$name" "$last" $(( $(date +%s) - t0 )))")
  if [ "$rc" -ne 0 ]; then FAILED=1; SUMMARY[-1]+="  FAILED, see $log"; fi
  return $rc
}

pyslurm_contract() {  # pyslurm_contract RELEASE: the contract suite with pyslurm must skip nothing
  local r="$1" dir="/tmp/matrix-pys-${r//./}" out
  out="$LOGS/pyslurm-$r.pytest"
  if [ "$r" = 22.05 ]; then
    PYTHONPATH="$REPO/.pyslurm/$r" "$PY" -m pytest tests/integration/test_backend_contract.py -q -rs \
      -p no:cacheprovider -k pyslurm > "$out" 2>&1
  else
    "$PY" -m slurm_dl.cli.main testbed up --slurm "$r" --dir "$dir" > "$out" 2>&1 || return 1
    "$dir/bin/in-slurm-root" env PYTHONPATH="$REPO/.pyslurm/$r" \
      LD_LIBRARY_PATH=/usr/lib/x86_64-linux-gnu/slurm-wlm SLURM_DL_TEST_SLURM="$r" \
      SLURM_DL_TEST_TESTBED="$dir" "$PY" -m pytest tests/integration/test_backend_contract.py -q -rs \
      -p no:cacheprovider -k pyslurm >> "$out" 2>&1
    local rc=$?
    "$PY" -m slurm_dl.cli.main testbed down --dir "$dir" >> "$out" 2>&1
    [ "$rc" -eq 0 ] || { cat "$out"; return 1; }
  fi
  cat "$out"
  if grep -qE '[0-9]+ skipped' "$out"; then
    echo "test-matrix: the pyslurm contract suite skipped tests on Slurm $r"
    return 1
  fi
}

# PyTorch Lightning's own requeue (SLURMEnvironment(auto_requeue=True), --signal=SIGUSR1@90) in a
# venv of its own: torch (CPU) and lightning are ~1 GB and stay out of CI's dependencies.
LIGHTNING_VENV="${SLURM_DL_LIGHTNING_VENV:-/tmp/slurm-dl-lightning-venv}"
lightning_venv() {
  [ -x "$LIGHTNING_VENV/bin/python" ] && "$LIGHTNING_VENV/bin/python" -c 'import lightning' 2>/dev/null && return 0
  python3 -m venv "$LIGHTNING_VENV" && "$LIGHTNING_VENV/bin/pip" install -q 'torch==2.13.0' lightning
}

for r in "${RELEASES[@]}"; do
  step "Slurm $r integration (cli)" "$LOGS/integration-$r.log" \
    env SLURM_DL_TEST_SLURM="$r" "$PY" -m pytest tests/integration -q -p no:cacheprovider
  if lightning_venv > "$LOGS/lightning-venv.log" 2>&1; then
    step "Slurm $r Lightning preemption" "$LOGS/lightning-$r.log" \
      env SLURM_DL_TEST_SLURM="$r" SLURM_DL_LIGHTNING_PYTHON="$LIGHTNING_VENV/bin/python" \
      "$PY" -m pytest tests/integration/test_lightning_preemption.py -q -rs -p no:cacheprovider
  else
    SUMMARY+=("Lightning venv could not be made (see $LOGS/lightning-venv.log)  FAILED"); FAILED=1
  fi
  case "$r" in
    22.05|24.11)
      if step "Slurm $r pyslurm build" "$LOGS/pyslurm-build-$r.log" bash scripts/build-pyslurm.sh "$r"; then
        step "Slurm $r pyslurm contract" "$LOGS/pyslurm-$r.log" pyslurm_contract "$r"
      fi
      ;;
    *)
      step "Slurm $r pyslurm refused clearly" "$LOGS/pyslurm-$r.log" \
        env SLURM_DL_TEST_SLURM="$r" "$PY" -m pytest tests/integration/test_testbed_releases.py -q \
        -p no:cacheprovider -k pyslurm
      ;;
  esac
done

echo
echo "test-matrix summary (logs in $LOGS):"
printf '  %s\n' "${SUMMARY[@]}"
exit "$FAILED"
