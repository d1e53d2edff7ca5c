"""Optional backend on pyslurm's 22.5+ object API (``pip install 'slurm-dl[pyslurm]'``).

pyslurm X.Y only builds against Slurm X.Y, and ``import pyslurm`` kills the process (uncatchable)
when no slurm.conf is reachable; so the import is lazy and guarded by ``pyslurm_unavailable_reason``.

Jobs are read and written through pyslurm (``Jobs.load()``, ``Job.modify``, ``Job.requeue``,
``Job.send_signal``, ``Job.hold/release``, ``Job.cancel``). What pyslurm has no call for —
the switch topology, sprio's SiteFactor, partitions, nodes, and ``sbatch`` with its full option
parser — goes through the CLI backend, so both backends agree on those by construction.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import importlib.util
import os
import sys
import time
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

from ..core.errors import (
    JobBusyError,
    JobNotFoundError,
    JobPendingError,
    SlurmError,
    SlurmNotInstalledError,
    SlurmUnavailableError,
)
from ..core.jobid import JobRef
from ..core.model import ClusterSnapshot, Job, JobState, Node, Partition, Topology
from .cli_backend import CliBackend, with_node_gpu_types, with_site_factors
from .gpu_alloc import GpuAllocation
from .parse import job_from_squeue
from .protocol import JobEnd, PendingSize, SiteFactorResult, group_by_value

MIN_PYSLURM = (22, 5)
# Slurm releases for which pyslurm has a tag (pyslurm X.Y builds and runs against Slurm X.Y only).
PYSLURM_TAGS = ("22.05", "23.02", "23.11", "24.05", "24.11", "25.05", "25.11")


def slurm_release_of_pyslurm(version: str) -> str | None:
    """pyslurm's version names its Slurm release: ``22.5.3`` -> ``22.05``, ``24.11.0`` -> ``24.11``."""
    parts = version.split(".")
    if len(parts) < 2 or not (parts[0].isdigit() and parts[1].isdigit()):
        return None
    return f"{int(parts[0]):02d}.{int(parts[1]):02d}"


def pyslurm_tag(slurm_release: str) -> str:
    """The pyslurm version line for a Slurm release: ``22.05`` -> ``22.5``, ``24.11`` -> ``24.11``."""
    major, _, minor = slurm_release.partition(".")
    return f"{int(major)}.{int(minor)}" if major.isdigit() and minor.isdigit() else slurm_release


CHOOSE_CLI = 'or choose the cli backend: --backend cli, or [slurm] backend = "cli"'


def build_hint(slurm_release: str | None) -> str:
    """How to get a pyslurm that serves ``slurm_release`` (None: scontrol did not answer)."""
    tag = f"pyslurm {pyslurm_tag(slurm_release)}.x" if slurm_release else "the pyslurm release"
    return (
        f"  build {tag} against this Slurm's libslurm (the admin guide's\n"
        f"  'Slurm backend' section says how),\n  {CHOOSE_CLI}"
    )


def release_mismatch(pyslurm_version: str | None, slurm_release: str) -> str | None:
    """Why the installed pyslurm cannot serve a cluster of ``slurm_release``, or None. Pure."""
    if slurm_release not in PYSLURM_TAGS:
        return f"Slurm here is {slurm_release}: no pyslurm exists for it;\n  {CHOOSE_CLI}"
    if pyslurm_version is None:
        return None
    built_for = slurm_release_of_pyslurm(pyslurm_version)
    if built_for != slurm_release:
        return (
            f"pyslurm {pyslurm_version} is installed, built for Slurm {built_for or '?'},\n"
            f"  but Slurm here is {slurm_release}:\n{build_hint(slurm_release)}"
        )
    return None


def not_installed(slurm_release: str | None) -> str:
    """The error where pyslurm is missing. Pure."""
    where = f"Slurm here is {slurm_release}" if slurm_release else "Slurm did not answer"
    return f"pyslurm is not installed ({where}):\n{build_hint(slurm_release)}"


def reachable_slurm_conf(env: Mapping[str, str] | None = None) -> Path | None:
    env = os.environ if env is None else env
    cand = Path(env["SLURM_CONF"]) if env.get("SLURM_CONF") else Path("/etc/slurm/slurm.conf")
    return cand if cand.is_file() else None


