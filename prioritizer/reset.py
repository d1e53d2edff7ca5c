"""``slurm-dl prioritizer reset``: set back to 0 every SiteFactor the prioritizer set.

For uninstalling, or before handing priorities back to the site's own weights: the daemon must
be stopped first (a running one sets them again on its next cycle). The jobs come from the
store's SiteFactor record, limited to those Slurm still has pending or running; with
``all_pending`` every pending job with a non-zero SiteFactor is reset too (a store that was
lost or replaced); without it, those are listed in ``unknown`` so the command can say they were
left. Each reset is recorded as a decision, so ``slurm-dl explain`` shows it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

from slurm_dl.core.errors import SlurmError
from slurm_dl.core.model import ClusterSnapshot
from slurm_dl.store import Store

REASON = "SiteFactor reset to 0 (slurm-dl prioritizer reset)"


class ResetBackend(Protocol):
    def snapshot(self) -> ClusterSnapshot: ...
    def set_site_factor(self, values: dict[int, int]) -> Any: ...


@dataclass
class ResetReport:
    reset: list[int] = field(default_factory=list)
    gone: list[int] = field(default_factory=list)  # recorded, but Slurm no longer has the job
    failed: dict[int, str] = field(default_factory=dict)
    dry_run: bool = False
    unknown: list[int] = field(
        default_factory=list
    )  # pending, a SiteFactor the store does not know: left

    def to_dict(self) -> dict[str, Any]:
        return {
            "reset": self.reset,
            "gone": self.gone,
            "failed": {str(k): v for k, v in self.failed.items()},
            "dry_run": self.dry_run,
            "unknown": self.unknown,
        }


def reset_site_factors(
    backend: ResetBackend, store: Store, *, all_pending: bool = False, dry_run: bool = False
) -> ResetReport:
    recorded = store.site_factors()
    snap = backend.snapshot()
    active = {j.job_id: j for j in snap.jobs if j.pending or j.running}
    targets = {j for j in recorded if j in active}
    if all_pending:
        targets |= {j.job_id for j in active.values() if j.pending and j.site_factor}
    report = ResetReport(
        gone=sorted(j for j in recorded if j not in active),
        dry_run=dry_run,
        unknown=sorted(
            j.job_id
            for j in active.values()
            if j.pending and j.site_factor and j.job_id not in targets
        ),
    )
    if dry_run:
        report.reset = sorted(targets)
        return report
    pending = sorted(j for j in targets if active[j].pending)
    running = sorted(j for j in targets if not active[j].pending)
    for group in (pending, running):
        if not group:
            continue
        try:
            result = backend.set_site_factor(dict.fromkeys(group, 0))
        except SlurmError as e:
            for j in group:  # one refusal (say, a running job) must not stop the others
                try:
                    backend.set_site_factor({j: 0})
                    report.reset.append(j)
                except SlurmError as e1:
                    report.failed[j] = str(e1).splitlines()[0] if str(e1) else str(e)
            continue
        missing = set(getattr(result, "missing", ()))
        report.reset += [j for j in group if j not in missing]
        report.gone += [j for j in group if j in missing]
    forget = (set(recorded) | set(report.reset)) - set(report.failed)
    store.forget_site_factors(sorted(forget), snap.taken_at, REASON)
    report.reset.sort()
    report.gone.sort()
    return report
