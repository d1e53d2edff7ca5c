#!/usr/bin/env bash
# Run every test (unit + integration on a real local Slurm) after making sure the machine is set
# up. Extra arguments go to pytest:  bash scripts/test.sh -x -k testbed
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$REPO"

# --accounting: MariaDB + slurmdbd, so that the tests of the accounting testbed and of the
# what-if calibration (sacct history replayed) run here too instead of being skipped
bash scripts/setup.sh --accounting
. .venv/bin/activate

# the formatter and the linter first (seconds): a tree they reject fails before the slow part
ruff format --check --quiet . || { echo "test: ruff format would change the files above; run: ruff format ." >&2; exit 1; }
ruff check --quiet . || { echo "test: ruff check found the problems above" >&2; exit 1; }

set +e
python -m pytest "$@"   # no paths given: pyproject testpaths = tests/
rc=$?
set -e
if [ "$rc" -eq 5 ]; then
  echo "test: error: pytest collected no tests (exit 5); that is a failure, not a pass" >&2
  exit 1
fi
exit "$rc"
