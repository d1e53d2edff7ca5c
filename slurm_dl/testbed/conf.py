"""Pure rendering of the test cluster's Slurm configuration: parameters in, file text out.

No I/O here: ``TestbedLayout`` names every path under the state directory and ``ClusterParams``
fixes the node groups (``shape``: GPU type, nodes, GPUs per node), and ports; the ``render_*``
functions turn them into slurm.conf, gres.conf, topology.conf and a pass-through job_submit.lua.
"""

from __future__ import annotations

import hashlib
import shlex
from dataclasses import dataclass, field
from pathlib import Path

from ..core.hostlist import compress_hostlist
from . import power
from .shape import (
    GpuGroup,
    check_groups,
    feature,
    group_node_names,
    halves,
    is_mixed,
    leaves,
    partitions,
    total_nodes,
)

# Per-node shape the fake cluster claims (SlurmdParameters=config_overrides lets slurmd claim more
# than the machine has). Matches site-configs/testbed.toml.
DEFAULT_CPUS_PER_NODE = 32
DEFAULT_MEMORY_MB_PER_NODE = 256000
# A script may exit with this code to ask Slurm to requeue it (checkpoint-and-requeue).
REQUEUE_EXIT_CODE = 85


@dataclass(frozen=True)
class TestbedLayout:
    """Every path a testbed uses, all under one state directory."""

    __test__ = False  # not a pytest test class

    root: Path

    @property
    def conf_dir(self) -> Path:
        return self.root / "etc"

    @property
    def slurm_conf(self) -> Path:
        return self.conf_dir / "slurm.conf"

    @property
    def gres_conf(self) -> Path:
        return self.conf_dir / "gres.conf"

    @property
    def topology_conf(self) -> Path:
        return self.conf_dir / "topology.conf"

    @property
    def slurmdbd_conf(self) -> Path:
        return self.conf_dir / "slurmdbd.conf"

    @property
    def job_submit_lua(self) -> Path:
        return self.conf_dir / "job_submit.lua"

    @property
    def site_config(self) -> Path:
        """The slurm-dl site config of this testbed (its database inside the state directory)."""
        return self.root / "site.toml"

    @property
    def ledger_url(self) -> str:
        return f"sqlite:///{self.root.resolve()}/ledger.db"

    @property
    def filter_socket(self) -> Path:
        """Where the testbed's filter service listens (DIR/site.toml says so)."""
        return self.root.resolve() / "filter.sock"

    @property
    def munge_dir(self) -> Path:
        """The testbed's own munged: its key, seed, pid and log, readable by root alone."""
        return self.root / "munge"

    @property
    def munge_socket(self) -> Path:
        """Where the testbed's munged listens: outside the state directory, which other users
        may not be able to enter, so that they can prove who they are to the explain endpoint."""
        return Path("/run/slurm-dl") / cluster_name(self.root.resolve()) / "munge.socket"

    @property
    def log_dir(self) -> Path:
        return self.root / "log"

    @property
    def pid_dir(self) -> Path:
        return self.root / "run"

    @property
    def spool_dir(self) -> Path:
        return self.root / "spool"

    @property
    def state_save_dir(self) -> Path:
        return self.root / "state"

    @property
    def dev_dir(self) -> Path:
        return self.root / "dev"

    @property
    def params_file(self) -> Path:
        return self.root / "testbed.json"

    def daemon_log(self, daemon: str) -> Path:
        """``slurmctld`` or ``slurmd-<node>``."""
        return self.log_dir / f"{daemon}.log"

    def daemon_pid(self, daemon: str) -> Path:
        return self.pid_dir / f"{daemon}.pid"

    def gpu_device(self, index: int) -> Path:
        return self.dev_dir / f"nvidia{index}"

    def all_dirs(self) -> list[Path]:
        return [
            self.conf_dir,
            self.log_dir,
            self.pid_dir,
            self.spool_dir,
            self.state_save_dir,
            self.dev_dir,
        ]


