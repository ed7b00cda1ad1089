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
    ],
)
def test_sample_events_are_classified(sample: str, forced: bool, source: str) -> None:
    request = RotationRequest.from_event(load_event(sample))
    assert (request.forced, request.source) == (forced, source)


def test_refresh_requests_from_any_source_force_a_run() -> None:
    event = {**load_event("rotator-refresh-requested"), "source": "my.app"}
    assert RotationRequest.from_event(event) == RotationRequest(forced=True, source="event:my.app")


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
