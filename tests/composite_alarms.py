"""How CloudWatch decides a composite alarm's state from the states of the alarms its rule names.

From the CloudWatch API reference, PutCompositeAlarm (https://docs.aws.amazon.com/AmazonCloudWatch/
latest/APIReference/API_PutCompositeAlarm.html):

- the rule combines ``ALARM(name)``, ``OK(name)`` and ``INSUFFICIENT_DATA(name)`` (TRUE when the
  named alarm is in that state), ``TRUE`` and ``FALSE`` with ``AND``, ``OR``, ``NOT`` and
  parentheses; names may be surrounded with double quotes;
- "The composite alarm goes into ALARM state only if all conditions of the rule are met";
- "When this operation creates an alarm, the alarm state is immediately set to INSUFFICIENT_DATA.
  The alarm is then evaluated and its state is set appropriately. ... For a composite alarm, this
  initial time after creation is the only time that the alarm can be in INSUFFICIENT_DATA state."

So: INSUFFICIENT_DATA at creation, then ALARM while the rule is TRUE and OK while it is FALSE,
re-evaluated whenever a named alarm changes state. Operator precedence is not documented; the
usual one (NOT, then AND, then OR) is used, and the template's rule needs none of it.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence

from cloudwatch_alarms import Transition

INITIAL = "INSUFFICIENT_DATA"
_TOKEN = re.compile(r'\s*(\(|\)|"[^"]*"|[A-Za-z0-9_\-.:/<>]+)')
Rule = Callable[[Mapping[str, str]], bool]


def parse(rule: str) -> tuple[Rule, set[str]]:
    """The rule as a function of the named alarms' states, and the names it reads."""
    tokens = _tokens(rule)
    names: set[str] = set()
    position = 0

    def peek() -> str | None:
        return tokens[position] if position < len(tokens) else None

    def take(expected: str | None = None) -> str:
        nonlocal position
        token = peek()
        if token is None or (expected is not None and token != expected):
            raise ValueError(f"alarm rule {rule!r}: expected {expected or 'more'} at {token!r}")
        position += 1
        return token

    def disjunction() -> Rule:
        parts = [conjunction()]
        while peek() == "OR":
            take("OR")
            parts.append(conjunction())
        return lambda states: any(part(states) for part in parts)

    def conjunction() -> Rule:
        parts = [negation()]
        while peek() == "AND":
            take("AND")
            parts.append(negation())
        return lambda states: all(part(states) for part in parts)

    def negation() -> Rule:
        if peek() == "NOT":
            take("NOT")
            inner = negation()
            return lambda states: not inner(states)
        return atom()

    def atom() -> Rule:
        token = take()
        if token == "(":
            inner = disjunction()
            take(")")
            return inner
        if token in ("TRUE", "FALSE"):
            value = token == "TRUE"
            return lambda _: value
        if token not in ("ALARM", "OK", "INSUFFICIENT_DATA"):
            raise ValueError(f"alarm rule {rule!r}: unknown function {token!r}")
        take("(")
        name = take().strip('"')
        take(")")
        names.add(name)
        return lambda states: states.get(name, INITIAL) == token

    expression = disjunction()
    if peek() is not None:
        raise ValueError(f"alarm rule {rule!r}: unexpected {peek()!r}")
    return expression, names


def evaluate_composite(
    rule: str, children: Mapping[str, Sequence[Transition]], *, start: float
) -> list[Transition]:
    """The composite alarm's state changes, given the state changes of the alarms it names."""
    expression, names = parse(rule)
    missing = names - set(children)
    if missing:
        raise ValueError(f"alarm rule names unknown alarms: {sorted(missing)}")
    events = sorted((change.at, name, change.new) for name in names for change in children[name])
    states = dict.fromkeys(names, INITIAL)
    current, changes = INITIAL, []

    def settle(at: float) -> None:
        nonlocal current
        new = "ALARM" if expression(states) else "OK"
        if new != current:
            changes.append(Transition(at=at, old=current, new=new))
            current = new

    settle(start)
    for index, (at, name, new) in enumerate(events):
        states[name] = new
        if index + 1 == len(events) or events[index + 1][0] != at:
            settle(at)  # changes at one instant are seen together
    return changes


def _tokens(rule: str) -> list[str]:
    tokens, position = [], 0
    rule = rule.strip()
    while position < len(rule):
        match = _TOKEN.match(rule, position)
        if match is None:
            raise ValueError(f"alarm rule {rule!r}: cannot read {rule[position:]!r}")
        tokens.append(match.group(1))
        position = match.end()
    return tokens