def pyslurm_unavailable_reason(env: Mapping[str, str] | None = None) -> str | None:
    """Why PyslurmBackend cannot be used here, or None. Never imports pyslurm (its version and
    the cluster's release are read without it: a mismatched libslurm must not be loaded)."""
    installed = importlib.util.find_spec("pyslurm") is not None
    release = _cluster_release(env)
    if reachable_slurm_conf(env) is None:
        if not installed:
            return not_installed(release)
        return (
            "no slurm.conf reachable (importing pyslurm would abort):\n"
            "  set SLURM_CONF, or create /etc/slurm/slurm.conf"
        )
    if release is not None:
        mismatch = release_mismatch(_installed_version() if installed else None, release)
        if mismatch:
            return mismatch
    if not installed:
        return not_installed(release)
    return None


def _installed_version() -> str | None:
    try:
        return importlib.metadata.version("pyslurm")
    except importlib.metadata.PackageNotFoundError:
        return None


def _cluster_release(env: Mapping[str, str] | None) -> str | None:
    """The release of the Slurm clients (``scontrol version``); None when they are missing."""
    try:
        return CliBackend(env).dialect().release
    except SlurmError:
        return None


# The slurm.conf libslurm was initialised with in this process (pyslurm's import reads SLURM_CONF).
_LOADED_CONF: str | None = None


def _import_pyslurm(env: Mapping[str, str] | None) -> Any:
    reason = pyslurm_unavailable_reason(env)
    if reason:
        raise SlurmNotInstalledError(f"pyslurm backend: {reason}")
    if env is not None and env.get("SLURM_CONF"):
        os.environ["SLURM_CONF"] = env[
            "SLURM_CONF"
        ]  # libslurm reads it from the process environment
    global _LOADED_CONF
    first = "pyslurm" not in sys.modules
    try:
        mod = importlib.import_module("pyslurm")
    except ImportError as e:
        raise SlurmNotInstalledError(
            f"pyslurm backend: import failed ({e}); its version must match Slurm's"
        ) from None
    version = tuple(
        int(x) for x in str(getattr(mod, "__version__", "0.0")).split(".")[:2] if x.isdigit()
    )
    if version < MIN_PYSLURM or not hasattr(mod, "Jobs"):
        raise SlurmNotInstalledError(
            f"pyslurm backend: pyslurm {getattr(mod, '__version__', '?')} lacks the 22.5+ API (pyslurm.Jobs)"
        )
    if first:
        _LOADED_CONF = str(reachable_slurm_conf(env))
    return mod


def _gres_count(value: Any) -> int:
    if isinstance(value, Mapping):
        value = value.get("count", 0)
    try:
        return int(value)
    except (TypeError, ValueError):
        return 0


def _gres_string(value: Any) -> str:
    """pyslurm's GRES dict ({'gpu:h100': 2}, {'gpu': 3}, {'gpu:h100': {'count': 2, ...}}; 24.11:
    {'gres/gpu': 8}) -> Slurm's ``gres:gpu:h100:2`` form that the squeue parser reads."""
    if not value:
        return ""
    if isinstance(value, str):
        return value
    return ",".join(
        f"gres:{str(k).removeprefix('gres/')}:{_gres_count(v)}" for k, v in dict(value).items()
    )


def _allocated_gres(job: Any) -> list[str]:
    """Per-node allocated GRES of a running job, from ``get_resource_layout_per_node()``."""
    layout_fn = getattr(job, "get_resource_layout_per_node", None)
    if layout_fn is None:
        return []
    try:
        layout = layout_fn() or {}
    except Exception:  # pending jobs have no layout
        return []
    return [
        _gres_string(node.get("gres")).replace("gres:", "")
        for node in layout.values()
        if node.get("gres")
    ]


