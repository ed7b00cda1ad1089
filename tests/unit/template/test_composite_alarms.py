"""The composite alarm model against the statements of the CloudWatch API reference
(PutCompositeAlarm) that ``composite_alarms`` cites."""

from __future__ import annotations

import pytest

from cloudwatch_alarms import Transition
from composite_alarms import evaluate_composite, parse


def states_of(rule: str, **states: str) -> bool:
    expression, _ = parse(rule)
    return expression(states)


def test_functions_are_true_in_the_named_state() -> None:
    assert states_of('ALARM("a")', a="ALARM")
    assert not states_of('ALARM("a")', a="OK")
    assert states_of(
        "OK(a)", a="OK"
    )  # "names ... can be surrounded with double-quotes, but do not have to be"
    assert states_of("INSUFFICIENT_DATA(a)", a="INSUFFICIENT_DATA")
    assert states_of("TRUE")
    assert not states_of("FALSE")


def test_operators_and_parentheses() -> None:
    rule = 'ALARM("a") AND NOT INSUFFICIENT_DATA("b")'
    assert states_of(rule, a="ALARM", b="OK")
    assert not states_of(rule, a="ALARM", b="INSUFFICIENT_DATA")
    assert states_of("ALARM(a) OR ALARM(b) AND FALSE", a="ALARM", b="OK")  # AND binds tighter
    assert not states_of("(ALARM(a) OR ALARM(b)) AND FALSE", a="ALARM", b="OK")
    assert parse("ALARM(a) OR NOT OK(b)")[1] == {"a", "b"}


@pytest.mark.parametrize("rule", ["ALARM(a", "ALARM(a) AND", "MAYBE(a)", "ALARM(a) b", ""])
def test_malformed_rules_are_refused(rule: str) -> None:
    with pytest.raises(ValueError, match="alarm rule"):
        parse(rule)


def test_insufficient_data_only_at_creation_then_alarm_or_ok() -> None:
    """ "For a composite alarm, this initial time after creation is the only time that the alarm
    can be in INSUFFICIENT_DATA state"; ALARM "only if all conditions of the rule are met"."""
    children = {
        "a": [Transition(10, "INSUFFICIENT_DATA", "ALARM"), Transition(50, "ALARM", "OK")],
        "b": [Transition(10, "INSUFFICIENT_DATA", "OK"), Transition(30, "OK", "ALARM")],
    }
    changes = evaluate_composite('ALARM("a") AND NOT ALARM("b")', children, start=0)
    assert changes == [
        Transition(0, "INSUFFICIENT_DATA", "OK"),  # both children unknown: the rule is FALSE
        Transition(10, "OK", "ALARM"),
        Transition(30, "ALARM", "OK"),
    ]


def test_changes_at_one_instant_are_seen_together() -> None:
    children = {
        "a": [Transition(10, "INSUFFICIENT_DATA", "ALARM")],
        "b": [Transition(10, "INSUFFICIENT_DATA", "ALARM")],
    }
    changes = evaluate_composite("ALARM(a) AND NOT ALARM(b)", children, start=0)
    assert changes == [Transition(0, "INSUFFICIENT_DATA", "OK")]


def test_a_rule_naming_an_unknown_alarm_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown alarms"):
        evaluate_composite("ALARM(missing)", {}, start=0)
