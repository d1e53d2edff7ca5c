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
import importlib.util
import os
import time
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

from ..errors import JobNotFoundError, SlurmError, SlurmNotInstalledError, SlurmUnavailableError
from ..model import ClusterSnapshot, Job, JobState, Node, Partition, Topology
from .cli_backend import CliBackend, with_node_gpu_types, with_site_factors
from .parse import job_from_squeue
from .protocol import SiteFactorResult, group_by_value

MIN_PYSLURM = (22, 5)


def reachable_slurm_conf(env: Mapping[str, str] | None = None) -> Path | None:
    env = os.environ if env is None else env
    cand = Path(env["SLURM_CONF"]) if env.get("SLURM_CONF") else Path("/etc/slurm/slurm.conf")
    return cand if cand.is_file() else None


def pyslurm_unavailable_reason(env: Mapping[str, str] | None = None) -> str | None:
    """Why PyslurmBackend cannot be used here, or None. Never imports pyslurm."""
    if importlib.util.find_spec("pyslurm") is None:
        return "pyslurm is not installed (pip install 'slurm-dl[pyslurm]' with a pyslurm built for this Slurm)"
    if reachable_slurm_conf(env) is None:
        return "no slurm.conf reachable (set SLURM_CONF or create /etc/slurm/slurm.conf); importing pyslurm would abort"
    return None


def _import_pyslurm(env: Mapping[str, str] | None) -> Any:
    reason = pyslurm_unavailable_reason(env)
    if reason:
        raise SlurmNotInstalledError(f"pyslurm backend: {reason}")
    if env is not None and env.get("SLURM_CONF"):
        os.environ["SLURM_CONF"] = env["SLURM_CONF"]  # libslurm reads it from the process environment
    try:
        mod = importlib.import_module("pyslurm")
    except ImportError as e:
        raise SlurmNotInstalledError(f"pyslurm backend: import failed ({e}); its version must match Slurm's") from None
    version = tuple(int(x) for x in str(getattr(mod, "__version__", "0.0")).split(".")[:2] if x.isdigit())
    if version < MIN_PYSLURM or not hasattr(mod, "Jobs"):
        raise SlurmNotInstalledError(
            f"pyslurm backend: pyslurm {getattr(mod, '__version__', '?')} lacks the 22.5+ API (pyslurm.Jobs)"
        )
    return mod


def _gres_count(value: Any) -> int:
    if isinstance(value, Mapping):
        value = value.get("count", 0)
    try:
        return int(value)
    except (TypeError, ValueError):
        return 0


def _gres_string(value: Any) -> str:
    """pyslurm's GRES dict ({'gpu:h100': 2}, {'gpu': 3}, or {'gpu:h100': {'count': 2, ...}})
    -> Slurm's ``gres:gpu:h100:2`` form that the squeue parser reads."""
    if not value:
        return ""
    if isinstance(value, str):
        return value
    return ",".join(f"gres:{k}:{_gres_count(v)}" for k, v in dict(value).items())


def _allocated_gres(job: Any) -> list[str]:
    """Per-node allocated GRES of a running job, from ``get_resource_layout_per_node()``."""
    layout_fn = getattr(job, "get_resource_layout_per_node", None)
    if layout_fn is None:
        return []
    try:
        layout = layout_fn() or {}
    except Exception:  # pending jobs have no layout
        return []
    return [_gres_string(node.get("gres")).replace("gres:", "") for node in layout.values() if node.get("gres")]


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

    def __init__(self, env: Mapping[str, str] | None = None):
        self._pyslurm = _import_pyslurm(env)
        self._cli = CliBackend(env)

    def _call(self, what: str, job_id: int | None, fn, *args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except Exception as e:  # pyslurm.RPCError carries Slurm's message and errno
            msg = str(e)
            if "Invalid job id" in msg:
                raise JobNotFoundError(f"pyslurm {what}: {msg}") from None
            if "Unable to contact slurm controller" in msg or "Connection refused" in msg:
                raise SlurmUnavailableError(f"pyslurm {what}: {msg}") from None
            raise SlurmError(f"pyslurm {what}{f' job {job_id}' if job_id else ''}: {msg}") from None

    def _job(self, job_id: int) -> Any:
        return self._pyslurm.Job(int(job_id))

    # -- reading --------------------------------------------------------------------------
    def jobs(self, states: Iterable[JobState] | None = None) -> list[Job]:
        loaded = self._call("Jobs.load", None, self._pyslurm.Jobs.load)
        wanted = set(states) if states is not None else None
        out = []
        for pj in loaded.values():
            job = job_from_squeue(job_record_from_pyslurm(pj))
            keep = (not job.state.finished and job.state is not JobState.OTHER) if wanted is None else job.state in wanted
            if keep:
                out.append(job)
        return out

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
    def submit(self, script: str | Path, args: Sequence[str] = (), env: Mapping[str, str] | None = None) -> int:
        return self._cli.submit(script, args, env)

    def cancel(self, job_id: int) -> None:
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

    def hold(self, job_id: int) -> None:
        self._call("hold", job_id, self._job(job_id).hold, mode="user")

    def release(self, job_id: int) -> None:
        self._call("release", job_id, self._job(job_id).release)
