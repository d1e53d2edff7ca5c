#!/usr/bin/env bash
# Set up a Debian 12 machine for slurm-dl: the Slurm 22.05 packages, Lua 5.1 for the submit
# filter, and a .venv with slurm-dl installed in editable mode with its dev extras.
# Idempotent and fast when everything is already there (apt is skipped).
#
#   bash scripts/setup.sh [--accounting]     # --accounting adds MariaDB + slurmdbd
#
# Runs as root, or through sudo when not root.
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$REPO"

ACCOUNTING=0
for arg in "$@"; do
  case "$arg" in
    --accounting) ACCOUNTING=1 ;;
    -h|--help) sed -n '2,9p' "$0"; exit 0 ;;
    *) echo "setup.sh: unknown option '$arg' (known: --accounting)" >&2; exit 2 ;;
  esac
done

say() { echo "setup: $*"; }

if [ "$(id -u)" -eq 0 ]; then
  SUDO=()
elif command -v sudo >/dev/null 2>&1; then
  SUDO=(sudo)
else
  echo "setup: error: installing Debian packages needs root; run as root or install sudo" >&2
  exit 1
fi

# Slurm itself (NOT slurm-wlm-emulator), Lua 5.1 + socket + cjson for job_submit.lua, Python venv,
# debootstrap for the Debian roots that hold other Slurm releases (testbed up --slurm 24.11),
# PostgreSQL for the store's tests against a live server (started per test run by the fixture in
# a temporary directory; the Debian package's own cluster is not used). Chromium (headless) for the
# test that opens simulate's HTML report in a real browser. MUNGE for the testbed's own munged, which
# tells the prioritizer's explain endpoint who asks (Slurm itself runs without it there).
PACKAGES=(slurm-wlm slurmctld slurmd slurm-client lua5.1 lua-socket lua-cjson python3 python3-venv python3-pip debootstrap
          postgresql chromium munge)
if [ "$ACCOUNTING" -eq 1 ]; then
  PACKAGES+=(mariadb-server slurmdbd slurm-wlm-mysql-plugin)
fi

missing=()
for pkg in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$pkg")
  fi
done

if [ "${#missing[@]}" -gt 0 ]; then
  if ! command -v apt-get >/dev/null 2>&1; then
    echo "setup: error: apt-get not found; this script targets Debian 12. Install: ${missing[*]}" >&2
    exit 1
  fi
  say "installing ${missing[*]}"
  "${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 update -q
  "${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y -q "${missing[@]}"
else
  say "Debian packages already installed (${#PACKAGES[@]} checked)"
fi

# slurm-wlm-emulator takes over the slurmctld/slurmd alternatives; its front-end mode cannot work
# on Debian 12. Point them back at the real daemons.
for daemon in slurmctld slurmd slurmstepd; do
  target="$(readlink -f "/usr/sbin/$daemon" 2>/dev/null || true)"
  if [[ "$target" == *emulator* ]] && [ -x "/usr/sbin/$daemon-wlm" ]; then
    say "switching the $daemon alternative from the emulator back to /usr/sbin/$daemon-wlm"
    "${SUDO[@]}" update-alternatives --set "$daemon" "/usr/sbin/$daemon-wlm"
  fi
done

# The Python package, in .venv, editable, with dev and postgres extras. Re-installed only when pyproject changes.
VENV="$REPO/.venv"
STAMP="$VENV/.slurm-dl-setup"
want="$(sha256sum pyproject.toml | cut -d' ' -f1)"
if [ ! -x "$VENV/bin/python" ]; then
  say "creating $VENV"
  python3 -m venv "$VENV"
fi
if [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$want" ] && "$VENV/bin/python" -c "import slurm_dl" 2>/dev/null; then
  say "Python package already installed in .venv"
else
  say "installing slurm-dl with dev and postgres extras into .venv"
  "$VENV/bin/python" -m pip install -q -e '.[dev,postgres]'
  echo "$want" > "$STAMP"
fi

say "ready: . .venv/bin/activate; slurm-dl --help"
