"""Pure: one job's GPU utilisation over its whole life, folded sample by sample.

The prioritizer keeps one :class:`JobUtilisationSummary` per job in its store (so a restarted
daemon neither resets a job's idle clock nor warns it twice) and shows it in ``slurm-dl explain``.
Samples are folded at most once: ``gpu_seen`` holds, per GPU (``node/index``), the time of the
newest sample already counted, so re-reading an exposition file (or the same window after a
restart) adds nothing.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any, Iterable

from .samples import JobGpuSample


def gpu_key(sample: JobGpuSample) -> str:
    return f"{sample.node}/{sample.gpu}"


def sample_is_idle(sample: JobGpuSample, threshold_percent: float) -> bool:
    """The idle rule: utilisation at most the threshold AND no process holding the GPU."""
    return sample.util_percent <= threshold_percent and sample.processes == 0


@dataclass(slots=True)
class JobUtilisationSummary:
    """What the prioritizer knows about one job's GPUs (times are Unix seconds)."""

    job_id: int
    samples: int = 0
    util_sum: float = 0.0
    peak_util_percent: float = 0.0
    peak_gpu_mem_bytes: int = 0
    first_sample_at: float | None = None
    last_sample_at: float | None = None
    last_busy_at: float | None = None
    idle_since: float | None = None
    verdict: str = "ok"
    warned_at: float | None = None
    action: str | None = None
    action_at: float | None = None
    updated_at: float = 0.0
    gpu_seen: dict[str, float] = field(default_factory=dict)

    @property
    def mean_util_percent(self) -> float:
        return self.util_sum / self.samples if self.samples else 0.0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "JobUtilisationSummary":
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in known})

    def explained(self) -> dict[str, Any]:
        """The JSON-able part shown in explanations (``slurm-dl explain``)."""
        return {
            "samples_seen": self.samples,
            "lifetime_mean_util_percent": round(self.mean_util_percent, 1),
            "peak_util_percent": round(self.peak_util_percent, 1),
            "peak_gpu_mem_bytes": self.peak_gpu_mem_bytes,
            "last_busy_at": self.last_busy_at,
            "idle_since": self.idle_since,
            "warned_at": self.warned_at,
            "action": self.action,
            "action_at": self.action_at,
        }


def fold_samples(
    summary: JobUtilisationSummary, samples: Iterable[JobGpuSample], idle_threshold_percent: float
) -> int:
    """Count every sample of ``summary.job_id`` newer than its GPU's last counted one; returns how many."""
    added = 0
    for s in sorted(
        (s for s in samples if s.job_id == summary.job_id), key=lambda s: (s.time, s.node, s.gpu)
    ):
        key = gpu_key(s)
        if s.time <= summary.gpu_seen.get(key, float("-inf")):
            continue
        summary.gpu_seen[key] = s.time
        summary.samples += 1
        summary.util_sum += s.util_percent
        summary.peak_util_percent = max(summary.peak_util_percent, s.util_percent)
        summary.peak_gpu_mem_bytes = max(summary.peak_gpu_mem_bytes, int(s.mem_used_bytes))
        if summary.first_sample_at is None or s.time < summary.first_sample_at:
            summary.first_sample_at = s.time
        if summary.last_sample_at is None or s.time > summary.last_sample_at:
            summary.last_sample_at = s.time
        if not sample_is_idle(s, idle_threshold_percent):
            summary.last_busy_at = (
                s.time if summary.last_busy_at is None else max(summary.last_busy_at, s.time)
            )
        added += 1
    return added


def carry_idle_since(
    samples: Iterable[JobGpuSample], previous: Iterable[JobGpuSample], idle_threshold_percent: float
) -> list[JobGpuSample]:
    """``samples`` with ``idle_since`` set: an idle sample continues the idle spell of the same
    job's same GPU in ``previous`` (the agent's last file), or starts one at its own time; a busy
    sample, or one of a GPU no job holds, has none."""
    before = {(p.job_id, p.node, p.gpu): p for p in previous}
    out = []
    for s in samples:
        since = None
        if s.job_id and sample_is_idle(s, idle_threshold_percent):
            prev = before.get((s.job_id, s.node, s.gpu))
            since = (
                prev.idle_since
                if prev is not None and prev.idle_since is not None and prev.time <= s.time
                else s.time
            )
        out.append(replace(s, idle_since=since))
    return out
