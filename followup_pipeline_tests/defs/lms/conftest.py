"""One Dagster instance for each learning-reminder test module's runs (making one costs about
half a second a run)."""

from collections.abc import Iterator

import dagster as dg
import pytest

from .lms_world import SHARED


@pytest.fixture(autouse=True, scope="module")
def shared_instance() -> Iterator[None]:
    with dg.instance_for_test() as instance:
        SHARED["instance"] = instance
        yield
    SHARED.clear()
