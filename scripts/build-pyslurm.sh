#!/usr/bin/env bash
# Build pyslurm for one Slurm release from its vendored source tag into .pyslurm/RELEASE/.
# pyslurm X.Y builds and runs against Slurm X.Y only, so each release gets its own directory;
# put it on PYTHONPATH to use it (scripts/test-matrix.sh does).
#
#   bash scripts/build-pyslurm.sh 22.05     # against this machine's libslurm-dev (Debian 12)
#   bash scripts/build-pyslurm.sh 24.11     # against the testbed's Debian trixie root
#
# Sources: $PYSLURM_VENDOR (default ../shared/vendor): pyslurm-22.5.3.tar.gz, pyslurm-24.11.0.tar.gz.
# Skips the build when .pyslurm/RELEASE already holds that version.
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$REPO"
RELEASE="${1:-}"
VENDOR="${PYSLURM_VENDOR:-$REPO/../shared/vendor}"
PY="$REPO/.venv/bin/python"
say() { echo "build-pyslurm: $*"; }
die() { echo "build-pyslurm: error: $*" >&2; exit 1; }

case "$RELEASE" in
  22.05)
    TARBALL=pyslurm-22.5.3.tar.gz; VERSION=22.5.3; CYTHON='Cython<3'
    INC=/usr/include; LIB=/usr/lib/x86_64-linux-gnu
    [ -f "$INC/slurm/slurm.h" ] && [ -e "$LIB/libslurm.so" ] \
      || die "Slurm 22.05's headers are missing: apt-get install libslurm-dev"
    ;;
  24.11)
    TARBALL=pyslurm-24.11.0.tar.gz; VERSION=24.11.0; CYTHON='Cython>=0.29.37'
    ROOT="$("$PY" -c 'from slurm_dl.testbed import roots; from slurm_dl.testbed.releases import release_for
print(roots.ensure_root(release_for("24.11")))')"
    INC="$ROOT/usr/include"; LIB="$ROOT/usr/lib/x86_64-linux-gnu/slurm-wlm"
    [ -e "$LIB/libslurmfull.so" ] || die "no libslurmfull.so in the Slurm 24.11 root ($LIB)"
    ;;
  "") die "usage: build-pyslurm.sh 22.05|24.11" ;;
  *) die "no pyslurm release exists for Slurm $RELEASE here (pyslurm tags built: 22.05, 24.11); use the cli backend" ;;
esac

TARGET="$REPO/.pyslurm/$RELEASE"
if [ -f "$TARGET/pyslurm-$VERSION.dist-info/METADATA" ]; then
  say "pyslurm $VERSION for Slurm $RELEASE already in $TARGET"
  exit 0
fi
[ -f "$VENDOR/$TARBALL" ] || die "$VENDOR/$TARBALL not found (set PYSLURM_VENDOR to the directory holding it)"

WORK="$(mktemp -d /tmp/pyslurm-build.XXXXXX)"
trap 'rm -rf "$WORK"' EXIT
tar -xzf "$VENDOR/$TARBALL" -C "$WORK"
SRC="$(find "$WORK" -mindepth 1 -maxdepth 1 -type d | head -n 1)"
if [ "$RELEASE" = 24.11 ]; then
  # The v24.11.0 tag has an f-string typo that no Cython compiles: f"PYSLURM_JOBDESC_{spec)}".
  sed -i 's/PYSLURM_JOBDESC_{spec)}/PYSLURM_JOBDESC_{spec}/' "$SRC/pyslurm/core/job/submission.pyx"
fi
# Cython is pinned through a constraint (22.5.x does not build with Cython 3).
echo "$CYTHON" > "$WORK/constraints.txt"
say "building pyslurm $VERSION against Slurm $RELEASE ($INC, $LIB); takes a few minutes"
rm -rf "$TARGET.tmp"
t0=$(date +%s)
PIP_CONSTRAINT="$WORK/constraints.txt" SLURM_INCLUDE_DIR="$INC" SLURM_LIB_DIR="$LIB" \
  "$PY" -m pip install -q --no-deps --target "$TARGET.tmp" "$SRC"
rm -rf "$TARGET"
mv "$TARGET.tmp" "$TARGET"
say "pyslurm $VERSION for Slurm $RELEASE in $TARGET ($(( $(date +%s) - t0 )) s)"
