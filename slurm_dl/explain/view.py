"""``slurm-dl explain`` for people: a job's place in the queue and why, in words and numbers.

Pure. Input: the job's stored explanation (:func:`slurm_dl.core.explain.explain_job`), the same
cycle's explanations of every other job (the queue), and what the caller read live (Slurm's
start estimate, free GPUs per node, recorded preemptions). Output: :func:`explain_view`, one
JSON-able dict (1-based ranks); :func:`explain_text`, the same numbers as lines of at most 80
characters; :func:`one_line`, the summary ``dlsubmit status`` shows.

Contributions are ``weight × score`` rounded to 4 decimals and each tier's total is the sum of
the rounded contributions shown, so what is printed adds up.
"""

from __future__ import annotations

import textwrap
import time
from typing import Any, Iterable, Mapping

from ..core.checkpoint_time import is_late_requeue, is_lost_work
from ..core.explain import utilisation_lines
from ..core.fairness import yielded_to
from ..core.steering import unscaled_limit_words
from .start import (
    clock,
    duration,
    earliest_fit,
    restart_words,
    start_estimate,
    start_for_people,
    step_outlook,
    where,
)

__all__ = ["earliest_fit"]  # (its home is .start; callers of this module's older name keep it)

WIDTH = 80
_STEP_WORDS = {"submit": "submit time", "job_id": "job id, as both came in the same second"}


def _ordinal(n: int) -> str:
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


def _clock(at: float | None) -> str:
    return "-" if at is None else clock(at)


def _hms(at: float) -> str:
    return time.strftime("%H:%M:%S", time.localtime(at))


_duration = duration


def _gpu_h(gpu_s: float | None) -> str:
    return "-" if gpu_s is None else f"{gpu_s / 3600:.1f} GPU-h"