@dataclass(frozen=True)
class ClusterParams:
    """What the cluster looks like and where it listens. ``groups``: the node groups, one GPU
    type each (see ``shape``); a single group is the classic one-type testbed."""

    groups: tuple[GpuGroup, ...]
    ctld_port: int
    node_ports: tuple[int, ...]
    cpus_per_node: int = DEFAULT_CPUS_PER_NODE
    memory_mb_per_node: int = DEFAULT_MEMORY_MB_PER_NODE
    job_submit_lua: bool = True
    extra_conf: tuple[str, ...] = field(default=())
    # Accounting (slurmdbd over a private MariaDB) when both are set.
    dbd_port: int | None = None
    mysql_port: int | None = None
    # The Slurm release the daemons run (the host's own, or one from a Debian root).
    slurm: str = "22.05"
    # A munged of the testbed's own (for the prioritizer's explain endpoint; Slurm stays auth/none).
    munge: bool = False
    # GPU sharing: the first ``shard_nodes`` nodes offer ``shards_per_gpu`` Slurm shards per GPU.
    shard_nodes: int = 0
    shards_per_gpu: int = 0
    # Slurm's power saving, with programs that stop and start each node's slurmd (``power``).
    power_save: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "groups", tuple(self.groups))
        check_groups(self.groups)
        if len(self.node_ports) != self.nodes:
            raise ValueError(
                f"need one port per node: {self.nodes} nodes, {len(self.node_ports)} ports"
            )
        if (self.dbd_port is None) != (self.mysql_port is None):
            raise ValueError("accounting needs both dbd_port and mysql_port")
        check_shards(self.groups, self.shard_nodes, self.shards_per_gpu)
        ports = (
            self.ctld_port,
            *self.node_ports,
            *((self.dbd_port, self.mysql_port) if self.accounting else ()),
        )
        if len(set(ports)) != len(ports):
            raise ValueError(f"ports must be distinct, got {ports}")

    @classmethod
    def one_type(cls, nodes: int, gpus_per_node: int, gpu_type: str, **kw) -> "ClusterParams":
        """The classic testbed: ``nodes`` nodes of ``gpus_per_node`` ``gpu_type`` GPUs."""
        return cls(groups=(GpuGroup(gpu_type, nodes, gpus_per_node),), **kw)

    @property
    def nodes(self) -> int:
        return total_nodes(self.groups)

    @property
    def mixed(self) -> bool:
        return is_mixed(self.groups)

    @property
    def max_gpus_per_node(self) -> int:
        return max(g.gpus_per_node for g in self.groups)

    @property
    def node_names(self) -> list[str]:
        return [n for names in group_node_names(self.groups) for n in names]

    @property
    def accounting(self) -> bool:
        return self.dbd_port is not None

    def to_dict(self) -> dict:
        # One group: the keys testbed.json always had; several: a list of groups.
        if self.mixed:
            shape: dict = {"groups": [g.to_dict() for g in self.groups]}
        else:
            g = self.groups[0]
            shape = {"nodes": g.nodes, "gpus_per_node": g.gpus_per_node, "gpu_type": g.gpu_type}
        return {
            **shape,
            "ctld_port": self.ctld_port,
            "node_ports": list(self.node_ports),
            "cpus_per_node": self.cpus_per_node,
            "memory_mb_per_node": self.memory_mb_per_node,
            "job_submit_lua": self.job_submit_lua,
            "extra_conf": list(self.extra_conf),
            "dbd_port": self.dbd_port,
            "mysql_port": self.mysql_port,
            "slurm": self.slurm,
            "munge": self.munge,
            **(
                {"shard_nodes": self.shard_nodes, "shards_per_gpu": self.shards_per_gpu}
                if self.shard_nodes
                else {}
            ),
            **({"power_save": True} if self.power_save else {}),
        }

    @classmethod
    def from_dict(cls, d: dict) -> "ClusterParams":
        if "groups" in d:
            groups = tuple(GpuGroup.from_dict(g) for g in d["groups"])
        else:
            groups = (GpuGroup(str(d["gpu_type"]), int(d["nodes"]), int(d["gpus_per_node"])),)
        return cls(
            groups=groups,
            ctld_port=int(d["ctld_port"]),
            node_ports=tuple(int(p) for p in d["node_ports"]),
            cpus_per_node=int(d.get("cpus_per_node", DEFAULT_CPUS_PER_NODE)),
            memory_mb_per_node=int(d.get("memory_mb_per_node", DEFAULT_MEMORY_MB_PER_NODE)),
            job_submit_lua=bool(d.get("job_submit_lua", True)),
            extra_conf=tuple(d.get("extra_conf", ())),
            dbd_port=d.get("dbd_port"),
            mysql_port=d.get("mysql_port"),
            slurm=str(d.get("slurm", "22.05")),
            munge=bool(d.get("munge", False)),
            shard_nodes=int(d.get("shard_nodes", 0)),
            shards_per_gpu=int(d.get("shards_per_gpu", 0)),
            power_save=bool(d.get("power_save", False)),
        )

    def shards_on(self, index: int, group: GpuGroup) -> int:
        """Shards the node at ``index`` (node order) offers: all its GPUs' among the first
        ``shard_nodes``, else none."""
        return group.gpus_per_node * self.shards_per_gpu if index < self.shard_nodes else 0


