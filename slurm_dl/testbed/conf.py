"""Pure rendering of the test cluster's Slurm configuration: parameters in, file text out.

No I/O here: ``TestbedLayout`` names every path under the state directory and ``ClusterParams``
fixes node count, GPUs and ports; the ``render_*`` functions turn them into slurm.conf,
gres.conf, topology.conf and a pass-through job_submit.lua.
"""

from __future__ import annotations

import hashlib
import shlex
from dataclasses import dataclass, field
from pathlib import Path

from ..core.hostlist import compress_hostlist

# Per-node shape the fake cluster claims (SlurmdParameters=config_overrides lets slurmd claim more
# than the machine has). Matches site-configs/testbed.toml.
DEFAULT_CPUS_PER_NODE = 32
DEFAULT_MEMORY_MB_PER_NODE = 256000
PARTITION = "gpu"
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
        return [self.conf_dir, self.log_dir, self.pid_dir, self.spool_dir, self.state_save_dir, self.dev_dir]


@dataclass(frozen=True)
class ClusterParams:
    """What the cluster looks like and where it listens."""

    nodes: int
    gpus_per_node: int
    gpu_type: str
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

    def __post_init__(self) -> None:
        if not 1 <= self.nodes <= 99:
            raise ValueError(f"nodes must be 1..99, got {self.nodes}")
        if not 0 <= self.gpus_per_node <= 64:
            raise ValueError(f"gpus_per_node must be 0..64, got {self.gpus_per_node}")
        if not self.gpu_type.isidentifier():
            raise ValueError(f"gpu_type must be a plain name like 'h100', got {self.gpu_type!r}")
        if len(self.node_ports) != self.nodes:
            raise ValueError(f"need one port per node: {self.nodes} nodes, {len(self.node_ports)} ports")
        if (self.dbd_port is None) != (self.mysql_port is None):
            raise ValueError("accounting needs both dbd_port and mysql_port")
        ports = (self.ctld_port, *self.node_ports, *((self.dbd_port, self.mysql_port) if self.accounting else ()))
        if len(set(ports)) != len(ports):
            raise ValueError(f"ports must be distinct, got {ports}")

    @property
    def node_names(self) -> list[str]:
        return node_names(self.nodes)

    @property
    def accounting(self) -> bool:
        return self.dbd_port is not None

    def to_dict(self) -> dict:
        return {
            "nodes": self.nodes,
            "gpus_per_node": self.gpus_per_node,
            "gpu_type": self.gpu_type,
            "ctld_port": self.ctld_port,
            "node_ports": list(self.node_ports),
            "cpus_per_node": self.cpus_per_node,
            "memory_mb_per_node": self.memory_mb_per_node,
            "job_submit_lua": self.job_submit_lua,
            "extra_conf": list(self.extra_conf),
            "dbd_port": self.dbd_port,
            "mysql_port": self.mysql_port,
            "slurm": self.slurm,
        }

    @classmethod
    def from_dict(cls, d: dict) -> "ClusterParams":
        return cls(
            nodes=int(d["nodes"]),
            gpus_per_node=int(d["gpus_per_node"]),
            gpu_type=str(d["gpu_type"]),
            ctld_port=int(d["ctld_port"]),
            node_ports=tuple(int(p) for p in d["node_ports"]),
            cpus_per_node=int(d.get("cpus_per_node", DEFAULT_CPUS_PER_NODE)),
            memory_mb_per_node=int(d.get("memory_mb_per_node", DEFAULT_MEMORY_MB_PER_NODE)),
            job_submit_lua=bool(d.get("job_submit_lua", True)),
            extra_conf=tuple(d.get("extra_conf", ())),
            dbd_port=d.get("dbd_port"),
            mysql_port=d.get("mysql_port"),
            slurm=str(d.get("slurm", "22.05")),
        )


def node_names(count: int) -> list[str]:
    """gpu01, gpu02, … (two digits, as in site-configs/testbed.toml)."""
    return [f"gpu{i:02d}" for i in range(1, count + 1)]


def leaf_switches(names: list[str]) -> list[list[str]]:
    """Split nodes into two leaf switches (first half, second half); one leaf for a single node."""
    if len(names) <= 1:
        return [list(names)]
    half = (len(names) + 1) // 2
    return [names[:half], names[half:]]


def cluster_name(root: Path) -> str:
    """A short name unique to the state directory (Slurm allows ≤ 40 lowercase chars)."""
    digest = hashlib.sha1(str(root).encode()).hexdigest()[:8]
    return f"slurmdl{digest}"


def render_slurm_conf(layout: TestbedLayout, params: ClusterParams) -> str:
    gres = f"Gres=gpu:{params.gpu_type}:{params.gpus_per_node}" if params.gpus_per_node else ""
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
        "MaxJobCount=50000",
        "MaxArraySize=10001",
        f"RequeueExit={REQUEUE_EXIT_CODE}",
        "SchedulerType=sched/backfill",
        "SchedulerParameters=bf_interval=2,sched_interval=2,max_switch_wait=300,default_queue_depth=1000",
        "SelectType=select/cons_tres",
        "SelectTypeParameters=CR_Core_Memory",
        f"DefMemPerCPU={def_mem_per_cpu}",
        "GresTypes=gpu",
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
    lines.extend(params.extra_conf)
    lines.append("")
    names = params.node_names
    for name, port in zip(names, params.node_ports):
        lines.append(
            f"NodeName={name} NodeHostname={name} NodeAddr=127.0.0.1 Port={port} "
            f"CPUs={params.cpus_per_node} RealMemory={params.memory_mb_per_node} {gres} State=UNKNOWN".replace(
                "  ", " "
            )
        )
    lines.append(
        f"PartitionName={PARTITION} Nodes={compress_hostlist(names)} Default=YES MaxTime=INFINITE State=UP"
    )
    return "\n".join(lines) + "\n"


def render_gres_conf(layout: TestbedLayout, params: ClusterParams) -> str:
    lines = ["# Fake GPUs: character devices (major 1, minor 3, like /dev/null) so Slurm sets CUDA_VISIBLE_DEVICES.",
             "AutoDetect=off"]
    if params.gpus_per_node:
        last = params.gpus_per_node - 1
        files = f"{layout.dev_dir}/nvidia[0-{last}]" if last else f"{layout.dev_dir}/nvidia0"
        lines.append(f"Name=gpu Type={params.gpu_type} File={files}")
    return "\n".join(lines) + "\n"


def render_topology_conf(params: ClusterParams) -> str:
    leaves = leaf_switches(params.node_names)
    lines = ["# Two leaf switches under one spine."]
    for i, members in enumerate(leaves, start=1):
        lines.append(f"SwitchName=leaf{i} Nodes={compress_hostlist(members)}")
    lines.append(f"SwitchName=spine Switches=leaf[1-{len(leaves)}]" if len(leaves) > 1 else "SwitchName=spine Switches=leaf1")
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


def render_env(layout: TestbedLayout, slurm: str = "22.05", bin_dir: Path | None = None) -> dict[str, str]:
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
