"""``cmstoken-admin bootstrap`` words the bootstrap function's advice for its operator: every
message an invocation can end on names this command, never the function's own actions ("start
again", in whatever case), and the new-identity advice names ``--new-identity`` once (issue 20)."""

from __future__ import annotations

import re

import pytest

from cmstoken.bootstrap.results import ENDINGS
from cmstoken.bootstrap.states import Event, Stage
from cmstoken.cli.admin.bootstrap import _in_admin_terms

COMMAND = "cmstoken-admin --stack NAME bootstrap"
FUNCTION_WORDS = re.compile(r"\bstart (again|first)\b|allow_new_identity", re.IGNORECASE)


def shown(stage: Stage, event: Event) -> tuple[str, str]:
    """The function's message of an ending (its fields filled in), and what the operator sees."""
    _, message = ENDINGS[stage, event]
    text = message.format(error="ERROR", reason="REASON", problems="PROBLEMS")
    return text, _in_admin_terms(text, COMMAND)


@pytest.mark.parametrize("key", list(ENDINGS), ids=lambda key: f"{key[0]}-{key[1]}")
def test_every_ending_names_this_command_not_the_functions_actions(
    key: tuple[Stage, Event],
) -> None:
    text, operator = shown(*key)
    assert not FUNCTION_WORDS.search(operator), operator
    assert operator.count("--new-identity") <= 1, operator
    if FUNCTION_WORDS.search(text):
        assert f"`{COMMAND}" in operator, operator


def test_a_sentence_that_starts_with_the_advice_keeps_its_capital() -> None:
    _, operator = shown(Stage.CANDIDATE, Event.SERVICE_REFUSED)
    assert operator.endswith(
        f"unchanged. Run `{COMMAND}` again, approving with an account that may use the service"
    )


def test_the_new_identity_advice_is_given_once() -> None:
    text, operator = shown(Stage.PENDING, Event.IDENTITY_MISMATCH)
    assert '"allow_new_identity": true' in text  # for whoever invokes the function directly
    assert operator.endswith(
        f"If this stack should now use that identity, run `{COMMAND} --new-identity` to allow it"
    )


def test_only_the_functions_own_words_are_rewritten() -> None:
    assert _in_admin_terms("restart again later", COMMAND) == "restart again later"
    assert _in_admin_terms("x (run start again)", COMMAND) == f"x (run `{COMMAND}` again)"
    assert _in_admin_terms("none: run start first", COMMAND) == f"none: run `{COMMAND}`"
