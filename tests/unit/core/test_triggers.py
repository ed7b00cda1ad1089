"""Classifying rotator events, from the samples in events/."""

from __future__ import annotations

from typing import Any

import pytest

from cmstoken.core.errors import ConfigurationError
from cmstoken.core.triggers import RotationRequest
from support import load_event


@pytest.mark.parametrize(
    ("sample", "forced", "source"),
    [
        ("rotator-scheduled", False, "schedule"),
        ("rotator-scheduled-rule", False, "schedule"),
        ("rotator-force", True, "force"),
        ("rotator-refresh-requested", True, "event:cmstoken.consumer"),
        ("rotator-queued-requests", True, "requests"),
    ],
)
def test_sample_events_are_classified(sample: str, forced: bool, source: str) -> None:
    request = RotationRequest.from_event(load_event(sample))
    assert (request.forced, request.source) == (forced, source)


def test_refresh_requests_from_any_source_force_a_run() -> None:
    event = {**load_event("rotator-refresh-requested"), "source": "my.app"}
    assert RotationRequest.from_event(event) == RotationRequest(forced=True, source="event:my.app")


def test_a_batch_from_the_queue_forces_one_run_however_many_records() -> None:
    record = load_event("rotator-queued-requests")["Records"][0]
    for records in ([record], [record] * 10):
        assert RotationRequest.from_event({"Records": records}) == RotationRequest(
            forced=True, source="requests"
        )


@pytest.mark.parametrize(
    "records",
    [[], [{"eventSource": "aws:sns"}], "x", [{"eventSource": "aws:sqs"}, None]],
    ids=["empty", "another-service", "not-a-list", "one-not-a-record"],
)
def test_records_not_all_from_a_queue_are_a_scheduled_run(records: Any) -> None:
    assert not RotationRequest.from_event({"Records": records}).forced


def test_force_false_and_other_fields_are_a_scheduled_run() -> None:
    assert not RotationRequest.from_event({"force": False, "note": "x"}).forced


@pytest.mark.parametrize("event", [{"force": "true"}, {"force": 1}, {"force": None}])
def test_force_must_be_a_json_boolean(event: dict[str, Any]) -> None:
    with pytest.raises(ConfigurationError, match="JSON boolean"):
        RotationRequest.from_event(event)


@pytest.mark.parametrize("event", [None, [], "force", 3])
def test_events_must_be_objects(event: Any) -> None:
    with pytest.raises(ConfigurationError, match="JSON object"):
        RotationRequest.from_event(event)
