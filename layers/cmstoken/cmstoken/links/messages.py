"""The messages that ask for a re-authorization and report its outcome, as the arguments of
``sns.publish``. Pure: no I/O. Given only metadata and the link, a message can carry no token,
refresh token, device code or user code; an identity appears as its short fingerprint.

SNS Publish (https://docs.aws.amazon.com/sns/latest/api/API_Publish.html): with
``MessageStructure`` ``json``, ``Message`` is a JSON object with a string ``default`` and a
string per subscription protocol, 256 KiB (262,144 bytes) at most by default. ``default`` and
``email`` get the plain text (a person reads it), ``sms`` the subject and the link, ``http``
and ``https`` the chat custom notification (Amazon Q Developer in chat applications, formerly
AWS Chatbot, subscribes over https), ``sqs``, ``lambda``, ``email-json`` and ``firehose`` the
facts as one flat JSON object, for programs. Subjects: "UTF-8 text with no line breaks or
control characters, and less than 100 characters long"; earlier "ASCII text that begins with a
letter, number, or punctuation mark": subjects here keep both rules.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import ClassVar, Final, Literal, NamedTuple, TypedDict

from cmstoken.core.clock import to_iso
from cmstoken.core.errors import ConfigurationError
from cmstoken.core.urls import validate_url
from cmstoken.links.stack import Stack, check_form

MAX_MESSAGE_BYTES: Final = 262_144
MAX_SUBJECT_LENGTH: Final = 99
MAX_URL_LENGTH: Final = 2048
_FINGERPRINT = re.compile(r"[0-9a-f]{8,16}")  # a short hash: never the identity itself
_ERROR = re.compile(r"[A-Za-z0-9_.-][A-Za-z0-9_. -]{0,39}")  # invalid_grant, invalid_client...
_NOTHING = (
    "Opening the link only shows a page naming this stack, account and region: nothing changes "
    "until you press its button, which starts a new authorization to approve at the identity "
    "provider."
)


@dataclass(frozen=True)
class Link:
    """A re-authorization link (https, or http on loopback) and its expiry (epoch seconds)."""

    url: str
    expires_at: float

    def __post_init__(self) -> None:
        try:
            validate_url(self.url, what="link URL")
        except ConfigurationError as exc:
            raise ValueError(str(exc)) from exc
        if len(self.url) > MAX_URL_LENGTH or not self.url.isascii() or " " in self.url:
            raise ValueError("link URL is not of the expected form")


@dataclass(frozen=True)
class Withheld:
    """An ending reported without a new link (one went with an ending in the last 24 hours):
    ``next_reminder_at``, the earliest the next daily reminder brings one (``None``: the
    schedule's next run)."""

    next_reminder_at: float | None = None

    def sentence(self) -> str:
        """What the notice says instead of a link."""
        when = (
            "the schedule's next daily run, within 24 hours"
            if self.next_reminder_at is None
            else f"the schedule's first daily run after {to_iso(self.next_reminder_at)}"
        )
        return (
            "No new link comes with this message: an authorization started from a link that "
            "ends unapproved brings a new link at most once in 24 hours. While "
            f"re-authorization is still needed, the daily reminder brings one, the next at {when}."
        )


class Story(NamedTuple):
    """What a notice says: its kind, a subject's few words, the first line, the rest, and the
    facts of its kind (camelCase names)."""

    kind: str
    short: str
    headline: str
    explanation: str
    facts: dict[str, str]


@dataclass(frozen=True, kw_only=True)
class Notice:
    """A need (with a link to act on) or an outcome: one of the kinds below. Its texts are
    templates filled with ``{by}`` (``by DATE`` or ``now``), ``{still}`` and ``{next}`` (the
    deadline as a sentence, when there is one), ``{again}`` and ``{use}`` (the new link, or
    why none comes: ``withheld``) and its string fields: an ``error`` code or identity
    fingerprints, each checked for its form (``ValueError``)."""

    link: Link | None = None
    deadline: float | None = None
    withheld: Withheld | None = None
    kind: ClassVar[str]
    short: ClassVar[str]
    headline: ClassVar[str]
    explanation: ClassVar[str] = ""

    def __post_init__(self) -> None:
        if type(self) is Notice:
            raise TypeError("a notice is one of the kinds of Notice")
        if self.link is not None and self.withheld is not None:
            raise ValueError("a notice carries a link or says it is withheld, not both")
        for name, value in vars(self).items():
            if isinstance(value, str):
                pattern = _ERROR if name == "error" else _FINGERPRINT
                check_form(pattern, value, name.replace("_", " "))

    def story(self) -> Story:
        """The notice's texts, filled in."""
        fields = {name: value for name, value in vars(self).items() if isinstance(value, str)}
        at = "" if self.deadline is None else to_iso(self.deadline)
        words = fields | {"by": f"by {at}" if at else "now"}
        words["still"] = f" It is still needed by {at}." if at else ""
        words["next"] = f" The next re-authorization is due by {at}." if at else ""
        identity = fields.get("identity_fingerprint")
        words["by_whom"] = f" by identity {identity}" if identity else ""
        words["again"] = self._again()
        words["use"] = (
            ", use the new link" if self.link else ", no new link" if self.withheld else ""
        )
        facts = {re.sub(r"_([a-z])", lambda m: m[1].upper(), k): v for k, v in fields.items()}
        short, headline, explanation = (
            " ".join(text.format(**words).split())
            for text in (self.short, self.headline, self.explanation)
        )
        return Story(self.kind, short, headline, explanation, facts)

    def _again(self) -> str:
        """How to start again: with the new link, or why there is none."""
        if self.link is not None:
            return "Start again with the new link."
        return "" if self.withheld is None else self.withheld.sentence()


@dataclass(frozen=True, kw_only=True)
class CredentialRefused(Notice):
    """Need: the identity provider refused the credential (``error``: ``invalid_grant``...);
    ``deadline``: when the service token published now expires."""

    error: str
    link: Link
    kind = "credential-refused"
    short = "refused: re-authorize {by}"
    headline = (
        "Re-authorization needed {by}: the identity provider refused the refresh "
        "credential ({error})."
    )
    explanation = (
        "The stack can no longer refresh its service token; consumers keep the one "
        "published now until it expires."
    )


@dataclass(frozen=True, kw_only=True)
class NeverBootstrapped(Notice):
    """Need: the stack was never authorized."""

    link: Link
    deadline: None = None
    kind = "never-bootstrapped"
    short = "not authorized yet, authorize now"
    headline = "Authorization needed now: the stack has never been authorized."
    explanation = "It holds no refresh credential and publishes no service token until it is."


@dataclass(frozen=True, kw_only=True)
class WarningWindow(Notice):
    """Need: the refresh credential's lifetime ends at ``deadline`` (its ``reauthorize_by``)."""

    link: Link
    deadline: float
    kind = "warning-window"
    short = "re-authorize {by}"
    headline = "Re-authorization needed {by}: the refresh credential's lifetime ends then."
    explanation = (
        "After that the identity provider refuses it and the stack stops refreshing "
        "its service token. The current credential works until a new one is verified."
    )


@dataclass(frozen=True, kw_only=True)
class Authorized(Notice):
    """Outcome: an authorization by the identity ``identity_fingerprint`` (``None`` when its
    tokens name none) replaced the credential; ``deadline``: when the next re-authorization is
    due."""

    identity_fingerprint: str | None = None
    link: None = None
    kind = "authorized"
    short = "re-authorized"
    headline = (
        "Re-authorized: a new authorization{by_whom} was verified and replaced the previous "
        "credential."
    )
    explanation = "Links sent before this message are void.{next}"


@dataclass(frozen=True, kw_only=True)
class Denied(Notice):
    """Outcome: the approval was denied at the identity provider."""

    kind = "denied"
    short = "re-authorization denied"
    headline = "Re-authorization denied at the identity provider: nothing changed."
    explanation = "Nobody approved the code. {again}{still}"


@dataclass(frozen=True, kw_only=True)
class Expired(Notice):
    """Outcome: the code expired before anyone approved it; ``link``: a fresh one."""

    kind = "expired"
    short = "code expired{use}"
    headline = "Re-authorization not completed: the code expired unapproved; nothing changed."
    explanation = "{again}{still}"


@dataclass(frozen=True, kw_only=True)
class IdentityRefused(Notice):
    """Outcome: the code was approved by the identity ``approving_fingerprint``, not by
    ``expected_fingerprint``, the one the stack is authorized as."""

    expected_fingerprint: str
    approving_fingerprint: str
    kind = "identity-refused"
    short = "approval by another identity refused"
    headline = (
        "Re-authorization refused: the code was approved by identity "
        "{approving_fingerprint}, but the stack is authorized as {expected_fingerprint}; "
        "nothing changed."
    )
    explanation = (
        "Approve as the expected identity; to switch the stack to another identity "
        "on purpose, add --new-identity to the command below. {again}{still}"
    )


@dataclass(frozen=True, kw_only=True)
class Failed(Notice):
    """Outcome: the authorization ended without replacing the credential for another reason
    (the code refused, an answer lost with the approval, the new authorization refused by the
    service, or the stack could not finish it in time); ``link``: a fresh one."""

    kind = "failed"
    short = "re-authorization failed{use}"
    headline = (
        "Re-authorization not completed: the stack could not finish the authorization; the "
        "current credential is unchanged."
    )
    explanation = "{again} The stack's status command says more.{still}"


class PublishRequest(TypedDict):
    """The arguments of ``sns.publish`` besides the topic."""

    Subject: str
    Message: str
    MessageStructure: Literal["json"]


def publish_request(stack: Stack, notice: Notice) -> PublishRequest:
    """The ``sns.publish`` arguments (all but ``TopicArn``) that send ``notice`` about
    ``stack`` to every kind of subscriber. ``ValueError`` for a malformed input."""
    text, title = plain_text(stack, notice), subject(stack, notice)
    chat = json.dumps(chat_notification(stack, notice), ensure_ascii=False)
    facts = json.dumps(_facts(stack, notice), ensure_ascii=False)
    sms = title if notice.link is None else f"{title} {notice.link.url}"
    per_protocol = {"default": text, "email": text, "sms": sms, "http": chat, "https": chat}
    per_protocol |= dict.fromkeys(("sqs", "lambda", "email-json", "firehose"), facts)
    message = json.dumps(per_protocol, ensure_ascii=False)
    if len(message.encode("utf-8")) > MAX_MESSAGE_BYTES:
        raise ValueError(f"the message is over {MAX_MESSAGE_BYTES} bytes")
    return {"Subject": title, "Message": message, "MessageStructure": "json"}


def subject(stack: Stack, notice: Notice) -> str:
    """``cmstoken NAME (ACCOUNT, REGION): WHAT``, the name shortened (``...``) to fit."""
    tail = f" ({stack.account}, {stack.region}): {notice.story().short}"
    room = MAX_SUBJECT_LENGTH - len("cmstoken ") - len(tail)
    name = stack.name if len(stack.name) <= room else stack.name[: max(room - 3, 1)] + "..."
    return subject_text(f"cmstoken {name}{tail}")


def subject_text(text: str) -> str:
    """``text`` as a valid subject: printable ASCII on one line (anything else becomes ``?``),
    starting with a letter, digit or punctuation mark, under 100 characters."""
    printable = "".join(char if " " <= char <= "~" else "?" for char in text)
    return printable.strip()[:MAX_SUBJECT_LENGTH].rstrip() or "cmstoken"


def plain_text(stack: Stack, notice: Notice) -> str:
    """The e-mail: what is needed and by when, the stack, the link, the fallback command."""
    story = notice.story()
    lines = [story.headline, "", f"Stack:   {stack.name}", f"Account: {stack.account}"]
    lines += [f"Region:  {stack.region}", "", story.explanation, ""]
    if notice.link is not None:
        lines += [f"Re-authorize (the link works once, until {to_iso(notice.link.expires_at)}):"]
        lines += [notice.link.url, "", _NOTHING, ""]
    if isinstance(notice, Authorized):
        lines += ["To check the stack:", f"  {_status_command(stack)}", ""]
    else:
        lines += [f"Or from a terminal with AWS credentials for account {stack.account}:"]
        lines += [f"  {stack.bootstrap_command}", ""]
    return "\n".join([*lines, "--", "cmstoken sends metadata and links only, never a token."])


def chat_notification(stack: Stack, notice: Notice) -> dict[str, object]:
    """The custom notification Amazon Q Developer in chat applications renders, in its
    documented event format. Markdown that Slack and Microsoft Teams render alike: bare links
    and code spans."""
    story, steps = notice.story(), []
    where = f"Stack `{stack.name}`, account `{stack.account}`, region `{stack.region}`."
    if notice.link is not None:
        expiry = to_iso(notice.link.expires_at)
        steps += [f"Open {notice.link.url} (works once, until {expiry}) and press its button."]
    if isinstance(notice, Authorized):
        steps += [f"To check the stack: `{_status_command(stack)}`"]
    else:
        steps += [f"Or from a terminal: `{stack.bootstrap_command}`"]
    description = [story.headline, where, story.explanation]
    return {
        "version": "1.0",
        "source": "custom",
        "content": {
            "textType": "client-markdown",
            "title": f"cmstoken {stack.name}: {story.short}",
            "description": "\n".join(description + ([] if notice.link is None else [_NOTHING])),
            "nextSteps": steps,
            "keywords": ["cmstoken", story.kind],
        },
        "metadata": {
            # One thread per stack: an outcome lands under the need it answers.
            "threadId": f"cmstoken-reauthorization-{stack.account}-{stack.region}-{stack.name}",
            "summary": subject(stack, notice),
            "eventType": f"cmstoken-{story.kind}",
            "relatedResources": [stack.name],
            "additionalContext": _facts(stack, notice),
        },
    }


def _facts(stack: Stack, notice: Notice) -> dict[str, str]:
    """The notice's facts as strings: for programs, and the chat notification's context."""
    story = notice.story()
    facts = {"kind": story.kind, "stack": stack.name, "account": stack.account}
    facts |= {"region": stack.region, "bootstrapCommand": stack.bootstrap_command}
    if notice.deadline is not None:
        facts["deadline"] = to_iso(notice.deadline)
    if notice.link is not None:
        facts |= {"link": notice.link.url, "linkExpiresAt": to_iso(notice.link.expires_at)}
    if notice.withheld is not None:
        facts["linkWithheld"] = "true"
        if notice.withheld.next_reminder_at is not None:
            facts["nextReminderAt"] = to_iso(notice.withheld.next_reminder_at)
    return facts | story.facts


def _status_command(stack: Stack) -> str:
    return f"cmstoken-admin --stack {stack.name} --region {stack.region} status"
