"""``Testbed``: a real local Slurm (one slurmctld, N slurmd) under one state directory."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import stat
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

from ..core.errors import SlurmError, TestbedError
from . import accounting as acct
from . import process, services
from .client import node_states
from .conf import (
    DEFAULT_CPUS_PER_NODE,
    DEFAULT_MEMORY_MB_PER_NODE,
    PASS_THROUGH_JOB_SUBMIT_LUA,
    ClusterParams,
    TestbedLayout,
    render_env,
    render_gres_conf,
    render_slurm_conf,
    render_topology_conf,
)
from . import inroot, power, roots
from .install import find_slurm, require_root
from .releases import HOST_RELEASE, Release, release_for
from .shape import GpuGroup, as_groups, describe, is_mixed, name_digits, spec_of, total_nodes
from .site_shape import with_shape

READY_TIMEOUT_S = 30.0
READY_S_PER_NODE = 0.1  # and this much more per node: 256 slurmd register one by one


def munge_installed() -> bool:
    """munged and mungekey (Debian package munge): the testbed then runs a munged of its own."""
    return bool(shutil.which("munged") and shutil.which("mungekey"))


# slurmd puts Unix sockets (<node>_<jobid>.<stepid>) under spool/<node>/; Linux caps socket paths
# at 107 bytes, so the state directory itself must stay short.
MAX_STATE_DIR_LEN = 69  # root + "/spool/gpu01" + "/gpu01_<8-digit job>.<10-digit step>" <= 107


# sinfo states of a node whose slurmd answers (no "*" suffix, not down or drained).
_READY_STATES = frozenset({"idle", "mixed", "allocated", "completing"})


@dataclass(frozen=True)
class TestbedStatus:
    """Which daemons run (name -> pid or None) and the node states slurmctld reports."""

    __test__ = False

    state_dir: Path
    daemons: dict[str, int | None]
    nodes: dict[str, str]
    slurm: str | None = None
    services: dict[str, int | None] = field(default_factory=dict)
    """slurm-dl's services beside the cluster (filter, prioritizer) -> pid or None."""
    gpus: str | None = None
    """The node groups of the last start, as ``--gpus`` takes them (``h100:4x8``)."""
    powered_off: tuple[str, ...] = ()
    """Daemons (``slurmd-gpu03``) that Slurm's power saving stopped on purpose."""

    @property
    def up(self) -> bool:
        return bool(self.daemons) and all(
            pid is not None or name in self.powered_off for name, pid in self.daemons.items()
        )

    @property
    def any_running(self) -> bool:
        return any(pid is not None for pid in self.daemons.values())

    def to_dict(self) -> dict:
        return {
            "state_dir": str(self.state_dir),
            "up": self.up,
            "slurm": self.slurm,
            "gpus": self.gpus,
            "daemons": self.daemons,
            "nodes": self.nodes,
            "services": self.services,
            "powered_off": list(self.powered_off),
        }


@dataclass(frozen=True)
class Recovery:
    """What ``up`` did to a half-dead cluster: the Slurm daemons it found dead, and slurm-dl's
    services it left running while it restarted Slurm."""

    dead: tuple[str, ...]
    kept: dict[str, int | None]

    def message(self) -> str:
        running = {n: p for n, p in self.kept.items() if p}
        services_line = (
            f"left running: {services.describe(running)}"
            if running
            else "no slurm-dl service (filter, prioritizer) was running"
        )
        return (
            f"{', '.join(self.dead) or 'a daemon'} had stopped: restarted the Slurm daemons\n"
            f"(jobs that were running on the testbed were stopped)\n{services_line}"
        )

    def to_dict(self) -> dict:
        return {
            "dead": list(self.dead),
            "services_left_running": {n: p for n, p in self.kept.items() if p},
        }


