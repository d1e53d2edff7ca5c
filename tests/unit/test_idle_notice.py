"""The idle policy's note in a job's comment: the user's text kept, one note, within Slurm's limit;
and the ``[telemetry] warn_via`` setting."""

from __future__ import annotations

import pytest

from slurm_dl.core.config import TelemetryConfig
from slurm_dl.core.errors import ConfigError
from slurm_dl.core.config import parse_config
from slurm_dl.core.idle.decide import IdleDecision, Verdict
from slurm_dl.core.idle.notice import (
    COMMENT_MAX_CHARS,
    action_note,
    comment_with_note,
    current_note,
    strip_note,
    warning_note,
)


def test_note_is_appended_and_an_older_one_replaced() -> None:
    first = comment_with_note("dl:deadline=2026-11-21T05:00 run 3", "GPUs idle 60 min")
    assert first == "dl:deadline=2026-11-21T05:00 run 3 [slurm-dl: GPUs idle 60 min]"
    second = comment_with_note(first, "cancelled: GPUs idle 90 min")
    assert second == "dl:deadline=2026-11-21T05:00 run 3 [slurm-dl: cancelled: GPUs idle 90 min]"
    assert strip_note(second) == "dl:deadline=2026-11-21T05:00 run 3"
    assert current_note(second) == "cancelled: GPUs idle 90 min" and current_note("plain") is None
    assert comment_with_note("", "GPUs idle 60 min") == "[slurm-dl: GPUs idle 60 min]"
    assert comment_with_note(None, "x" * 30) == "[slurm-dl: " + "x" * 30 + "]"


def test_note_is_shortened_to_slurms_limit_and_dropped_when_no_room() -> None:
    user = "é" * 450  # 900 bytes: the limit counts bytes
    text = comment_with_note(
        user, "GPUs idle 61 min (since 2026-11-21 03:00 UTC); unless they are used " * 4
    )
    assert text is not None and len(text.encode()) <= COMMENT_MAX_CHARS and text.startswith(user)
    assert text.endswith("...]")
    assert comment_with_note("u" * 1000, "GPUs idle 61 min (since 2026-11-21 03:00 UTC)") is None


def test_notes_say_how_long_since_when_and_what_comes_next() -> None:
    d = IdleDecision(5, Verdict.WARN, 61.2, True, "r", idle_since=1_700_000_000.0)
    cfg = TelemetryConfig(idle_action="cancel", warn_grace_minutes=30)
    assert warning_note(d, cfg) == (
        "GPUs idle 61 min (since 2023-11-14 22:13 UTC); unless they are used within "
        "30 min, the job will be cancelled"
    )
    assert "requeued first" in warning_note(
        d, cfg.model_copy(update={"idle_action": "deprioritize"})
    )
    assert "please use them" in warning_note(d, cfg.model_copy(update={"idle_action": "warn"}))
    assert action_note(IdleDecision(5, Verdict.CANCEL, 90, True, "r", 1_700_000_000.0)).startswith(
        "cancelled: GPUs idle 90"
    )
    assert action_note(IdleDecision(5, Verdict.DEPRIORITIZE, 90, True, "r", None)).startswith(
        "deprioritized: GPUs idle 90 min (since ?)"
    )


def _site(telemetry: dict) -> dict:
    return {
        "gpu_types": [{"name": "h100"}],
        "node_groups": [{"name": "g", "nodes": "n[0-1]", "gpus_per_node": 8, "gpu_type": "h100"}],
        "telemetry": telemetry,
    }


def test_warn_via_defaults_to_log_and_comment_and_is_validated() -> None:
    assert TelemetryConfig().warn_via == ["log", "comment"]
    assert parse_config(_site({"warn_via": ["comment"]})).telemetry.warn_via == ["comment"]
    for bad, says in (
        ([], "at least one"),
        (["log", "log"], "at most once"),
        (["mail"], "telemetry.warn_via"),
    ):
        with pytest.raises(ConfigError, match=says):
            parse_config(_site({"warn_via": bad}), "site.toml")