MAX_SHARDS_PER_GPU = 128


def check_shards(groups, shard_nodes: int, shards_per_gpu: int) -> None:
    """``--shard-nodes N --shards-per-gpu K``: N nodes with GPUs, K in 1..128, both or neither."""
    if not shard_nodes and not shards_per_gpu:
        return
    if not shard_nodes or not shards_per_gpu:
        raise ValueError("shards need both --shard-nodes N and --shards-per-gpu K")
    if not 1 <= shards_per_gpu <= MAX_SHARDS_PER_GPU:
        raise ValueError(
            f"--shards-per-gpu: got {shards_per_gpu}; allowed: 1 to {MAX_SHARDS_PER_GPU}"
        )
    order = [g for g in groups for _ in range(g.nodes)]
    if not 1 <= shard_nodes <= len(order):
        raise ValueError(
            f"--shard-nodes: got {shard_nodes}; allowed: 1 to {len(order)} (the testbed's nodes)"
        )
    if any(g.gpus_per_node == 0 for g in order[:shard_nodes]):
        raise ValueError(
            f"--shard-nodes: got {shard_nodes}; the first {shard_nodes} nodes must have GPUs to "
            "offer shards of"
        )


leaf_switches = halves  # the one-type split, under its old name

# Job limits as a centre raises them with its size: room for a deep queue per node (50,000 up to
# 100 nodes, 500 per node above: 128,000 at 256), and arrays as large as a user sweep gets.
JOBS_PER_NODE = 500
MIN_MAX_JOB_COUNT = 50_000


def max_job_count(nodes: int) -> int:
    """slurm.conf MaxJobCount for a testbed of ``nodes`` nodes."""
    return max(MIN_MAX_JOB_COUNT, JOBS_PER_NODE * nodes)


def max_array_size(nodes: int) -> int:
    """slurm.conf MaxArraySize: 10,001 (tasks 0..10000) up to 100 nodes, 100,001 above."""
    return 10_001 if nodes <= 100 else 100_001


def cluster_name(root: Path) -> str:
    """A short name unique to the state directory (Slurm allows ≤ 40 lowercase chars)."""
    digest = hashlib.sha1(str(root).encode()).hexdigest()[:8]
    return f"slurmdl{digest}"