class Testbed:
    """A local GPU test cluster. ``up`` is idempotent; ``down`` stops everything it started.

    The shape: ``nodes`` x ``gpus_per_node`` GPUs of ``gpu_type`` (default 4 x 8 h100), or
    ``gpus``, node groups of several GPU types: ``"h100:2x8,v100:2x8"`` (TYPE:NODESxGPUS, as
    ``slurm-dl testbed up --gpus``) or a sequence of :class:`~slurm_dl.testbed.shape.GpuGroup`;
    ``shape`` says how such a testbed is laid out (names, features, partitions, switches).
    ``ctld_port``/``node_ports`` pin the ports (otherwise free ones are picked at each cold start).
    """

    __test__ = False

    def __init__(
        self,
        state_dir: Path | str,
        nodes: int | None = None,
        gpus_per_node: int | None = None,
        gpu_type: str | None = None,
        *,
        gpus: str | Sequence[GpuGroup] | None = None,
        ctld_port: int | None = None,
        node_ports: list[int] | None = None,
        job_submit_lua: bool = True,
        extra_conf: tuple[str, ...] = (),
        accounting: bool = False,
        slurm: str | None = None,
        shard_nodes: int = 0,
        shards_per_gpu: int = 0,
        power_save: bool = False,
    ):
        """``slurm``: the release to run (``22.05`` = this machine's own, ``24.11``, ``26.05``);
        None = the one this directory last ran, else the machine's own."""
        self.layout = TestbedLayout(Path(state_dir).resolve())
        self._release: Release | None = release_for(slurm) if slurm is not None else None
        self.ctld_port = ctld_port
        self.node_ports = list(node_ports) if node_ports is not None else None
        self.job_submit_lua = job_submit_lua
        self.extra_conf = tuple(extra_conf)
        self.accounting = accounting
        self.shards = (shard_nodes, shards_per_gpu)
        self.power_save = power_save
        self.recovery: Recovery | None = None
        """Set by ``up`` when it restarted a half-dead cluster."""
        # Validate the shape now (a bad shape is an error before anything starts).
        try:
            if gpus is not None:
                if (nodes, gpus_per_node, gpu_type) != (None, None, None):
                    raise ValueError(
                        "give the shape either as gpus or as nodes/gpus_per_node/gpu_type, not both"
                    )
                self.groups = as_groups(gpus)
            else:
                self.groups = (
                    GpuGroup(
                        "h100" if gpu_type is None else gpu_type,
                        4 if nodes is None else nodes,
                        8 if gpus_per_node is None else gpus_per_node,
                    ),
                )
            ClusterParams(
                self.groups,
                1,
                tuple(range(2, total_nodes(self.groups) + 2)),
                shard_nodes=shard_nodes,
                shards_per_gpu=shards_per_gpu,
            )
        except ValueError as e:
            raise TestbedError(f"testbed {self.layout.root}: {e}") from None
        # Three-digit node names (over 99 nodes) take two characters more, twice, in a socket path.
        longest = MAX_STATE_DIR_LEN - 2 * (name_digits(total_nodes(self.groups)) - 2)
        if len(str(self.layout.root)) > longest:
            raise TestbedError(
                f"testbed state directory {self.layout.root} is {len(str(self.layout.root))} characters long; "
                f"slurmd's Unix sockets need it at most {longest}: choose a shorter --dir"
            )
        self.reshaped = False
        """Set by ``up`` when it started this directory with other GPU types than last time."""

    # -- paths and environment -------------------------------------------------------------
    @property
    def state_dir(self) -> Path:
        return self.layout.root

    @property
    def conf_dir(self) -> Path:
        return self.layout.conf_dir

    @property
    def slurm_conf(self) -> Path:
        return self.layout.slurm_conf

    @property
    def release(self) -> Release:
        """The Slurm release this testbed runs (asked for, else the last one started here)."""
        if self._release is not None:
            return self._release
        params = self.params()
        return release_for(params.slurm if params is not None else HOST_RELEASE)

    @property
    def bin_dir(self) -> Path | None:
        """The directory of the release's client wrappers (first on PATH); None for the host's."""
        return None if self.release.host else inroot.runner_path(self.layout.root).parent

    def env(self) -> dict[str, str]:
        """Environment for Slurm clients: the current one plus ``SLURM_CONF`` of this cluster
        (and, for another release, its client wrappers first on PATH)."""
        env = dict(os.environ)
        exports = self.exports()
        prefix = exports.pop("PATH_PREFIX", None)
        env.update(exports)
        # Another testbed's release wrappers (an `eval "$(slurm-dl testbed env …)"` of this shell)
        # must not serve this one.
        path = [
            d
            for d in env.get("PATH", os.defpath).split(os.pathsep)
            if not (d and os.path.exists(os.path.join(d, inroot.runner_path(Path("x")).name)))
        ]
        env["PATH"] = os.pathsep.join(([prefix] if prefix else []) + path)
        return env

    def exports(self) -> dict[str, str]:
        """Only the variables a shell must export to talk to this cluster."""
        return render_env(self.layout, self.release.name, self.bin_dir)

    def write_site_config(
        self, template: Path, *, replace: bool = False, own_shape: bool = False
    ) -> Path:
        """Write DIR/site.toml: ``template`` with its database and the filter's socket inside
        the state directory (so that ``slurm-dl doctor`` and ``filter serve`` agree with what
        the testbed runs). ``own_shape``: on a testbed of several GPU types, or one whose first
        nodes offer shards, the template's GPU types, partitions and node groups are replaced by
        the testbed's own, with ``[sharing]`` over the shard nodes (``site_shape``)."""
        from .site_toml import with_database_url, with_setting

        target = self.layout.site_config
        if target.exists() and not replace:
            return target
        try:
            text = template.read_text(encoding="utf-8")
            shard_nodes, shards_per_gpu = self.shards
            if own_shape and (is_mixed(self.groups) or shard_nodes):
                source = (
                    f"site-configs/{template.name}"
                    if template.parent.name == "site-configs"
                    else str(template)
                )
                text = with_shape(
                    text,
                    self.groups,
                    source=source,
                    cpus=DEFAULT_CPUS_PER_NODE,
                    memory_gb=DEFAULT_MEMORY_MB_PER_NODE // 1024,
                    shard_nodes=shard_nodes,
                    shards_per_gpu=shards_per_gpu,
                )
            self.layout.root.mkdir(parents=True, exist_ok=True)
            text = with_database_url(text, self.layout.ledger_url)
            text = with_setting(text, "filter", "socket", str(self.layout.filter_socket))
            params = self.params()
            if params is not None and params.munge:
                # The explain endpoint, as a site turns it on for its login nodes: users who cannot
                # read the ledger ask the prioritizer, proving who they are with the testbed's munged.
                text = with_setting(
                    text, "prioritizer", "explain_port", process.pick_free_ports(1)[0]
                )
                text = with_setting(text, "prioritizer", "explain_address", "127.0.0.1")
                text = with_setting(text, "prioritizer", "explain_host", "127.0.0.1")
                text = with_setting(
                    text, "prioritizer", "munge_socket", str(self.layout.munge_socket)
                )
            target.write_text(text, encoding="utf-8")
        except OSError as e:
            raise TestbedError(
                f"cannot write {target} from {template}: {e.strerror or e}"
            ) from None
        return target

    def params(self) -> ClusterParams | None:
        """The parameters of the last start, or None if never started."""
        try:
            return ClusterParams.from_dict(json.loads(self.layout.params_file.read_text()))
        except (OSError, ValueError, KeyError):
            return None

    # -- status ------------------------------------------------------------------------------
    def _daemon_names(self, params: ClusterParams) -> list[str]:
        dbd = ["mariadb", "slurmdbd"] if params.accounting else []
        munge = ["munged"] if params.munge else []
        return [*munge, *dbd, "slurmctld", *(f"slurmd-{n}" for n in params.node_names)]

    def _running_pid(self, name: str) -> int | None:
        pid = process.read_pid(self.layout.daemon_pid(name))
        if pid is not None and process.belongs_to(pid, self.layout.root):
            return pid
        return None

    def status(self) -> TestbedStatus:
        params = self.params()
        found = services.find(self.layout.root)
        if params is None:
            return TestbedStatus(self.layout.root, {}, {}, None, found)
        daemons = {name: self._running_pid(name) for name in self._daemon_names(params)}
        off = tuple(
            f"slurmd-{n}"
            for n in params.node_names
            if params.power_save
            and daemons.get(f"slurmd-{n}") is None
            and power.off_marker(self.layout.root, n).exists()
        )
        nodes: dict[str, str] = {}
        if daemons.get("slurmctld"):
            try:
                nodes = node_states(self.env())
            except SlurmError:
                nodes = {}
        return TestbedStatus(
            self.layout.root, daemons, nodes, params.slurm, found, spec_of(params.groups), off
        )

    @contextlib.contextmanager
    def _locked(self):
        """One ``up``/``down`` at a time per state directory (two shells, two test runs)."""
        try:
            self.layout.root.mkdir(parents=True, exist_ok=True)
            handle = open(self.layout.root / ".lock", "w")
        except OSError as e:
            raise TestbedError(
                f"cannot use the testbed state directory {self.layout.root}: {e}"
            ) from None
        with handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            yield

    # -- up ----------------------------------------------------------------------------------
    def up(self, timeout: float | None = None) -> TestbedStatus:
        """Start the cluster and wait until every node answers (``timeout`` s; by default 30 s
        plus 0.1 s per node). Already up: returns at once."""
        if timeout is None:
            timeout = READY_TIMEOUT_S + READY_S_PER_NODE * total_nodes(self.groups)
        release = self.release
        if release.host:
            find_slurm()
        acct_binaries = (
            acct.find_accounting_binaries(host_slurmdbd=release.host) if self.accounting else {}
        )
        require_root()
        with self._locked():
            return self._up(acct_binaries, timeout)

    def _daemon_argv(self, daemon: str) -> tuple[str, ...]:
        """How to start ``slurmctld``/``slurmd``/``slurmdbd`` of this testbed's release (always by
        that name: Slurm decides it is a daemon from argv[0])."""
        if not self.release.host:
            return (str(inroot.runner_path(self.layout.root)), f"/usr/sbin/{daemon}")
        if daemon == "slurmdbd":
            return (acct.find_accounting_binaries()["slurmdbd"],)
        found = find_slurm()
        return (found.slurmctld if daemon == "slurmctld" else found.slurmd,)

    def _prepare_release(self) -> None:
        """Another release: its root (built once) and the wrappers that run its programs."""
        release = self.release
        if release.host:
            inroot.remove_wrappers(self.layout.root)
            return
        root = roots.ensure_root(release)
        try:
            inroot.write_wrappers(root, release.name, self.layout.root)
        except OSError as e:
            raise TestbedError(
                f"cannot write the Slurm {release.name} wrappers under {self.layout.root}: {e}"
            ) from None

    def _up(self, acct_binaries: dict[str, str], timeout: float) -> TestbedStatus:
        current = self.status()
        if current.up:
            self._check_same_shape(current)
            return current
        if current.any_running:
            # A half-dead cluster (a daemon crashed): stop the rest of Slurm and start clean. slurm-dl's
            # services stay: they reach Slurm through SLURM_CONF, whose path does not change.
            dead = tuple(n for n, pid in current.daemons.items() if pid is None)
            self.recovery = Recovery(dead, dict(current.services))
            self._down(spare=[p for p in current.services.values() if p])
        self._prepare_release()
        before = self.params()
        params = self._choose_params()
        # One type to several, several to one, or other types: the site config must follow.
        self.reshaped = (
            before is not None and before.groups != params.groups and (before.mixed or params.mixed)
        )
        self._write_files(params)
        env = self.env()
        started: dict[str, int] = {}
        try:
            if params.munge:
                started["munged"] = self._start_munged(env)
            if params.accounting:
                started.update(self._start_accounting(params, acct_binaries, env))
        except BaseException:
            self._down()
            raise
        ctld_argv = (*self._daemon_argv("slurmctld"), "-D", "-f", str(self.layout.slurm_conf))
        started |= {
            "slurmctld": process.start(
                process.Daemon("slurmctld", ctld_argv),
                self.layout.root,
                self.layout.daemon_log("slurmctld.stdout"),
                self.layout.daemon_pid("slurmctld"),
                env,
            )
        }
        for name in params.node_names:
            argv = (
                *self._daemon_argv("slurmd"),
                "-D",
                "-N",
                name,
                "-f",
                str(self.layout.slurm_conf),
            )
            daemon = f"slurmd-{name}"
            started[daemon] = process.start(
                process.Daemon(daemon, argv),
                self.layout.root,
                self.layout.daemon_log(f"{daemon}.stdout"),
                self.layout.daemon_pid(daemon),
                env,
            )
        try:
            self._wait_ready(params, started, timeout)
        except BaseException:
            self._down()
            raise
        return self.status()

    def _start_munged(self, env: dict[str, str]) -> int:
        """The testbed's own munged (its key made once, readable by root alone; its socket open
        to every user), so that the prioritizer's explain endpoint can tell who asks."""
        layout = self.layout
        private, sock = layout.munge_dir, layout.munge_socket
        key = private / "munge.key"
        try:
            private.mkdir(mode=0o700, exist_ok=True)
            private.chmod(0o700)
            sock.parent.mkdir(mode=0o755, parents=True, exist_ok=True)
            sock.parent.chmod(0o755)
            sock.unlink(missing_ok=True)  # a dead munged's socket would look ready
            if not key.exists():
                made = subprocess.run(
                    [
                        shutil.which("mungekey") or "mungekey",
                        "--create",
                        f"--keyfile={key}",
                        "--bits=1024",
                    ],
                    capture_output=True,
                    text=True,
                    timeout=30,
                )
                if made.returncode != 0:
                    raise TestbedError(f"mungekey could not make {key}: {made.stderr.strip()}")
        except OSError as e:
            raise TestbedError(
                f"cannot prepare the testbed's munged under {private}: {e}"
            ) from None
        argv = (
            shutil.which("munged") or "munged",
            "--foreground",
            "--force",
            f"--socket={sock}",
            f"--key-file={key}",
            f"--log-file={private / 'munged.log'}",
            f"--pid-file={private / 'munged.pid'}",
            f"--seed-file={private / 'munged.seed'}",
        )
        pid = process.start(
            process.Daemon("munged", argv),
            layout.root,
            layout.daemon_log("munged.stdout"),
            layout.daemon_pid("munged"),
            env,
        )
        acct.wait_until(sock.exists, "munged", pid, self._died_message("munged"))
        return pid

    def _start_accounting(
        self, params: ClusterParams, binaries: dict[str, str], env: dict[str, str]
    ) -> dict[str, int]:
        """MariaDB, then slurmdbd, then the cluster/account/user records slurmctld needs."""
        layout = self.layout
        acct.init_datadir(layout, binaries)
        mariadb = process.start(
            process.Daemon("mariadb", acct.mariadb_argv(layout, params, binaries)),
            layout.root,
            layout.daemon_log("mariadb.stdout"),
            layout.daemon_pid("mariadb"),
            env,
        )
        sock = acct.mariadb_socket(layout)
        acct.wait_until(
            lambda: sock.exists() and process.port_listening(params.mysql_port),
            "MariaDB",
            mariadb,
            self._died_message("mariadb"),
        )
        acct.create_db_user(layout, binaries)
        slurmdbd = process.start(
            process.Daemon("slurmdbd", (*self._daemon_argv("slurmdbd"), "-D")),
            layout.root,
            layout.daemon_log("slurmdbd.stdout"),
            layout.daemon_pid("slurmdbd"),
            env,
        )
        acct.wait_until(
            lambda: process.port_listening(params.dbd_port),
            "slurmdbd",
            slurmdbd,
            self._died_message("slurmdbd"),
        )
        acct.register_cluster(layout, env)
        return {"mariadb": mariadb, "slurmdbd": slurmdbd}

    def _check_same_shape(self, current: TestbedStatus) -> None:
        params = self.params()
        assert params is not None
        wanted = (self.groups, self.accounting, self.release.name)
        have = (params.groups, params.accounting, params.slurm)
        if self.power_save != params.power_save:
            raise TestbedError(
                f"testbed {self.layout.root} is already up "
                f"{'with' if params.power_save else 'without'} power saving; run `slurm-dl testbed "
                f"down --dir {self.layout.root}` before asking for "
                f"{'it' if self.power_save else 'a testbed without it'}"
            )
        if wanted == have and self.shards != (params.shard_nodes, params.shards_per_gpu):
            raise TestbedError(
                f"testbed {self.layout.root} is already up with {params.shard_nodes} shard nodes of "
                f"{params.shards_per_gpu} shards per GPU; run `slurm-dl testbed down --dir {self.layout.root}` "
                f"before asking for {self.shards[0]} of {self.shards[1]}"
            )
        if wanted != have:
            raise TestbedError(
                f"testbed {self.layout.root} is already up with Slurm {have[2]}, {describe(have[0])}"
                f"{' with accounting' if have[1] else ''}; run `slurm-dl testbed down --dir "
                f"{self.layout.root}` before asking for Slurm {wanted[2]}, {describe(wanted[0])}"
                f"{' with accounting' if wanted[1] else ''}"
            )

    def _choose_params(self) -> ClusterParams:
        nodes = total_nodes(self.groups)
        count = nodes + 1
        extra = process.pick_free_ports(2) if self.accounting else []
        if self.ctld_port is not None or self.node_ports is not None:
            ctld = self.ctld_port if self.ctld_port is not None else process.pick_free_ports(1)[0]
            nports = (
                self.node_ports if self.node_ports is not None else process.pick_free_ports(nodes)
            )
            ports = [ctld, *nports]
            taken = [p for p in ports if not process.port_free(p)]
            if taken:
                raise TestbedError(
                    f"testbed {self.layout.root}: port(s) {', '.join(map(str, taken))} already in use "
                    f"(another Slurm or service listens there); choose other ports or stop that process"
                )
        else:
            ports = process.pick_free_ports(count)
        while set(extra) & set(ports):
            extra = process.pick_free_ports(2)
        try:
            return ClusterParams(
                groups=self.groups,
                ctld_port=ports[0],
                node_ports=tuple(ports[1:]),
                job_submit_lua=self.job_submit_lua,
                extra_conf=self.extra_conf,
                dbd_port=extra[0] if extra else None,
                mysql_port=extra[1] if extra else None,
                slurm=self.release.name,
                munge=munge_installed(),
                shard_nodes=self.shards[0],
                shards_per_gpu=self.shards[1],
                power_save=self.power_save,
            )
        except ValueError as e:
            raise TestbedError(f"testbed {self.layout.root}: {e}") from None

    def _write_files(self, params: ClusterParams) -> None:
        layout = self.layout
        try:
            for d in layout.all_dirs():
                d.mkdir(parents=True, exist_ok=True)
            for name in params.node_names:
                (layout.spool_dir / name).mkdir(exist_ok=True)
            layout.slurm_conf.write_text(render_slurm_conf(layout, params))
            layout.gres_conf.write_text(render_gres_conf(layout, params))
            layout.topology_conf.write_text(render_topology_conf(params))
            if params.accounting:
                layout.slurmdbd_conf.write_text(acct.render_slurmdbd_conf(layout, params))
                layout.slurmdbd_conf.chmod(0o600)  # slurmdbd refuses a readable password file
            if params.job_submit_lua and not layout.job_submit_lua.exists():
                layout.job_submit_lua.write_text(PASS_THROUGH_JOB_SUBMIT_LUA)
            self._write_power_programs(params)
        except OSError as e:
            raise TestbedError(f"cannot write the testbed files under {layout.root}: {e}") from None
        for i in range(params.max_gpus_per_node):
            self._make_gpu_device(layout.gpu_device(i))
        layout.params_file.write_text(json.dumps(params.to_dict(), indent=2) + "\n")

    def _write_power_programs(self, params: ClusterParams) -> None:
        """The suspend/resume programs of ``--power-save``; every slurmd starts powered on."""
        root = self.layout.root
        for name in params.node_names:
            power.off_marker(root, name).unlink(missing_ok=True)
        if not params.power_save:
            return
        scontrol = (
            str(self.bin_dir / "scontrol")
            if self.bin_dir is not None
            else shutil.which("scontrol") or "/usr/bin/scontrol"
        )
        for path, text in (
            (power.suspend_program(root), power.render_suspend(root, scontrol)),
            (
                power.resume_program(root),
                power.render_resume(root, scontrol, self._daemon_argv("slurmd")),
            ),
        ):
            path.write_text(text)
            path.chmod(0o755)

    @staticmethod
    def _make_gpu_device(path: Path) -> None:
        try:
            st = path.stat()
            if stat.S_ISCHR(st.st_mode):
                return
            path.unlink()
        except FileNotFoundError:
            pass
        try:
            os.mknod(path, 0o666 | stat.S_IFCHR, os.makedev(1, 3))
        except OSError as e:
            raise TestbedError(
                f"cannot create the fake GPU device {path} with mknod ({e.strerror}); the testbed needs root "
                f"and a filesystem that allows device nodes (not one mounted nodev)"
            ) from None

    def _wait_ready(self, params: ClusterParams, started: dict[str, int], timeout: float) -> None:
        deadline = time.monotonic() + timeout
        states: dict[str, str] = {}
        last_error = ""
        while True:
            for name, pid in started.items():
                if not process.alive(pid):
                    raise TestbedError(self._died_message(name))
            # Ask sinfo only once slurmctld listens: a client that finds no controller backs off ~1 s.
            if process.port_listening(params.ctld_port):
                try:
                    states = node_states(self.env())
                    last_error = ""
                except SlurmError as e:
                    last_error = str(e)
            else:
                last_error = f"slurmctld not listening on port {params.ctld_port} yet"
            # A node that answers is ready; after a restart it may already hold recovered jobs.
            if states and all(states.get(n) in _READY_STATES for n in params.node_names):
                return
            if time.monotonic() > deadline:
                shown = ", ".join(f"{n}={states.get(n, '?')}" for n in params.node_names)
                raise TestbedError(
                    f"testbed {self.layout.root} not ready after {timeout:.0f} s (nodes: {shown}"
                    f"{'; ' + last_error if last_error else ''}); slurmctld log ends:\n"
                    + process.log_tail(self.layout.daemon_log("slurmctld"))
                )
            time.sleep(0.1)

    def _died_message(self, name: str) -> str:
        log = self.layout.daemon_log(name)
        stdout_log = self.layout.daemon_log(f"{name}.stdout")
        chosen = stdout_log if stdout_log.exists() and stdout_log.stat().st_size else log
        text = process.log_tail(chosen)
        hint = ""
        if "Address already in use" in text:
            hint = " (its port is taken by another process)"
        return f"{name} of testbed {self.layout.root} died at start{hint}; {chosen} ends:\n{text}"

    # -- down --------------------------------------------------------------------------------
    def down(self) -> list[int]:
        """Stop every process this testbed started (daemons first, then leftovers such as
        slurmstepd and job steps). Works after a crash. Returns the pids it stopped."""
        if not self.layout.root.is_dir():
            return []
        with self._locked():
            return self._down()

    def _down(self, spare: list[int] = ()) -> list[int]:
        """Stop this testbed's processes except ``spare`` and what runs below them."""
        root = self.layout.root
        keep = set(process.with_descendants(list(spare))) if spare else set()
        daemons: list[int] = []
        for pid_file in (
            sorted(self.layout.pid_dir.glob("*.pid")) if self.layout.pid_dir.is_dir() else []
        ):
            pid = process.read_pid(pid_file)
            if (
                pid is not None
                and pid not in daemons
                and pid not in keep
                and process.belongs_to(pid, root)
            ):
                daemons.append(pid)
        # Find slurmstepd and the job steps below it before the daemons go (they get reparented).
        marked = set(process.marked_processes(root)) - keep
        if not self.release.host:  # the root's daemons run in private mount namespaces of their own
            host_ns = process.mount_namespace(os.getpid())
            spaces = {ns for ns in map(process.mount_namespace, daemons) if ns and ns != host_ns}
            marked |= set(process.in_mount_namespaces(spaces)) - keep
        everything = [
            p for p in process.with_descendants(sorted(set(daemons) | marked)) if p not in keep
        ]
        process.stop(daemons)
        leftovers = [p for p in everything if p not in daemons and process.alive(p)]
        process.stop(leftovers, term_wait_s=2.0)
        for _ in range(3):  # what was started meanwhile (a service's last squeue, an epilog)
            keep = set(process.with_descendants(list(spare))) if spare else set()
            late = [p for p in process.marked_processes(root) if p not in keep and p not in daemons]
            if not late:
                break
            process.stop(late, term_wait_s=2.0)
            leftovers += [p for p in late if p not in leftovers]
        if self.layout.pid_dir.is_dir():
            for pid_file in self.layout.pid_dir.glob("*.pid"):
                pid_file.unlink(missing_ok=True)
        return daemons + leftovers