def contributions(expl: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Per tier: each factor's weight, score, contribution (rounded) and the tier's total."""
    factors = expl.get("factors") or {}
    tiers = expl.get("tiers") or [[name] for name in factors]
    out = []
    for i, names in enumerate(tiers, 1):
        parts = []
        for name in names:
            f = factors.get(name, {})
            weight = float(f.get("weight", 1.0))
            score = f.get("score")
            contribution = round(weight * (score or 0.0), 4)
            parts.append(
                {
                    "factor": name,
                    "weight": weight,
                    "score": score,
                    "contribution": contribution,
                    "words": factor_words(name, f, expl),
                }
            )
        total = round(sum(p["contribution"] for p in parts), 4)
        out.append({"tier": i, "factors": parts, "total": total})
    return out


def _steps_words(f: Mapping[str, Any], expl: Mapping[str, Any]) -> str:
    """A soft-deadline job's deadline factor: boosted, waiting behind best effort, or lost."""
    if expl.get("deadline_demoted"):
        return f"deadline steps not admitted, waits behind best effort: {expl['deadline_demoted']}"
    score = f.get("score")
    promised = expl.get("deadline_step_promised")
    at = f" (step {_clock(promised)})" if promised is not None else ""
    if score is not None and score > 0.5:
        return f"deadline steps: boosted for its promised step{at}"
    if score is not None and score <= 0.0:
        return "deadline steps: no step can be reached any more, comes last"
    return f"deadline steps: waits behind best effort until its promised step{at} nears"


def factor_words(name: str, f: Mapping[str, Any], expl: Mapping[str, Any]) -> str:
    """What a factor means for this job, in plain words."""
    if name == "deadline":
        if expl.get("deadline") is None and expl.get("deadline_steps"):
            return _steps_words(f, expl)
        if expl.get("deadline") is None:
            return "no deadline (the neutral middle)"
        if expl.get("deadline_demoted"):
            return f"deadline {_clock(expl['deadline'])} not admitted, best effort: {expl['deadline_demoted']}"
        slack = expl.get("deadline_slack_s")
        left = (
            ""
            if slack is None
            else (f", {_duration(slack)} to spare" if slack >= 0 else ", cannot make it")
        )
        return f"deadline {_clock(expl['deadline'])}{left}"
    if name == "class":
        w, top = f.get("class_weight"), f.get("class_weight_max")
        return (
            f"class {expl.get('class')}: weight {w:g} of {top:g}"
            if w is not None and top
            else f"class {expl.get('class')}"
        )
    if name == "las":
        th = list(f.get("thresholds") or f.get("thresholds_gpu_s") or [])
        q = f.get("queue")
        unit = "GPU-s" if f.get("service", "gpu-seconds") == "gpu-seconds" else "s of run time"
        if q is None:
            return "least attained service"
        got = f.get("attained")
        text = f"queue {q + 1} of {len(th) + 1}"
        if got is not None:
            text += f", {got:g} {unit} so far"
        if f.get("starvation_promoted"):
            text += ", lifted for waiting long"
        elif got is not None and q < len(th):
            text += f"; next queue after {th[q] - got:g} {unit} more"
        return text
    if name == "fairshare":
        usage = expl.get("account_usage_gpu_s")
        whose = (
            f"account {expl['account']}"
            if expl.get("account")
            else "no account (shared by all jobs without one)"
        )
        return f"{whose}: factor {f.get('factor', 0):.2f}, used {_gpu_h(usage)}"
    if name == "fifo":
        return "first come, first served"
    return f"{name} score"


def _key_step(a: list, b: list) -> tuple[str, Any, Any] | None:
    """The first key field where two jobs differ: (label, value of a, value of b)."""
    for (label, va), (_, vb) in zip(a, b):
        if va != vb:
            return label, va, vb
    return None


def _step_words(label: str, mine: Any, theirs: Any) -> str:
    if label.startswith("tier:"):
        return f"{label[5:].replace('+', ' + ')} ({-mine:.4f} vs {-theirs:.4f})"
    if label.startswith("tiebreak:"):
        return f"{label[9:]}'s tiebreak ({mine} vs {theirs})"
    if label == "submit":
        return f"submit time ({_hms(mine)} vs {_hms(theirs)})"
    return f"{_STEP_WORDS.get(label, label)} ({mine} vs {theirs})"


def _with_sample_age(gpu: Mapping[str, Any] | None, now: float | None) -> Any:
    """The job's GPU-telemetry entry with the age of its newest sample at ``now`` added."""
    if not gpu or now is None or gpu.get("sampled_at") is None:
        return gpu
    return {**gpu, "sample_age_s": round(max(0.0, now - float(gpu["sampled_at"])), 1)}


def explain_view(
    expl: Mapping[str, Any],
    queue: Mapping[Any, Mapping[str, Any]] | None = None,
    *,
    estimate: Mapping[str, Any] | None = None,
    preemptions: Iterable[Mapping[str, Any]] = (),
    free_gpus_per_node: Iterable[int] | None = None,
    now: float | None = None,
    releases: Iterable[tuple[int, Iterable[tuple[float, int]]]] | None = None,
) -> dict[str, Any]:
    """Everything the text shows, as data."""
    queue = {int(k): v for k, v in (queue or {}).items()}
    jid = int(expl["job_id"])
    queue.setdefault(jid, expl)
    rank = expl.get("rank")
    ranked = sorted(
        (e for e in queue.values() if e.get("rank") is not None), key=lambda e: e["rank"]
    )
    view: dict[str, Any] = {
        "job_id": jid,
        "name": expl.get("name"),
        "user": expl.get("user"),
        "account": expl.get("account"),
        "state": expl.get("state"),
        "class": expl.get("class"),
        "num_gpus": expl.get("num_gpus"),
        "num_nodes": expl.get("num_nodes"),
        "time_limit": expl.get("time_limit"),
        "policy": expl.get("policy"),
        "rank": None if rank is None else rank + 1,
        "ranked": expl.get("ranked"),
        "score": expl.get("score"),
        "site_factor": expl.get("site_factor"),
        "tiers": contributions(expl),
        "waiting_for": expl.get("waiting_for") or None,
        "at": expl.get("at"),
        "gpu_utilisation": _with_sample_age(expl.get("gpu_utilisation"), now),
        "factors_at": expl.get("factors_at", expl.get("at")),
        "gpu_types": gpu_type_words(expl.get("gpu_types")),
        "time_limit_note": time_limit_note(expl),
    }
    if expl.get("state") == "PENDING" and rank is not None:
        pending = [e for e in ranked if e.get("state") == "PENDING"]
        ahead = [e for e in pending if e["rank"] < rank]
        view["queue"] = {
            "position": len(ahead) + 1,
            "waiting": len(pending),
            "jobs_ahead": len(ahead),
            "gpus_ahead": sum(int(e.get("num_gpus") or 0) for e in ahead),
            "accounts_ahead": len({e.get("account") for e in ahead}),
        }
    neighbours = {}
    mine = expl.get("order_key") or []
    if rank is not None and mine:
        # A waiting job's neighbours are the waiting jobs next to it, compared only when both keys
        # were built in the same cycle: a running job's key, or one deep in the queue, is rebuilt
        # less often, and comparing keys of two moments would say a different step each time.
        peers = (
            [e for e in ranked if e.get("state") == expl.get("state")]
            if expl.get("state") == "PENDING"
            else ranked
        )
        ids = [int(e["job_id"]) for e in peers]
        at = ids.index(jid) if jid in ids else None
        for side, i in (
            ("after", None if at is None else at - 1),
            ("before", None if at is None else at + 1),
        ):
            other = peers[i] if i is not None and 0 <= i < len(peers) else None
            if other is None or not other.get("order_key"):
                continue
            if other.get("factors_at", other.get("at")) != expl.get("factors_at", expl.get("at")):
                continue
            step = _key_step(mine, other["order_key"])
            if step is None:
                continue
            label, va, vb = step
            neighbours[side] = {
                "job_id": other["job_id"],
                "step": label,
                "this": va,
                "other": vb,
                "tied_on_every_factor": not label.startswith(("tier:", "key:")),
                "words": _step_words(label, va, vb),
            }
    view["ordering"] = neighbours
    view["preemption"] = preemption_words(expl, list(preemptions))
    pending = expl.get("state") == "PENDING"
    n, nodes = int(expl.get("num_gpus") or 0), expl.get("num_nodes") or 1
    fit = earliest_fit(n, releases, now, nodes) if pending else None
    preempting = str(expl.get("waiting_for") or "").startswith("preemption")
    view["estimated_start"] = start_estimate(estimate, now, None if preempting else fit, n, nodes)
    view["deadline_step"] = (
        step_outlook(expl, view["estimated_start"].get("at")) if pending else None
    )
    view["levers"] = levers(expl, view, free_gpus_per_node)
    view["restarts"], view["max_restarts"] = expl.get("restarts"), expl.get("max_restarts")
    view["restart"] = restart_words(view["restarts"], view["max_restarts"], None, pending)
    said = view["estimated_start"].get("source") == "time limits"  # the start line says it
    if fit is not None and now is not None and fit > now and not said:
        view["levers"].append(
            f"{n} GPUs free up on {where(nodes)} by {_clock(fit)[11:]} (in "
            f"{_duration(fit - now)}) if the running jobs use their whole time limit"
        )
    return view


def with_resume(doc: Mapping[str, Any], resumes_from: str | None) -> dict[str, Any]:
    """``doc`` (a view) told the checkpoint the job's next start resumes from: its file name,
    "" when it has none yet, None when not known here (the caller reads the job's own files)."""
    if resumes_from is None:
        return dict(doc)
    waiting = doc.get("state") == "PENDING"
    words = restart_words(doc.get("restarts"), doc.get("max_restarts"), resumes_from, waiting)
    return {**doc, "resumes_from": resumes_from, "restart": words}


_OPEN = ("signalling", "signalled", "requeueing", "planned", "checkpointing", "requeue")
OUTCOMES = {
    "requeued": "requeued by slurm-dl",
    "requeued-self": "it requeued itself",
    "died": "it died on the signal; requeued by slurm-dl",
    "finished": "it ended on its own",
    "abandoned": "it kept running, nothing waited for it any more",
    "refused": "Slurm refused it",
    "skipped": "not signalled, the job was between states",
}
"""A closed preemption's real outcome (the prioritizer's rows), in words."""


def _for_fairness(row: Mapping[str, Any]) -> str:
    """ ", for fair share: it yielded to account B" when the preemption was for fairness."""
    to = yielded_to(str(row.get("reason") or ""))
    return f" for fair share (it yielded to account {to[1]}, below its fair share)" if to else ""


def gpu_type_words(entry: Mapping[str, Any] | None) -> str | None:
    """The GPU types a job accepts, its speed on each with the evidence, and the choice."""
    if not entry or not entry.get("accepted"):
        return None
    speeds = entry.get("speeds") or {}

    def one(t: str) -> str:
        s = speeds.get(t) or {}
        src = s.get("source") or "default"
        src = {
            "learnt": f"learnt from {s.get('samples')} runs",
            "matrix": "from the site's throughput table",
            "default": f"the site's speed for any job on {t}; none learnt yet",
        }.get(src, src)
        return f"{t} {s.get('speed', 1.0):g}x ({src})"

    text = "accepts " + ", ".join(one(t) for t in entry["accepted"])
    if entry.get("running_on"):
        text += f"; runs on {entry['running_on']}"
    elif entry.get("chosen"):
        text += f"; chosen: {entry.get('why') or entry['chosen']}"
    if entry.get("refused"):
        text += f"; {entry['refused']}"
    return text


def time_limit_note(expl: Mapping[str, Any]) -> str | None:
    """A deadline job that accepts GPU types of different speeds: its time limit is wall time
    on whichever it gets (:func:`~slurm_dl.core.steering.unscaled_limit_words`)."""
    entry = expl.get("gpu_types") or {}
    if expl.get("deadline") is None and not expl.get("deadline_steps"):
        return None
    speeds = {
        t: float((entry.get("speeds") or {}).get(t, {}).get("speed", 1.0))
        for t in entry.get("accepted") or ()
    }
    return unscaled_limit_words(expl.get("time_limit"), speeds)


def preemption_words(expl: Mapping[str, Any], rows: list[Mapping[str, Any]]) -> str:
    """Where the job stands with preemption, in words that mean what they say."""
    open_rows = [r for r in rows if r.get("state") in _OPEN]
    if open_rows:
        r = open_rows[-1]
        at = r.get("signalled_at")
        when = f" at {_clock(at)[11:]}" if at else ""
        if r.get("state") == "requeueing" and not expl.get("checkpointable", True):
            return f"being requeued{when} for job {r.get('need')}{_for_fairness(r)} (no checkpoint handler declared)"
        return (
            f"signalled{when} to checkpoint for job {r.get('need')}{_for_fairness(r)}; requeued after "
            "its lead time unless it requeues itself"
        )
    kind = expl.get("preemption") or {}
    if kind.get("kind") == "never":
        return f"never preempted by slurm-dl: {kind.get('why')}"
    if kind.get("kind") is None and not expl.get("checkpointable", True):
        return "never preempted by slurm-dl (it declared no checkpoint handler)"
    refused = [r for r in rows if r.get("state") == "refused"]
    if refused and expl.get("state") == "RUNNING":
        return (
            f"Slurm refused its preemption {_clock(refused[-1].get('updated_at'))}; "
            "left alone for the rest of this run"
        )
    how = (
        "may be requeued without a signal (restarts from the beginning)"
        if kind.get("kind") == "requeue"
        else "may be signalled to checkpoint, then requeued"
    )
    why = f" ({kind['why']})" if kind.get("why") else ""
    done = [r for r in rows if r.get("signalled_at")]
    if done:
        r = done[-1]
        note = str(r.get("note") or "")
        if is_lost_work(note) or is_late_requeue(note):
            outcome = f" ({note})"  # what Slurm did, said in full: work or GPUs were lost
        else:
            outcome = OUTCOMES.get(str(r.get("state")))
            outcome = f" ({outcome})" if outcome else ""
        return (
            f"{how}{why}; last preempted {_clock(r['signalled_at'])} for job {r.get('need')}"
            f"{_for_fairness(r)}{outcome}"
        )
    if expl.get("state") == "RUNNING":
        return f"{how}{why}; not signalled recently"
    return f"{how}{why} once it runs"


def estimate_words(estimate: Mapping[str, Any] | None, now: float | None) -> dict[str, Any]:
    """Slurm's start estimate alone (no view of the running jobs): :func:`start_estimate`."""
    return start_estimate(estimate, now)


def levers(
    expl: Mapping[str, Any],
    view: Mapping[str, Any],
    free_gpus_per_node: Iterable[int] | None,
) -> list[str]:
    """What the user could change, where the numbers allow saying it concretely."""
    out = []
    if expl.get("state") != "PENDING":
        return out
    n = int(expl.get("num_gpus") or 0)
    free = sorted(free_gpus_per_node or [], reverse=True)
    single_node = (expl.get("num_nodes") or 1) <= 1
    if free and n > 0 and single_node:  # a multi-node job's shape is its own choice (DDP ranks)
        best = free[0]
        if 0 < best < n:
            out.append(f"with {best} GPUs instead of {n} it would fit on a node that is free now")
        elif best >= n:
            out.append(
                f"{best} GPUs are free on one node: it starts once the jobs ahead are placed"
            )
    usage = expl.get("account_usage_gpu_s")
    half_life_hours = expl.get("usage_half_life_hours")  # the prioritizer's, as it decayed usage
    if (
        half_life_hours
        and usage
        and expl.get("account")
        and "fairshare" in (expl.get("factors") or {})
    ):
        # (without an account, the usage is that of every job without one: nothing the user controls)
        out.append(
            f"account {expl['account']}'s usage ({_gpu_h(usage)}) halves in {half_life_hours:g} h, "
            "raising its fair-share factor"
        )
    if expl.get("state_reason") in ("Priority", "Resources"):
        out.append(
            "a shorter --time lets Slurm start it sooner in a gap between other jobs (backfill)"
        )
    return out


def one_line(view: Mapping[str, Any]) -> str:
    """The summary ``dlsubmit status`` shows for a waiting job."""
    q = view.get("queue")
    waiting = view.get("waiting_for") or ""
    if not q:
        return waiting or (view.get("state") or "").lower()
    if q["jobs_ahead"]:
        text = f"{_ordinal(q['position'])} of {q['waiting']}, {q['gpus_ahead']} GPUs ahead"
    else:
        text = f"first of {q['waiting']} waiting"
    est = view.get("estimated_start") or {}
    if est.get("at"):
        text += f", start ~{_clock(est['at'])[11:]}"
    elif waiting.startswith("preemption"):
        text += ", preempting for it"
    elif "free now" in waiting and not q["jobs_ahead"]:
        text += ", needs " + waiting.split(" (")[0].replace("GPU(s); ", "GPUs, ").replace(
            " free now", " free"
        )
    return text


def _fit(text: str, width: int = WIDTH) -> list[str]:
    """Wrap ``text`` (with its leading indent) into lines of at most ``width``."""
    if len(text) <= width:
        return [text]
    indent = len(text) - len(text.lstrip(" "))
    words, lines, line = text.split(), [], " " * indent
    for w in words:
        if len(line) + len(w) + (0 if line.strip() == "" else 1) > width and line.strip():
            lines.append(line.rstrip())
            line = " " * (indent + 2)
        line += ("" if line.strip() == "" else " ") + w
    if line.strip():
        lines.append(line.rstrip())
    return lines


_AHEAD_WORDS = {
    "deadline": "it has a deadline to meet",
    "class": "its kind of job comes first (class {other_class})",
    "las": "it has run for less time so far (least attained service first)",
    "fairshare": "its account has used fewer GPU-hours lately (fair share)",
}


def _ahead_words(step: Mapping[str, Any]) -> str:
    """Why the job just ahead is ahead, in words (the step that ordered the two)."""
    label = str(step.get("step") or "")
    if label.startswith("tier:"):
        names = label[5:].split("+")
        if len(names) == 1:
            return _AHEAD_WORDS.get(names[0], f"its {names[0]} score is higher").format(
                other_class="higher"
            )
        said = [_AHEAD_WORDS[n].split(" (")[0] for n in names if n in _AHEAD_WORDS]
        return " or ".join(said) if said else "its priority score is higher"
    if label == "submit":
        return "it was submitted earlier (otherwise the two are alike)"
    if label == "job_id":
        return "it was submitted first, in the same second (otherwise alike)"
    return "its priority is higher"


def _plain(text: str) -> str:
    """Drop internal tags (``(dl:ckpt)``) from words meant for people."""
    import re

    return re.sub(r"\s*\((dl|sdl\d*):[^)]*\)", "", text)


def people_text(view: Mapping[str, Any]) -> str:
    """The default explanation: where the job stands and what would help, in plain words;
    the scores and tiers are in :func:`explain_text` (``--detail``)."""
    out: list[str] = []

    def say(label: str, text: str) -> None:
        out.extend(
            textwrap.wrap(
                text,
                WIDTH,
                initial_indent=f"{label:<12}",
                subsequent_indent=" " * 12,
                break_on_hyphens=False,
            )
        )

    n, nodes = view.get("num_gpus"), view.get("num_nodes") or 1
    shape = f"{n} GPU{'s' if n != 1 else ''}" + (f" on {nodes} nodes" if nodes > 1 else "")
    state = {"PENDING": "waiting", "RUNNING": "running"}.get(
        view.get("state") or "", (view.get("state") or "").lower()
    )
    out.extend(_fit(f"job {view['job_id']} ({view.get('name') or '-'}): {state}, {shape}"))
    q = view.get("queue")
    if q:
        if q["jobs_ahead"]:
            jobs = f"{q['jobs_ahead']} job{'s' if q['jobs_ahead'] != 1 else ''}"
            say(
                "place:",
                f"{_ordinal(q['position'])} of {q['waiting']} waiting jobs; {q['gpus_ahead']} GPUs "
                f"ahead of it ({jobs})",
            )
        else:
            say(
                "place:",
                f"first of {q['waiting']} waiting job{'s' if q['waiting'] != 1 else ''}; "
                "no GPUs ahead of it",
            )
    if view.get("waiting_for"):
        say("waits for:", view["waiting_for"])
    if view.get("restart"):
        say("restarts:", view["restart"])
    if view.get("state") == "PENDING":
        say("start:", start_for_people(view.get("estimated_start") or {}))
    deadline = next(
        (
            p["words"]
            for t in view.get("tiers") or []
            for p in t["factors"]
            if p["factor"] == "deadline"
        ),
        None,
    )
    if deadline and not deadline.startswith("no deadline"):
        say("deadline:", deadline)
    if view.get("deadline_step"):
        say("", view["deadline_step"])
    ahead = (view.get("ordering") or {}).get("after")
    if ahead and q and q["jobs_ahead"]:
        say("ahead:", f"job {ahead['job_id']}, because {_ahead_words(ahead)}")
    levers_ = view.get("levers") or []
    if levers_:
        out.append("to start sooner:")
        for lever in levers_:
            out.extend(textwrap.wrap(lever, WIDTH, initial_indent="  - ", subsequent_indent="    "))
    if view.get("gpu_types"):
        say("GPU type:", view["gpu_types"])
    if view.get("time_limit_note"):
        say("time limit:", view["time_limit_note"])
    if view.get("gpu_utilisation"):
        from ..core.explain import utilisation_lines

        for line in utilisation_lines(view["gpu_utilisation"]):
            out.extend(_fit(line))
    say("preemption:", _plain(str(view.get("preemption") or "")))
    out.extend(
        _fit(
            f"(slurm-dl explain {view['job_id']} --detail: the scores, tiers and recent decisions)"
        )
    )
    return "\n".join(out)


def explain_text(view: Mapping[str, Any], decisions: Iterable[Mapping[str, Any]] = ()) -> str:
    """The detailed explanation (``--detail``): tiers, scores, SiteFactor, decisions; lines of
    at most 80 characters."""
    out: list[str] = []

    def say(text: str) -> None:
        out.extend(_fit(text))

    state = (view.get("state") or "").lower()
    account = f", account {view['account']}" if view.get("account") else ""
    say(
        f"job {view['job_id']} ({view.get('name') or '-'}) of {view.get('user') or '-'}{account}: {state}, "
        f"{view.get('num_gpus')} GPU(s), class {view.get('class')}"
    )
    q = view.get("queue")
    if q and q["jobs_ahead"]:
        say(
            f"place: {_ordinal(q['position'])} of {q['waiting']} waiting jobs; ahead of it: {q['jobs_ahead']} "
            f"job(s) with {q['gpus_ahead']} GPU(s) from {q['accounts_ahead']} account(s)"
        )
    elif q:
        say(f"place: first of {q['waiting']} waiting job(s); nothing waits ahead of it")
    if view.get("rank") is not None:
        sf = view.get("site_factor")
        say(
            f"  rank {view['rank']} of {view['ranked']} counting running jobs (policy {view.get('policy')}); "
            f"score {view.get('score')} is that place (1 first, 0 last)"
            + (f" -> SiteFactor {sf}" if sf is not None else "")
        )
    out.append("why this place (tiers are compared in order; the first difference decides):")
    fat, at = view.get("factors_at"), view.get("at")
    if fat is not None and at is not None and at - fat >= 1:
        say(
            f"  (factors as of {_hms(fat)}, {_duration(at - fat)} before this ranking: the prioritizer "
            "refreshes them less often for jobs deep in the queue)"
        )
    for t in view.get("tiers") or []:
        names = " + ".join(p["factor"] for p in t["factors"])
        if len(t["factors"]) == 1:
            p = t["factors"][0]
            say(f"  tier {t['tier']} {names:<15} {t['total']:>7.4f}  {p['words']}")
            continue
        say(
            f"  tier {t['tier']} {names:<15} {t['total']:>7.4f} = "
            + " + ".join(f"{p['contribution']:.4f}" for p in t["factors"])
        )
        for p in t["factors"]:
            say(
                f"    {p['factor']:<10} {p['weight']:g} x {p['score'] or 0:.4f} = {p['contribution']:.4f}  "
                f"{p['words']}"
            )
    order = view.get("ordering") or {}
    for side in ("after", "before"):
        n = order.get(side)
        if n:
            tie = "tied on every factor; " if n["tied_on_every_factor"] else ""
            say(f"  {side} job {n['job_id']}: {tie}decided by {n['words']}")
    if view.get("waiting_for"):
        say(f"waiting for: {view['waiting_for']}")
    if view.get("restart"):
        say(f"restarts: {view['restart']}")
    if view.get("state") == "PENDING":
        say(f"estimated start: {view['estimated_start']['words']}")
        if view.get("deadline_step"):
            say(f"  {view['deadline_step']}")
    say(f"preemption: {view.get('preemption')}")
    if view.get("gpu_types"):
        say(f"GPU type: {view['gpu_types']}")
    if view.get("time_limit_note"):
        say(f"time limit: {view['time_limit_note']}")
    if view.get("gpu_utilisation"):
        for line in utilisation_lines(view["gpu_utilisation"]):
            say(line)
    for lever in view.get("levers") or []:
        say(f"to start sooner: {lever}")
    decisions = list(decisions)
    if decisions:
        out.append("recent decisions:")
        for d in decisions[-5:]:
            v = "" if d.get("value") is None else f" {d['value']}"
            say(f"  {_clock(d['at'])[5:]} {d['kind']}{v}: {d['reason']}")
    return "\n".join(out)


def render_explanation(
    expl: Mapping[str, Any],
    decisions: Iterable[Mapping[str, Any]] = (),
    queue: Mapping[Any, Mapping[str, Any]] | None = None,
) -> str:
    """Human text for ``slurm-dl explain``: the view of the core's explanation dict, in words."""
    return explain_text(explain_view(expl, queue), decisions)
