"""The crm_events sensor's run keys, and the register and replay jobs inside Dagster."""

from __future__ import annotations

import uuid
from typing import Any

import dagster as dg
import psycopg
import pytest

from followup_pipeline.defs import build_definitions
from followup_pipeline.engine.runs import OUTCOME_TAG
from followup_pipeline.integrations.resources import (
    CompanyLookupResource,
    EspoCrmResource,
    MistralResource,
)
from followup_pipeline.resources import ClockResource, PostgresResource
from followup_pipeline.settings import load_settings

from .conftest import EventFactory


@pytest.fixture
def defs() -> dg.Definitions:
    """The definitions of a machine whose failed events wait no time, dead after two attempts."""
    return build_definitions(load_settings(event_backoff_base_s=0, event_max_attempts=2))


def _add_run(
    instance: dg.DagsterInstance, status: dg.DagsterRunStatus, tags: dict[str, str]
) -> str:
    """A ``register`` run in ``status`` with ``tags``, as the daemon would have stored it."""
    run = dg.DagsterRun(job_name="register", run_id=str(uuid.uuid4()), status=status, tags=tags)
    return instance.add_run(run).run_id


def _tick(
    defs: dg.Definitions, instance: dg.DagsterInstance, db_url: str, cursor: str | None = None
) -> dg.SensorExecutionData:
    sensor = defs.resolve_sensor_def("crm_events")
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
