"""The one set of registration rules: a batch decides as its items one by one, and the rules."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from followup_pipeline.domain.decisions import StagePolicy
from followup_pipeline.domain.registration import Observation, decide, decide_one

POLICY = StagePolicy(["Proposal", "Negotiation"], "Closed Won", "Closed Lost")
T0 = datetime(2026, 12, 1, 9, tzinfo=UTC)
STAGES = [None, "Proposal", "Negotiation", "Closed Won", "Closed Lost", "Prospecting"]


@dataclass(frozen=True)
class Watch:
    id: int
    registered_at: datetime
    closed_at: datetime | None
    closed_reason: str | None
    stage: str
    registered_by: str = "webhook"


moments = st.integers(min_value=-3, max_value=3).map(lambda h: T0 + timedelta(hours=h))
watches = st.one_of(
    st.none(),
    st.builds(
        Watch,
        id=st.integers(1, 1000),
        registered_at=moments,
        closed_at=st.one_of(st.none(), moments),
        closed_reason=st.sampled_from(
            ["won", "lost", "exhausted", "subject_gone", "out_of_scope", "unwatched"]
        ),
        stage=st.sampled_from(["Proposal", "Negotiation"]),
        registered_by=st.sampled_from(["webhook", "reconcile", "operator"]),
    ),
)
sources = st.sampled_from(["webhook", "reconcile", "recheck"])
cases = st.lists(
    st.tuples(st.sampled_from(STAGES), moments, sources, watches), min_size=1, max_size=12
)


def _observed(case: list[tuple[str | None, datetime, str, Watch | None]]) -> tuple[list, dict]:
    observations = [
        Observation(f"d{n}", stage, at, source)  # type: ignore[arg-type]
        for n, (stage, at, source, _) in enumerate(case)
    ]
    latest = {f"d{n}": w for n, (*_, w) in enumerate(case) if w is not None}
    return observations, latest


@given(cases)
def test_registration_a_batch_decides_as_its_items_one_by_one(case: list) -> None:
    observations, latest = _observed(case)
    together = decide(observations, latest, POLICY)
    alone = [decide([o], latest, POLICY)[0] for o in observations]
    assert together == alone
    assert [r.subject_id for r in together] == [o.subject_id for o in observations]


@given(cases)
def test_registration_rules_hold_for_every_observation(case: list) -> None:
    observations, latest = _observed(case)
    for observation, registration in zip(
        observations, decide(observations, latest, POLICY), strict=True
    ):
        watch = latest.get(observation.subject_id)
        is_open = watch is not None and watch.closed_at is None
        if registration.action == "open":
            # Only a deal in a watched stage with no open watch opens one.
            assert observation.stage in POLICY.watched
            assert not is_open
            if watch is not None and watch.closed_reason in ("exhausted", "unwatched"):
                assert observation.stage != watch.stage  # a new stay only in another stage
        elif registration.action == "close":
            # Only the open watch closes, with the reason the stage gives.
            assert is_open
            assert watch is not None
            assert registration.watch_id == watch.id
            assert registration.outcome == f"closed_{registration.reason}"
            assert observation.stage not in POLICY.watched
            if watch.registered_by == "operator":  # only won, lost or gone close it
                assert registration.reason != "out_of_scope"
        if registration.outcome == "kept_by_operator":
            assert watch is not None
            assert watch.registered_by == "operator"
        if registration.outcome == "superseded":
            # Only an event is ever stale, and only against something newer.
            assert observation.source == "webhook"
            assert watch is not None
            newer = watch.closed_at if watch.closed_at is not None else watch.registered_at
            assert newer > observation.at


@pytest.mark.parametrize("source", ["webhook", "reconcile", "recheck"])
@pytest.mark.parametrize(
    ("stage", "outcome"),
    [("Proposal", "not_reopened_exhausted"), ("Negotiation", "registered")],
)
def test_registration_after_exhausted_one_rule_whoever_sees_the_deal(
    source: str, stage: str, outcome: str
) -> None:
    exhausted = Watch(1, T0 - timedelta(days=30), T0 - timedelta(days=1), "exhausted", "Proposal")
    seen = Observation("d1", stage, T0, source)  # type: ignore[arg-type]
    assert decide_one(seen, exhausted, POLICY).outcome == outcome


@pytest.mark.parametrize(
    ("stage", "outcome"),
    [
        ("Prospecting", "kept_by_operator"),
        ("Closed Lost", "closed_lost"),
        (None, "closed_subject_gone"),
    ],
)
def test_registration_a_watch_an_operator_opened_stays_in_any_other_stage(
    stage: str | None, outcome: str
) -> None:
    by_hand = Watch(1, T0 - timedelta(days=3), None, None, "Prospecting", "operator")
    seen = Observation("d1", stage, T0, "reconcile")
    assert decide_one(seen, by_hand, POLICY).outcome == outcome


@pytest.mark.parametrize(
    ("stage", "outcome"),
    [("Proposal", "not_reopened_unwatched"), ("Negotiation", "registered")],
)
def test_registration_an_unwatched_deal_comes_back_only_in_another_stage(
    stage: str, outcome: str
) -> None:
    unwatched = Watch(1, T0 - timedelta(days=9), T0 - timedelta(days=1), "unwatched", "Proposal")
    seen = Observation("d1", stage, T0, "webhook")
    assert decide_one(seen, unwatched, POLICY).outcome == outcome


def test_registration_one_list_cannot_name_a_deal_twice() -> None:
    seen = Observation("d1", "Proposal", T0, "webhook")
    with pytest.raises(ValueError, match="observed twice"):
        decide([seen, seen], {}, POLICY)