def render_slurm_conf(layout: TestbedLayout, params: ClusterParams) -> str:
    def_mem_per_cpu = max(1, params.memory_mb_per_node // max(1, params.cpus_per_node))
    lines = [
        "# Written by slurm-dl testbed: a local test cluster. Do not edit; `slurm-dl testbed up` rewrites it.",
        f"ClusterName={cluster_name(layout.root)}",
        "SlurmctldHost=localhost(127.0.0.1)",
        f"SlurmctldPort={params.ctld_port}",
        "SlurmUser=root",
        "SlurmdUser=root",
        # Loopback-only cluster without munge.
        "AuthType=auth/none",
        "CredType=cred/none",
        # Requeued jobs may restart after cred_expire+1 s (default 121 s): keep it short.
        "AuthInfo=cred_expire=10",
        f"StateSaveLocation={layout.state_save_dir}",
        f"SlurmdSpoolDir={layout.spool_dir}/%n",
        f"SlurmctldPidFile={layout.pid_dir}/slurmctld.slurm-pid",
        f"SlurmdPidFile={layout.pid_dir}/slurmd-%n.slurm-pid",
        f"SlurmctldLogFile={layout.daemon_log('slurmctld')}",
        f"SlurmdLogFile={layout.log_dir}/slurmd-%n.log",
        "SlurmctldDebug=info",
        "SlurmdDebug=info",
        "SlurmdParameters=config_overrides",
        "ProctrackType=proctrack/linuxproc",
        "TaskPlugin=task/none",
        "JobAcctGatherType=jobacct_gather/none",
        "MpiDefault=none",
        "MailProg=/bin/true",
        "ReturnToService=2",
        "SlurmctldTimeout=30",
        "SlurmdTimeout=60",
        "InactiveLimit=0",
        "Waittime=0",
        "KillWait=5",
        "MinJobAge=60",
        f"MaxJobCount={max_job_count(params.nodes)}",
        f"MaxArraySize={max_array_size(params.nodes)}",
        f"RequeueExit={REQUEUE_EXIT_CODE}",
        "SchedulerType=sched/backfill",
        "SchedulerParameters=bf_interval=2,sched_interval=2,max_switch_wait=300,default_queue_depth=1000",
        "SelectType=select/cons_tres",
        "SelectTypeParameters=CR_Core_Memory",
        f"DefMemPerCPU={def_mem_per_cpu}",
        "GresTypes=gpu,shard" if params.shard_nodes else "GresTypes=gpu",
        "TopologyPlugin=topology/tree",
        # SiteFactor (pushed by the prioritizer) needs the multifactor plugin.
        "PriorityType=priority/multifactor",
        # Age and fair-share count only with slurmdbd.
        f"PriorityWeightAge={1000 if params.accounting else 0}",
        "PriorityMaxAge=1-0",
        f"PriorityWeightFairshare={1000 if params.accounting else 0}",
        "PriorityWeightJobSize=0",
        "PriorityWeightPartition=1000",
        "PriorityWeightQOS=0",
        *(
            [
                "AccountingStorageType=accounting_storage/slurmdbd",
                "AccountingStorageHost=localhost",
                f"AccountingStoragePort={params.dbd_port}",
                "AccountingStorageTRES=gres/gpu",
            ]
            if params.accounting
            else ["AccountingStorageType=accounting_storage/none"]
        ),
        "JobCompType=jobcomp/filetxt",
        f"JobCompLoc={layout.log_dir}/jobcomp.txt",
        "SlurmctldParameters=preempt_send_user_signal",
    ]
    if params.job_submit_lua:
        lines.append("JobSubmitPlugins=lua")
    if params.power_save:
        lines.extend(power.render_conf_lines(layout.root))
    lines.extend(params.extra_conf)
    lines.append("")
    ports = iter(params.node_ports)
    index = 0
    for group, names in zip(params.groups, group_node_names(params.groups)):
        gres = f"Gres=gpu:{group.gpu_type}:{group.gpus_per_node}" if group.gpus_per_node else ""
        features = f"Features={feature(group)}" if params.mixed else ""
        for name in names:
            shards = params.shards_on(index, group)
            index += 1
            lines.append(
                f"NodeName={name} NodeHostname={name} NodeAddr=127.0.0.1 Port={next(ports)} "
                f"CPUs={params.cpus_per_node} RealMemory={params.memory_mb_per_node} {features} "
                f"{gres}{f',shard:{shards}' if shards else ''} State=UNKNOWN".replace(
                    "   ", " "
                ).replace("  ", " ")
            )
    for name, members, default in partitions(params.groups):
        lines.append(
            f"PartitionName={name} Nodes={compress_hostlist(members)}{' Default=YES' if default else ''} "
            f"MaxTime=INFINITE State=UP"
        )
    return "\n".join(lines) + "\n"


def render_gres_conf(layout: TestbedLayout, params: ClusterParams) -> str:
    """Every node's fake GPUs are the same character devices DIR/dev/nvidia0…; a mixed testbed
    names each group's nodes and type on a line of its own."""
    lines = [
        "# Fake GPUs: character devices (major 1, minor 3, like /dev/null) so Slurm sets CUDA_VISIBLE_DEVICES.",
        "AutoDetect=off",
    ]
    for group, names in zip(params.groups, group_node_names(params.groups)):
        if not group.gpus_per_node:
            continue
        last = group.gpus_per_node - 1
        files = f"{layout.dev_dir}/nvidia[0-{last}]" if last else f"{layout.dev_dir}/nvidia0"
        where = f"NodeName={compress_hostlist(names)} " if params.mixed else ""
        lines.append(f"{where}Name=gpu Type={group.gpu_type} File={files}")
    index = 0
    for group, names in zip(params.groups, group_node_names(params.groups)):
        for name in names:  # shards on each GPU's device file: a GPU is then shared or whole
            shards = params.shards_on(index, group)
            index += 1
            for gpu in range(group.gpus_per_node if shards else 0):
                lines.append(
                    f"NodeName={name} Name=shard Count={params.shards_per_gpu} "
                    f"File={layout.dev_dir}/nvidia{gpu}"
                )
    return "\n".join(lines) + "\n"


def render_topology_conf(params: ClusterParams) -> str:
    """Two leaf switches under one spine; a mixed testbed has one leaf per GPU type."""
    members_of = leaves(params.groups)
    lines = [
        "# One leaf switch per GPU type under one spine."
        if params.mixed
        else "# Two leaf switches under one spine."
    ]
    for i, members in enumerate(members_of, start=1):
        lines.append(f"SwitchName=leaf{i} Nodes={compress_hostlist(members)}")
    count = len(members_of)
    lines.append(
        f"SwitchName=spine Switches=leaf[1-{count}]"
        if count > 1
        else "SwitchName=spine Switches=leaf1"
    )
    return "\n".join(lines) + "\n"


PASS_THROUGH_JOB_SUBMIT_LUA = """\
-- Written by slurm-dl testbed: accepts every job unchanged. The filter replaces this file;
-- slurmctld re-reads it when its mtime changes.
function slurm_job_submit(job_desc, part_list, submit_uid)
    return slurm.SUCCESS
end

function slurm_job_modify(job_desc, job_rec, part_list, modify_uid)
    return slurm.SUCCESS
end
"""


def render_env(
    layout: TestbedLayout, slurm: str = "22.05", bin_dir: Path | None = None
) -> dict[str, str]:
    """What a shell needs to talk to this cluster (and to its slurm-dl site config, once written).
    ``bin_dir``: the wrappers of another release's clients, to put first on PATH (as ``PATH_PREFIX``;
    ``render_env_exports`` writes the PATH line)."""
    env = {"SLURM_CONF": str(layout.slurm_conf), "SLURM_DL_TESTBED_SLURM": slurm}
    if layout.site_config.is_file():
        env["SLURM_DL_CONFIG"] = str(layout.site_config.resolve())
    if bin_dir is not None:
        env["PATH_PREFIX"] = str(bin_dir)
    return env


def render_env_exports(env: dict[str, str]) -> str:
    """``export K=V`` lines, shell-quoted, for ``eval "$(slurm-dl testbed env --dir DIR)"``;
    ``PATH_PREFIX`` becomes ``export PATH=PREFIX:"$PATH"``."""
    lines = [f"export {k}={shlex.quote(v)}\n" for k, v in sorted(env.items()) if k != "PATH_PREFIX"]
    if env.get("PATH_PREFIX"):
        lines.append(f'export PATH={shlex.quote(env["PATH_PREFIX"])}:"$PATH"\n')
    return "".join(lines)