def job_record_from_pyslurm(job: Any) -> dict[str, Any]:
    """A pyslurm.Job -> the ``squeue --json`` record shape, so one parser serves both backends.

    pyslurm's Job has no ``tres_per_job`` (``--gpus=N``) property: such a job's GPU count is known
    here only once it runs (from its per-node resource layout).
    """
    g = lambda name, default=None: getattr(job, name, default)  # noqa: E731
    running = str(g("state") or "").upper() in ("RUNNING", "COMPLETING", "SUSPENDED")
    return {
        "job_id": g("id"),
        "user_name": g("user_name"),
        "account": g("account"),
        "name": g("name"),
        "partition": g("partition"),
        "job_state": g("state"),
        "state_reason": g("state_reason"),
        "node_count": g("num_nodes"),
        "tres_per_node": _gres_string(g("gres_per_node")),
        "tres_per_job": "",
        "gres_detail": _allocated_gres(job) if running else [],
        "nodes": g("allocated_nodes"),
        "time_limit": g("time_limit"),
        "submit_time": g("submit_time"),
        "eligible_time": g("eligible_time"),
        "start_time": g("start_time"),
        "deadline": g("deadline"),
        "restart_cnt": g("requeue_count", 0),
        "priority": g("priority"),
        "nice": g("nice"),
        "comment": g("comment"),
        "admin_comment": g("admin_comment"),
        "qos": g("qos"),
    }


