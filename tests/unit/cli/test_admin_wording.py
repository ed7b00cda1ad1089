"""``cmstoken-admin bootstrap`` words the bootstrap function's advice for its operator: every
message an invocation can end on names this command, never the function's own actions ("start
again", in whatever case), and the new-identity advice names ``--new-identity`` once (issue 20)."""

from __future__ import annotations

import re

import pytest

from cmstoken.bootstrap.results import ENDINGS, REFUSED_CREDENTIAL
from cmstoken.bootstrap.states import Event, Stage
from cmstoken.cli.admin.bootstrap import _in_admin_terms

COMMAND = "cmstoken-admin --stack NAME bootstrap"
FUNCTION_WORDS = re.compile(r"\bstart (again|first)\b|allow_new_identity", re.IGNORECASE)


# Every message a bootstrap invocation can end on (but the start's and the pending ones).
MESSAGES = {f"{stage}-{event}": message for (stage, event), (_, message) in ENDINGS.items()}
MESSAGES["refused-credential"] = REFUSED_CREDENTIAL[1]


def filled(message: str) -> tuple[str, str]:
    """A function message (its fields filled in), and what the operator sees."""
    text = message.format(error="ERROR", reason="REASON", problems="PROBLEMS")
    return text, _in_admin_terms(text, COMMAND)


def shown(stage: Stage, event: Event) -> tuple[str, str]:
    return filled(ENDINGS[stage, event][1])


@pytest.mark.parametrize("name", list(MESSAGES))
def test_every_ending_names_this_command_not_the_functions_actions(name: str) -> None:
    text, operator = filled(MESSAGES[name])
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


def test_a_refused_first_credential_is_told_the_new_identity_command() -> None:
    _, operator = filled(REFUSED_CREDENTIAL[1])
    assert operator.endswith(
        f"so the rotator's runs are refused too: run `{COMMAND} --new-identity`, approving with "
        "an account that may use the service"
    )


def test_only_the_functions_own_words_are_rewritten() -> None:
    assert _in_admin_terms("restart again later", COMMAND) == "restart again later"
    assert _in_admin_terms("x (run start again)", COMMAND) == f"x (run `{COMMAND}` again)"
    assert _in_admin_terms("none: run start first", COMMAND) == f"none: run `{COMMAND}`"
