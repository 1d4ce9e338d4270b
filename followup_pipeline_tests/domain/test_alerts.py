"""Alert fingerprints: repeats of one failure match, different failures do not."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from followup_pipeline.domain.alerts import alert_key, fingerprint, normalised, window_of

SIX_HOURS = timedelta(hours=6)


def test_alerts_repeats_of_one_failure_share_a_fingerprint() -> None:
    first = fingerprint(
        "evaluate",
        "TransientError",
        "espocrm: HTTP 503 on GET Opportunity/6650a1b2c3d4e5f01 after 3 attempts"
        " (run 0c84228f-09d2-4fde-8f4f-5d302e5ee1d6 at 2026-11-30T17:28:12+00:00)\nTraceback…",
    )
    second = fingerprint(
        "evaluate",
        "TransientError",
        "espocrm: HTTP 502 on GET Opportunity/7a50b1b2c3d4e5f99 after 4 attempts"
        " (run 7945eda8-83a6-4990-a6d5-cf29bd866b32 at 2026-11-30T18:01:00Z)",
    )
    assert first == second
    assert "<id>" in first
    assert "<uuid>" in first
    assert "<time>" in first


def test_alerts_different_failures_do_not_fold_together() -> None:
    base = fingerprint("evaluate", "TransientError", "espocrm: HTTP 503")
    assert base != fingerprint("register", "TransientError", "espocrm: HTTP 503")
    assert base != fingerprint("evaluate", "StoreError", "espocrm: HTTP 503")
    assert base != fingerprint("evaluate", "TransientError", "clickup: HTTP 503")


def test_alerts_message_is_one_bounded_line() -> None:
    assert normalised("") == ""
    assert normalised("a   b\nsecond line") == "a b"
    assert len(normalised("x" * 1000)) == 200


def test_alerts_key_names_the_window() -> None:
    at = datetime(2026, 11, 30, 17, 28, tzinfo=UTC)
    assert window_of(at, SIX_HOURS) == datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
    same = alert_key("f", datetime(2026, 11, 30, 12, 1, tzinfo=UTC), SIX_HOURS)
    assert alert_key("f", at, SIX_HOURS) == same
    assert alert_key("f", at + SIX_HOURS, SIX_HOURS) != same
    assert alert_key("g", at, SIX_HOURS) != same
    assert same.startswith("alert:run:")
    assert same.endswith(":20261130T1200")
