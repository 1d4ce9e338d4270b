"""The crm_events sensor's run keys and its runs side by side, and the register and replay jobs
inside Dagster."""

from __future__ import annotations

import uuid
from typing import Any

import dagster as dg
import psycopg
import pytest

from followup_pipeline.defs import build_definitions
from followup_pipeline.defs.register import REGISTER_RUNS
from followup_pipeline.engine.runs import OUTCOME_TAG
from followup_pipeline.integrations.resources import (
    CompanyLookupResource,
    EspoCrmResource,
    MistralResource,
)
from followup_pipeline.resources import ClockResource, PostgresResource
from followup_pipeline.settings import load_settings
from followup_pipeline.store.events import store_delivery

from .conftest import EventFactory


@pytest.fixture
def defs() -> dg.Definitions:
    """The definitions of a machine whose failed events wait no time, dead after two attempts."""
    return build_definitions(load_settings(event_backoff_base_s=0, event_max_attempts=2))


def _add_run(
    instance: dg.DagsterInstance,
    status: dg.DagsterRunStatus,
    tags: dict[str, str],
    job_name: str = "register",
) -> str:
    """A run of ``job_name`` in ``status`` with ``tags``, as the daemon would have stored it."""
    run = dg.DagsterRun(job_name=job_name, run_id=str(uuid.uuid4()), status=status, tags=tags)
    return instance.add_run(run).run_id


def _tick(
    defs: dg.Definitions,
    instance: dg.DagsterInstance,
    db_url: str,
    cursor: str | None = None,
    sensor_name: str = "crm_events",
) -> dg.SensorExecutionData:
    sensor = defs.resolve_sensor_def(sensor_name)
    with dg.build_sensor_context(
        instance=instance,
        cursor=cursor,
        resources={"postgres": PostgresResource(url=db_url)},
        repository_def=defs.get_repository_def(),
    ) as context:
        return sensor.evaluate_tick(context)


def test_crm_events_skips_when_nothing_is_due(defs: dg.Definitions, db_url: str) -> None:
    with dg.instance_for_test() as instance:
        result = _tick(defs, instance, db_url)
    assert not result.run_requests
    assert result.skip_message == "no events due"


def test_crm_events_keys_never_block_a_retry_and_wait_for_runs_in_flight(
    defs: dg.Definitions, db_url: str, add_event: EventFactory
) -> None:
    add_event([{"id": "d1", "stage": "Proposal"}])
    with dg.instance_for_test() as instance:
        first = _tick(defs, instance, db_url)
        assert first.run_requests is not None
        [request] = first.run_requests
        assert request.run_key is not None
        tags = {"dagster/run_key": request.run_key}
        started = _add_run(instance, dg.DagsterRunStatus.STARTED, tags)
        blocked = _tick(defs, instance, db_url, first.cursor)
        assert not blocked.run_requests
        assert "in flight" in (blocked.skip_message or "")
        instance.delete_run(started)
        # The run failed and still holds its key (docs/dagster.md): the retry needs another.
        _add_run(instance, dg.DagsterRunStatus.FAILURE, tags)
        again = _tick(defs, instance, db_url, first.cursor)
    assert again.run_requests is not None
    assert again.run_requests[0].run_key != request.run_key
    assert int(again.cursor or 0) == int(first.cursor or 0) + 1


def _launch(
    defs: dg.Definitions, instance: dg.DagsterInstance, db_url: str, cursor: str | None
) -> tuple[dg.RunRequest, str | None]:
    """Tick ``crm_events``, expecting one run: its request, stored as started, and the cursor."""
    result = _tick(defs, instance, db_url, cursor)
    assert result.run_requests is not None, result.skip_message
    [request] = result.run_requests
    assert request.run_key is not None
    _add_run(instance, dg.DagsterRunStatus.STARTED, {"dagster/run_key": request.run_key})
    return request, result.cursor


def test_crm_events_runs_side_by_side_only_for_a_backlog(
    db_url: str, add_event: EventFactory
) -> None:
    # Batches of 3: a run beside one in flight needs more than 3 due events, beside two more
    # than 6 (no third is allowed: REGISTER_RUNS is 2).
    assert REGISTER_RUNS == 2
    defs = build_definitions(load_settings(event_batch_size=3))
    for n in range(3):
        add_event([{"id": f"d{n}", "stage": "Proposal"}])
    with dg.instance_for_test() as instance:
        first, cursor = _launch(defs, instance, db_url, None)
        # One batch of the run in flight takes the 3 due events: no run beside it.
        small = _tick(defs, instance, db_url, cursor)
        assert not small.run_requests
        assert small.skip_message == "1 register run in flight will take the 3 events due"
        add_event([{"id": "d3", "stage": "Proposal"}])
        second, cursor = _launch(defs, instance, db_url, cursor)
        # The same due events, and still a key of its own: neither run's key blocks the other.
        assert second.run_key != first.run_key
        assert second.tags["followup/events"] == "3"
        for n in range(4, 20):
            add_event([{"id": f"d{n}", "stage": "Proposal"}])
        full = _tick(defs, instance, db_url, cursor)
        assert not full.run_requests
        assert full.skip_message == "2 register runs are in flight, the most allowed"
    assert int(cursor or 0) == 2