class PyslurmBackend:
    name = "pyslurm"

    def __init__(self, env: Mapping[str, str] | None = None, **cli_options: Any):
        """``cli_options``: of the CLI backend that reads what pyslurm does not (CliBackend's
        keywords: ``timeout``, ``topology_ttl_s``)."""
        self._pyslurm = _import_pyslurm(env)
        self._cli = CliBackend(env, **cli_options)
        conf = str(reachable_slurm_conf(env))
        if _LOADED_CONF is not None and _LOADED_CONF != conf:
            # libslurm reads one slurm.conf per process; re-initialising it crashes 24.11.
            raise SlurmError(
                f"pyslurm backend: this process already uses pyslurm for {_LOADED_CONF}; pyslurm serves "
                f"one cluster per process: use another process (or the cli backend) for {conf}"
            )

    def _call(self, what: str, job_id: int | None, fn, *args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except Exception as e:  # pyslurm.RPCError carries Slurm's message and errno
            msg = str(e)
            if "Invalid job id" in msg:
                raise JobNotFoundError(f"pyslurm {what}: {msg}") from None
            if "Unable to contact slurm controller" in msg or "Connection refused" in msg:
                raise SlurmUnavailableError(f"pyslurm {what}: {msg}") from None
            if "can not be altered now" in msg or "transitional state" in msg:
                raise JobBusyError(f"pyslurm {what}: {msg}") from None
            if "pending execution" in msg:
                raise JobPendingError(f"pyslurm {what}: {msg}") from None
            raise SlurmError(f"pyslurm {what}{f' job {job_id}' if job_id else ''}: {msg}") from None

    def _job(self, job_id: int) -> Any:
        return self._pyslurm.Job(int(job_id))

    # -- reading --------------------------------------------------------------------------
    def jobs(self, states: Iterable[JobState] | None = None) -> list[Job]:
        loaded = self._call("Jobs.load", None, self._pyslurm.Jobs.load)
        wanted = set(states) if states is not None else None
        out, unknown = [], []
        for pj in loaded.values():
            record = job_record_from_pyslurm(pj)
            job = job_from_squeue(record)
            keep = (
                (not job.state.finished and job.state is not JobState.OTHER)
                if wanted is None
                else job.state in wanted
            )
            if keep:
                out.append(job)
                if not record["tres_per_node"] and not record["gres_detail"]:
                    unknown.append(job)
        return self._with_cli_gpus(out, unknown, states)

    def _with_cli_gpus(self, jobs: list[Job], unknown: list[Job], states) -> list[Job]:
        """GPUs pyslurm's Job cannot show: a ``--gpus=N`` job has no tres_per_job property, and
        from 24.11 a running job's per-node layout is empty. One squeue call fills them in."""
        if not unknown:
            return jobs
        by_id = {j.job_id: j for j in self._cli.jobs(states)}
        for job in unknown:
            seen = by_id.get(job.job_id)
            if seen is not None:
                job.num_gpus, job.gpus_per_node, job.gpu_type = (
                    seen.num_gpus,
                    seen.gpus_per_node,
                    seen.gpu_type,
                )
                job.num_nodes = job.num_nodes or seen.num_nodes
        return jobs

    @property
    def call_s(self) -> float:
        return self._cli.call_s  # the waits on Slurm's commands; libslurm's calls are not counted

    def slurm_release(self) -> str:
        return self._cli.slurm_release()

    def gpu_allocations(self, node: str | None = None) -> list[GpuAllocation]:
        return self._cli.gpu_allocations(node)

    def nodes(self, topology: Topology | None = None) -> list[Node]:
        return self._cli.nodes(topology)

    def partitions(self) -> list[Partition]:
        return self._cli.partitions()

    def topology(self) -> Topology:
        return self._cli.topology()

    def site_factors(self) -> dict[int, int]:
        return self._cli.site_factors()

    def snapshot(self, now: float | None = None) -> ClusterSnapshot:
        taken_at = time.time() if now is None else float(now)
        topo = self.topology()
        nodes = self.nodes(topo)
        jobs = with_node_gpu_types(with_site_factors(self.jobs(), self.site_factors()), nodes)
        return ClusterSnapshot(taken_at, jobs, nodes, self.partitions(), topo)

    # -- writing --------------------------------------------------------------------------
    def submit(
        self, script: str | Path, args: Sequence[str] = (), env: Mapping[str, str] | None = None
    ) -> int:
        return self._cli.submit(script, args, env)

    def cancel(self, job_id: int | JobRef) -> None:
        if isinstance(job_id, JobRef):
            if not job_id.plain:  # array tasks, a hetjob component: scancel takes Slurm's own form
                return self._cli.cancel(job_id)
            job_id = job_id.job_id
        # pyslurm's cancel reports nothing for an unknown id: load the job first (raises for one).
        self._call("load", job_id, self._pyslurm.Job.load, int(job_id))
        self._call("cancel", job_id, self._job(job_id).cancel)

    def set_site_factor(self, factors: Mapping[int, int]) -> SiteFactorResult:
        missing, calls = [], 0
        for value, ids in group_by_value(factors).items():
            for job_id in ids:
                calls += 1
                change = self._pyslurm.JobSubmitDescription(site_factor=value)
                try:
                    self._call("modify", job_id, self._job(job_id).modify, change)
                except JobNotFoundError:
                    missing.append(job_id)
        return SiteFactorResult(len(factors) - len(missing), calls, tuple(sorted(missing)))

    def signal_batch(self, job_id: int, signal: str = "USR2") -> None:
        sig = signal.upper()
        sig = sig if sig.startswith("SIG") else f"SIG{sig}"
        self._call("send_signal", job_id, self._job(job_id).send_signal, sig, steps="batch")

    def signal_steps(self, job_id: int, signal: str = "USR2") -> None:
        sig = signal.upper()
        sig = sig if sig.startswith("SIG") else f"SIG{sig}"
        self._call("send_signal", job_id, self._job(job_id).send_signal, sig, steps="children")

    def set_comment(self, job_id: int, text: str) -> None:
        change = self._pyslurm.JobSubmitDescription(comment=text)
        self._call("modify", job_id, self._job(job_id).modify, change)

    def requeue(self, job_id: int) -> None:
        self._call("requeue", job_id, self._job(job_id).requeue)

    def set_partition(self, job_id: int, partition: str) -> None:
        self._cli.set_partition(job_id, partition)

    def set_features(self, job_id: int, features: str) -> None:
        self._cli.set_features(job_id, features)

    def set_nodes(self, job_id: int, nodes: str) -> None:
        self._cli.set_nodes(job_id, nodes)

    def requeue_hold(self, job_id: int) -> None:
        self._cli.requeue_hold(job_id)

    def set_power(self, nodes: Sequence[str], up: bool) -> None:
        self._cli.set_power(nodes, up)

    def reserved_nodes(self, now: float, within_s: float) -> set[str]:
        return self._cli.reserved_nodes(now, within_s)

    def resize_pending(self, job_id: int, size: PendingSize) -> None:
        self._cli.resize_pending(job_id, size)

    def job_end(self, job_id: int) -> JobEnd:
        return self._cli.job_end(job_id)  # the exit signal and end time as scontrol prints them

    def hold(self, job_id: int) -> None:
        # Admin hold, as `scontrol hold` by root (the CLI backend). Also: pyslurm 22.5.3's
        # hold(mode="user") writes through a null pointer and kills the process.
        self._call("hold", job_id, self._job(job_id).hold)

    def release(self, job_id: int) -> None:
        self._call("release", job_id, self._job(job_id).release)
