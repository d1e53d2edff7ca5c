"""Power saving on the testbed: Slurm's own power_save, with programs that "power" a node off and
on by stopping and starting that node's slurmd (every slurmd runs on 127.0.0.1).

Pure rendering: the slurm.conf lines and the two scripts slurmctld runs (as SlurmUser, root on
the testbed, with only ``SLURM_CONF`` in its environment: every path is written out in full).
A powered-off node leaves a marker file ``DIR/run/slurmd-NODE.off`` so that ``testbed status``
and ``up`` know its slurmd is stopped on purpose, not dead.
"""

from __future__ import annotations

import shlex
from pathlib import Path

# Short times, so that the whole loop runs in a test: a node idle 60 s is powered down; a "boot"
# (starting slurmd) takes well under a second, and Slurm waits up to ResumeTimeout for it.
SUSPEND_TIME_S = 60
SUSPEND_TIMEOUT_S = 10
RESUME_TIMEOUT_S = 60


def suspend_program(root: Path) -> Path:
    return root / "etc" / "power-suspend.sh"


def resume_program(root: Path) -> Path:
    return root / "etc" / "power-resume.sh"


def off_marker(root: Path, node: str) -> Path:
    """Present while slurmctld holds ``node`` powered down (its slurmd stopped by the program)."""
    return root / "run" / f"slurmd-{node}.off"


def render_conf_lines(root: Path) -> list[str]:
    """slurm.conf lines that turn power saving on (SuspendExcNodes stays empty: slurm-dl's power
    service, or the admin, decides which nodes stay powered)."""
    return [
        f"SuspendProgram={suspend_program(root)}",
        f"ResumeProgram={resume_program(root)}",
        f"SuspendTime={SUSPEND_TIME_S}",
        f"SuspendTimeout={SUSPEND_TIMEOUT_S}",
        f"ResumeTimeout={RESUME_TIMEOUT_S}",
        "SuspendRate=0",
        "ResumeRate=0",
    ]


def _header(root: Path, what: str, scontrol: str) -> str:
    q = shlex.quote
    return (
        "#!/bin/bash\n"
        f"# Written by slurm-dl testbed: {what}\n"
        "# slurmctld runs it with the nodes as a hostlist (gpu[01-02]) in $1.\n"
        "set -u\n"
        f"export SLURM_DL_TESTBED={q(str(root))}\n"
        f"export SLURM_CONF={q(str(root / 'etc' / 'slurm.conf'))}\n"
        f"RUN={q(str(root / 'run'))}\n"
        f"LOG={q(str(root / 'log'))}\n"
        f'nodes=$({scontrol} show hostnames "$1") || exit 1\n'
    )


def render_suspend(root: Path, scontrol: str) -> str:
    """Stop each node's slurmd (only processes of this testbed) and mark the node off."""
    return _header(root, "powers nodes down by stopping their slurmd.", scontrol) + (
        "ours() {\n"
        '    tr "\\0" "\\n" < "/proc/$1/environ" 2>/dev/null \\\n'
        '        | grep -qxF "SLURM_DL_TESTBED=$SLURM_DL_TESTBED"\n'
        "}\n"
        "for node in $nodes; do\n"
        '    touch "$RUN/slurmd-$node.off"\n'
        "    # slurmd's own pid file, and the pid the testbed recorded (slurmd or its wrapper).\n"
        '    for f in "$RUN/slurmd-$node.slurm-pid" "$RUN/slurmd-$node.pid"; do\n'
        '        pid=$(cat "$f" 2>/dev/null)\n'
        '        if [ -n "$pid" ] && ours "$pid"; then\n'
        '            kill -TERM "$pid"\n'
        '            for _ in $(seq 50); do [ -d "/proc/$pid" ] || break; sleep 0.1; done\n'
        '            [ -d "/proc/$pid" ] && kill -KILL "$pid"\n'
        "        fi\n"
        "    done\n"
        '    rm -f "$RUN/slurmd-$node.pid"\n'
        '    echo "$(date -u +%FT%TZ) suspend $node" >> "$LOG/power.log"\n'
        "done\n"
    )


def render_resume(root: Path, scontrol: str, slurmd_argv: tuple[str, ...]) -> str:
    """Start each node's slurmd again, in its own session, and record its pid. Slurm takes a
    node as booted only when slurmd reports a boot time after the resume request: slurmd runs in
    a time namespace whose boot clock starts at zero (``unshare --time --boottime``), and the
    "boot" waits 2 s first (the kernel rounds uptime up to whole seconds). slurmctld runs the
    program with its own signals blocked, which slurmd would inherit (and then ignore SIGTERM):
    perl (perl-base, in every Debian root) clears the mask and sets SIGINT back to default
    before slurmd starts."""
    slurmd = " ".join(shlex.quote(a) for a in slurmd_argv)
    conf = shlex.quote(str(root / "etc" / "slurm.conf"))
    return _header(root, "powers nodes up by starting their slurmd.", scontrol) + (
        "sleep 2\n"
        "for node in $nodes; do\n"
        "    up=$(cut -d. -f1 /proc/uptime)\n"
        '    setsid unshare --time --fork --boottime="-$up" perl -MPOSIX -e \\\n'
        '        \'$SIG{INT} = "DEFAULT"; sigprocmask(SIG_SETMASK, POSIX::SigSet->new); '
        "exec @ARGV or die' \\\n"
        f'        {slurmd} -D -N "$node" -f {conf} </dev/null \\\n'
        '        >> "$LOG/slurmd-$node.stdout.log" 2>&1 &\n'
        '    echo $! > "$RUN/slurmd-$node.pid"\n'
        '    rm -f "$RUN/slurmd-$node.off"\n'
        '    echo "$(date -u +%FT%TZ) resume $node" >> "$LOG/power.log"\n'
        "done\n"
    )