def test_crm_events_counts_no_claimed_event_as_backlog(
    db: psycopg.Connection[Any], db_url: str, add_event: EventFactory
) -> None:
    defs = build_definitions(load_settings(event_batch_size=3))
    for n in range(6):
        add_event([{"id": f"d{n}", "stage": "Proposal"}])
    with dg.instance_for_test() as instance:
        _, cursor = _launch(defs, instance, db_url, None)
        # The run started and leased its first batch: 3 events wait, its next batch.
        db.execute(
            "UPDATE events SET claimed_until = now() + interval '15 minutes', claimed_by = 'w' "
            "WHERE id IN (SELECT id FROM events ORDER BY id LIMIT 3)"
        )
        result = _tick(defs, instance, db_url, cursor)
    assert not result.run_requests
    assert result.skip_message == "1 register run in flight will take the 3 events due"


def test_lead_events_still_waits_for_its_one_run_in_flight(
    db: psycopg.Connection[Any], db_url: str
) -> None:
    defs = build_definitions(load_settings(event_batch_size=3))
    for n in range(20):  # a backlog that would launch a second register run
        store_delivery(
            db, source="site-form", event_type=None, body=b"{}", headers={}, delivery_id=f"m{n}"
        )
    with dg.instance_for_test() as instance:
        first = _tick(defs, instance, db_url, sensor_name="lead_events")
        assert first.run_requests is not None
        started = _add_run(instance, dg.DagsterRunStatus.STARTED, {}, job_name="lead_intake")
        blocked = _tick(defs, instance, db_url, first.cursor, sensor_name="lead_events")
    assert not blocked.run_requests
    assert blocked.skip_message == f"lead_intake run {started} is still in flight"


def _resources(db_url: str) -> dict[str, Any]:
    return {
        "postgres": PostgresResource(url=db_url),
        # Nothing listens on port 9: every vendor request fails fast, as in an outage.
        "espocrm": EspoCrmResource(base_url="http://127.0.0.1:9/espocrm", api_key="k"),
        "company_lookup": CompanyLookupResource(base_url="http://127.0.0.1:9/pdl", api_key="k"),
        "mistral": MistralResource(base_url="http://127.0.0.1:9/mistral", api_key="k", model="m"),
        "clock": ClockResource(),
    }


def test_register_job_reports_counts_and_outcome(
    defs: dg.Definitions, db: psycopg.Connection[Any], db_url: str, add_event: EventFactory
) -> None:
    add_event([{"id": "d1", "name": "Offer", "stage": "Proposal"}], event="Opportunity.create")
    with dg.instance_for_test() as instance:
        result = defs.resolve_job_def("register").execute_in_process(
            instance=instance, resources=_resources(db_url)
        )
        run = instance.get_run_by_id(result.run_id)
    assert result.success
    assert run is not None
    assert run.tags[OUTCOME_TAG] == "ok"
    assert result.output_for_node("register_events")["registered"] == 1
    [materialization] = [e for e in result.all_events if e.event_type_value == "STEP_OUTPUT"]
    metadata = materialization.event_specific_data.metadata  # type: ignore[union-attr]
    assert metadata["registered"].value == 1


def test_replay_job_takes_names_from_the_launchpad(
    defs: dg.Definitions, db: psycopg.Connection[Any], db_url: str, add_event: EventFactory
) -> None:
    event_id = add_event([{"id": "d1", "stage": "Proposal"}])
    job = defs.resolve_job_def("register")
    with dg.instance_for_test() as instance:
        for _ in range(2):  # the CRM is down: two attempts, then a dead letter
            outcome = job.execute_in_process(instance=instance, resources=_resources(db_url))
            assert instance.get_run_by_id(outcome.run_id).tags[OUTCOME_TAG] == "partial"  # type: ignore[union-attr]
        assert db.execute("SELECT status FROM events").fetchone() == {"status": "dead"}
        # The cause is fixed: here, the payload now carries the names the CRM could not give.
        fixed = b'[{"id":"d1","name":"N","stage":"Proposal"}]'
        db.execute("UPDATE events SET body = %s", (fixed,))
        config = {"ops": {"replay_dead_letters": {"config": {"names": [f"event:{event_id}"]}}}}
        result = defs.resolve_job_def("replay").execute_in_process(
            run_config=config, instance=instance, resources=_resources(db_url)
        )
    assert result.success
    counts = result.output_for_node("replay_dead_letters")
    assert (counts["requeued"], counts["registered"]) == (1, 1)
    assert db.execute("SELECT count(*) AS n FROM watches").fetchone() == {"n": 1}


def test_replay_job_refuses_an_unknown_action(defs: dg.Definitions, db_url: str) -> None:
    config = {"ops": {"replay_dead_letters": {"config": {"names": ["action:task:1:1"]}}}}
    with dg.instance_for_test() as instance:
        result = defs.resolve_job_def("replay").execute_in_process(
            run_config=config, instance=instance, resources=_resources(db_url)
        )
        run = instance.get_run_by_id(result.run_id)
    assert run is not None
    assert run.tags["followup/outcome"] == "partial"
    counts = result.output_for_node("replay_dead_letters")
    assert (counts["actions_replayed"], counts["refused"]) == (0, 1)
