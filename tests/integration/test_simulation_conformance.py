"""The simulation's models cannot drift: the same operation sequences (generated, bounded,
derandomized) run against the in-memory Secrets Manager and moto's server, and against the
in-memory identity provider and service and the emulator over HTTP, with the same outcomes.

Outcomes compared: Secrets Manager answers (version ids, values, staging labels) and error codes
with their HTTP statuses; refresh answers (which token was issued, as its position among the
tokens issued so far), refusals (status and OAuth error) and lost answers, and after every step
whether each token issued so far is usable and whether its family is revoked; exchanges and
project listings (accepted or the error and status). Device authorizations: device code answers
(user code form, addresses, lifetime, interval), polls (pending, slow down, denied, expired then
invalid, the code's client, lost answers; the tokens of an approval and the subject they name,
which refreshes and exchanges keep), the providers' error descriptions, and after every step
which codes still wait for the user.

Where moto and AWS differ, the model follows AWS and the comparison follows the model: versions
that lost every staging label are deprecated, so AWS leaves them out of ``DescribeSecret`` and
of ``ListSecretVersionIds`` without ``IncludeDeprecated`` while moto lists them with no labels.

Time: the emulator's clock is real time plus an offset, so steps move both clocks by amounts
whose sums stay whole seconds away from every boundary the models compare against (the reuse
interval, the token and family lifetimes).

``make verify`` runs each comparison's full count of sequences, ``make test`` a third
(``support.examples``).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any, cast

import boto3
import pytest
import requests
from botocore.exceptions import ClientError
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cmsemu import Emulator
from cmstoken.core.errors import CmsTokenError
from cmstoken.upstream.http import HttpTransport
from cmstoken.upstream.identity import IdentityClient
from cmstoken.upstream.service import ServiceClient
from simulation.secretsmanager import SecretsManagerModel
from simulation.upstream import (
    BASE_URL,
    CLIENT_ID,
    FREETRIAL_CLIENT_ID,
    ISSUER_URL,
    SCOPE,
    SUBJECT,
    IdentityProviderModel,
    SimulatedUpstream,
    jwt_claims,
)
from simulation.world import SimClock
from support import examples

pytestmark = pytest.mark.integration

CONFORMANCE = settings(
    derandomize=True,
    database=None,
    deadline=None,
    max_examples=examples(40),
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)

# --- Secrets Manager: the model and moto's server ------------------------------------------

SECRETS = ("alpha", "alpha", "alpha", "beta")
TOKENS = tuple(f"{n}{n}{n}{n}{n}{n}{n}{n}-0000-4000-8000-00000000000{n}" for n in range(4))
VALUES = ("one", "two", "three")

Op = tuple[Any, ...]

secret_ops = st.one_of(
    st.tuples(st.just("create"), st.sampled_from(SECRETS), st.sampled_from((None, *VALUES))),
    *[
        st.tuples(
            st.just("put"),
            st.sampled_from(SECRETS),
            st.sampled_from(VALUES),
            st.sampled_from(TOKENS),
        )
    ]
    * 3,
    st.tuples(st.just("get"), st.sampled_from(SECRETS)),
    st.tuples(
        st.just("get_stage"), st.sampled_from(SECRETS), st.sampled_from(("AWSPREVIOUS", "X"))
    ),
    st.tuples(st.just("get_version"), st.sampled_from(SECRETS), st.sampled_from(TOKENS)),
    st.tuples(st.just("describe"), st.sampled_from(SECRETS)),
    st.tuples(st.just("list"), st.sampled_from(SECRETS), st.booleans()),
)


def _secret_call(client: Any, op: Op) -> Any:
    kind, name = op[0], op[1]
    if kind == "create":
        if op[2] is None:
            return client.create_secret(Name=name)
        return client.create_secret(Name=name, SecretString=op[2], ClientRequestToken=TOKENS[0])
    if kind == "put":
        return client.put_secret_value(SecretId=name, SecretString=op[2], ClientRequestToken=op[3])
    if kind == "get":
        return client.get_secret_value(SecretId=name)
    if kind == "get_stage":
        return client.get_secret_value(SecretId=name, VersionStage=op[2])
    if kind == "get_version":
        return client.get_secret_value(SecretId=name, VersionId=op[2])
    if kind == "describe":
        return client.describe_secret(SecretId=name)
    return client.list_secret_version_ids(SecretId=name, IncludeDeprecated=op[2])


def _secret_outcome(client: Any, op: Op, *, moto: bool = False) -> Any:
    """What an operation answered, in the terms compared; with ``moto``, its answer as AWS
    gives it (see the module docstring)."""
    try:
        answer = _secret_call(client, op)
    except ClientError as exc:
        error = exc.response.get("Error", {})
        status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
        return ("error", error.get("Code"), status)
    kind = op[0]
    if kind == "describe":
        stages = answer.get("VersionIdsToStages", {})
        return ("described", sorted((k, sorted(v)) for k, v in stages.items() if v or not moto))
    if kind == "list":
        versions = [
            (v["VersionId"], sorted(v["VersionStages"]))
            for v in answer["Versions"]
            if v["VersionStages"] or op[2] or not moto
        ]
        return ("listed", sorted(versions))
    return (
        "ok",
        answer.get("Name"),
        answer.get("VersionId"),
        answer.get("SecretString"),
        sorted(answer.get("VersionStages", [])),
    )


def _applicable(model: SecretsManagerModel, op: Op) -> bool:
    # moto's server answers ListSecretVersionIds of a missing secret with a 500 (a KeyError).
    return not (op[0] == "list" and op[1] not in model.secrets)


@settings(CONFORMANCE, max_examples=examples(100))
@given(
    ops=st.lists(secret_ops, min_size=1, max_size=16).map(
        lambda ops: [("create", "alpha", None), *ops]
    )
)
def test_the_secrets_manager_model_answers_as_moto_does(moto_server: str, ops: list[Op]) -> None:
    requests.post(f"{moto_server}/moto-api/reset", timeout=10).raise_for_status()
    moto = boto3.client("secretsmanager")
    model = SecretsManagerModel()
    for step, op in enumerate(ops):
        if not _applicable(model, op):
            continue
        expected = _secret_outcome(moto, op, moto=True)
        assert _secret_outcome(model, op) == expected, f"step {step}: {op}"


def test_the_secrets_manager_comparison_sees_every_kind_of_answer(moto_server: str) -> None:
    """The generated sequences above can only be trusted if the comparison distinguishes the
    answers that matter: one fixed sequence, checked against moto's own answers."""
    moto = boto3.client("secretsmanager")
    steps: list[Op] = [
        ("get", "alpha"),
        ("create", "alpha", None),
        ("get", "alpha"),
        ("put", "alpha", "one", TOKENS[1]),
        ("put", "alpha", "one", TOKENS[1]),
        ("put", "alpha", "two", TOKENS[1]),
        ("put", "alpha", "two", TOKENS[2]),
        ("put", "alpha", "three", TOKENS[3]),
        ("get_stage", "alpha", "AWSPREVIOUS"),
        ("get_version", "alpha", TOKENS[1]),
        ("describe", "alpha"),
        ("list", "alpha", True),
        ("list", "alpha", False),
    ]
    outcomes = [_secret_outcome(moto, op, moto=True) for op in steps]
    assert outcomes == [
        ("error", "ResourceNotFoundException", 404),
        ("ok", "alpha", None, None, []),
        ("error", "ResourceNotFoundException", 404),
        ("ok", "alpha", TOKENS[1], None, ["AWSCURRENT"]),
        ("ok", "alpha", TOKENS[1], None, ["AWSCURRENT"]),
        ("error", "ResourceExistsException", 400),
        ("ok", "alpha", TOKENS[2], None, ["AWSCURRENT"]),
        ("ok", "alpha", TOKENS[3], None, ["AWSCURRENT"]),
        ("ok", "alpha", TOKENS[2], "two", ["AWSPREVIOUS"]),
        ("ok", "alpha", TOKENS[1], "one", []),
        ("described", [(TOKENS[2], ["AWSPREVIOUS"]), (TOKENS[3], ["AWSCURRENT"])]),
        (
            "listed",
            sorted([(TOKENS[1], []), (TOKENS[2], ["AWSPREVIOUS"]), (TOKENS[3], ["AWSCURRENT"])]),
        ),
        ("listed", [(TOKENS[2], ["AWSPREVIOUS"]), (TOKENS[3], ["AWSCURRENT"])]),
    ]
    model = SecretsManagerModel()
    assert [_secret_outcome(model, op) for op in steps] == outcomes


# --- the identity provider and service: the models and the emulator --------------------------

# Steps of 25 and 50 seconds and of a day and a second never add up to within a second of the
# 60 s reuse interval, the day-long token lifetimes, or these family lifetimes (short, so that
# short sequences reach them).
SMALL_STEPS = (25, 50)
BIG_STEP = 86400 + 1
IDLE_LIFETIME = 2 * 86400 + 13
ABSOLUTE_LIFETIME = 4 * 86400 + 13
REUSE_INTERVALS = (0, 60)
CLIENTS = (CLIENT_ID, FREETRIAL_CLIENT_ID, "stranger")

refresh_ops = st.tuples(
    st.just("refresh"),
    st.integers(0, 3),  # 0: the newest token issued, 1: the one before, ...
    st.sampled_from((CLIENT_ID, CLIENT_ID, *CLIENTS)),
    # True: the answer is lost after the provider acted; "busy": 503 without acting
    st.sampled_from((False, False, True, "busy")),
)
upstream_ops = st.one_of(
    refresh_ops,
    refresh_ops,
    refresh_ops,
    st.tuples(st.just("authorize"), st.sampled_from(CLIENTS[:2])),
    st.tuples(st.just("advance"), st.sampled_from((*SMALL_STEPS, BIG_STEP))),
    st.tuples(st.just("exchange"), st.integers(0, 7)),
    st.tuples(st.just("exchange_forged")),
    st.tuples(st.just("projects"), st.integers(0, 7)),
)


class Upstream:
    """One side of the comparison: the real clients, and how to drive and inspect its
    identity provider. Tokens are known by their position in the order they were issued."""

    def __init__(
        self,
        identity: IdentityClient,
        service: ServiceClient,
        *,
        authorize: Callable[[str], dict[str, Any]],
        advance: Callable[[float], None],
        lose_refresh: Callable[[], None],
        busy_refresh: Callable[[], None],
        usable: Callable[[str], bool],
        revoked: Callable[[str], bool],
    ) -> None:
        self.identity = identity
        self.service = service
        self.authorize = authorize
        self.advance = advance
        self.lose_refresh = lose_refresh
        self.busy_refresh = busy_refresh
        self.usable = usable
        self.revoked = revoked
        self.refresh_tokens: list[str] = []
        self.access_tokens: list[str] = []
        self.service_tokens: list[str] = []

    def step(self, op: Op) -> Any:
        kind = op[0]
        if kind == "authorize":
            tokens = self.authorize(op[1])
            self.refresh_tokens.append(tokens["refresh_token"])
            self.access_tokens.append(tokens["access_token"])
            return ("authorized", len(self.refresh_tokens) - 1)
        if kind == "advance":
            self.advance(op[1])
            return ("advanced", op[1])
        if kind == "refresh":
            if not self.refresh_tokens:
                return ("nothing to refresh",)
            token = self.refresh_tokens[-1 - op[1] % len(self.refresh_tokens)]
            if op[3] == "busy":
                self.busy_refresh()
            elif op[3]:
                self.lose_refresh()
            return self._call(
                lambda: self.identity.refresh(client_id=op[2], refresh_token=token),
                lambda answer: self._issued(answer.refresh_token, answer.access_token),
            )
        if kind in ("exchange", "exchange_forged"):
            if kind == "exchange" and not self.access_tokens:
                return ("nothing to exchange",)
            raw = (
                "forged"
                if kind == "exchange_forged"
                else self.access_tokens[op[1] % len(self.access_tokens)]
            )
            return self._call(
                lambda: self.service.exchange(raw, fallback_expires_at=0),
                lambda answer: self._minted(answer.token),
            )
        if not self.service_tokens:
            return ("nothing to list with",)
        bearer = self.service_tokens[op[1] % len(self.service_tokens)]
        return self._call(lambda: self.service.list_projects(bearer), lambda answer: len(answer))

    def tokens_state(self) -> list[tuple[bool, bool]]:
        return [(self.usable(t), self.revoked(t)) for t in self.refresh_tokens]

    def _issued(self, refresh_token: str, access_token: str | None) -> Any:
        known = refresh_token in self.refresh_tokens
        self.refresh_tokens.append(refresh_token)
        if access_token is not None:
            self.access_tokens.append(access_token)
        return ("issued", len(self.refresh_tokens) - 1, known)

    def _minted(self, token: str) -> Any:
        self.service_tokens.append(token)
        return ("minted", len(self.service_tokens) - 1)

    @staticmethod
    def _call(call: Callable[[], Any], describe: Callable[[Any], Any]) -> Any:
        try:
            answer = call()
        except CmsTokenError as exc:
            return (
                "error",
                type(exc).__name__,
                getattr(exc, "status", None),
                getattr(exc, "code", None),
                getattr(exc, "outcome_unknown", None),
            )
        return describe(answer)


def emulator_side(emulator: Emulator, reuse_interval: float) -> Upstream:
    emulator.reset()
    emulator.config.refresh_reuse_interval = reuse_interval
    emulator.config.refresh_idle_lifetime = IDLE_LIFETIME
    emulator.config.refresh_absolute_lifetime = ABSOLUTE_LIFETIME
    clock = SimClock()  # only stamps answers; the emulator keeps its own time
    transport = HttpTransport()
    return Upstream(
        IdentityClient(emulator.issuer_url, transport=transport, clock=clock),
        ServiceClient(emulator.base_url, transport=transport, clock=clock),
        authorize=lambda client_id: emulator.issue_tokens(client_id=client_id),
        advance=emulator.advance,
        lose_refresh=lambda: emulator.inject("refresh", "drop"),
        busy_refresh=lambda: emulator.inject(
            "refresh", "status", status=503, error="temporarily_unavailable"
        ),
        usable=emulator.refresh_token_valid,
        revoked=emulator.family_revoked,
    )


def model_side(reuse_interval: float) -> Upstream:
    clock = SimClock()
    model = IdentityProviderModel(
        clock,
        reuse_interval=reuse_interval,
        idle_lifetime=IDLE_LIFETIME,
        absolute_lifetime=ABSOLUTE_LIFETIME,
    )
    transport = SimulatedUpstream(model)
    return Upstream(
        IdentityClient(ISSUER_URL, transport=transport, clock=clock),
        ServiceClient(BASE_URL, transport=transport, clock=clock),
        authorize=lambda client_id: model.authorize(client_id),
        advance=clock.advance,
        lose_refresh=lambda: transport.lose("refresh"),
        busy_refresh=lambda: transport.busy("refresh"),
        usable=model.usable,
        revoked=model.family_revoked,
    )


def run_both(emulator: Emulator, reuse_interval: float, ops: list[Op]) -> list[Any]:
    """Run ``ops`` on both sides, asserting equal outcomes step by step; the outcomes."""
    real, model = emulator_side(emulator, reuse_interval), model_side(reuse_interval)
    outcomes = []
    for step, op in enumerate(ops):
        expected = (real.step(op), real.tokens_state())
        assert (model.step(op), model.tokens_state()) == expected, f"step {step}: {op}"
        outcomes.append(expected)
    return outcomes


@settings(CONFORMANCE, max_examples=examples(150))
@given(
    reuse_interval=st.sampled_from(REUSE_INTERVALS),
    ops=st.lists(upstream_ops, min_size=1, max_size=16).map(
        lambda ops: [("authorize", CLIENT_ID), *ops]
    ),
)
def test_the_identity_provider_model_answers_as_the_emulator_does(
    emulator: Emulator, reuse_interval: float, ops: list[Op]
) -> None:
    run_both(emulator, reuse_interval, ops)


def test_the_upstream_comparison_sees_every_kind_of_answer(emulator: Emulator) -> None:
    """One fixed sequence through every outcome the generated ones rely on telling apart."""
    outcomes = run_both(
        emulator,
        60,
        [
            ("authorize", CLIENT_ID),
            ("refresh", 0, CLIENT_ID, False),  # token 1
            ("refresh", 1, CLIENT_ID, False),  # token 0 again within the interval: token 2
            ("advance", 50),
            ("advance", 25),
            ("refresh", 2, CLIENT_ID, False),  # token 0 again after it: the family is revoked
            ("authorize", FREETRIAL_CLIENT_ID),  # token 3
            ("refresh", 0, "stranger", False),
            ("refresh", 0, CLIENT_ID, False),
            ("refresh", 0, FREETRIAL_CLIENT_ID, True),  # acted, answer lost
            ("exchange", 3),
            ("exchange_forged",),
            ("projects", 0),
            ("advance", BIG_STEP),
            ("projects", 0),
            ("refresh", 0, FREETRIAL_CLIENT_ID, "busy"),  # 503, nothing done
        ],
    )
    steps = [outcome for outcome, _ in outcomes]
    assert steps[1] == ("issued", 1, False)
    assert steps[2] == ("issued", 2, False)
    assert steps[5] == ("error", "InvalidGrantError", 403, "invalid_grant", None)
    assert steps[7] == ("error", "InvalidClientError", 401, "invalid_client", None)
    assert steps[8] == ("error", "InvalidGrantError", 403, "invalid_grant", None)
    assert steps[9] == ("error", "UpstreamConnectionError", None, None, True)
    assert steps[10] == ("minted", 0)
    assert steps[11][:3] == ("error", "ExchangeFailedError", 500)  # the documented refusal
    assert steps[12] == 1
    assert steps[14][:3] == ("error", "TokenRefusedError", 401)
    assert outcomes[5][1] == [(False, True), (False, True), (False, True)]
    assert outcomes[9][1][3] == (False, False)  # spent by the lost refresh, family alive
    assert steps[15] == ("error", "ServerError", 503, "temporarily_unavailable", False)
    assert outcomes[15][1] == outcomes[14][1]  # a busy provider changed nothing


# --- the device authorization: the model and the emulator ------------------------------------

# Whole-second steps: the device flow only compares times the client reaches later (polls,
# expiry), so the emulator's real elapsed time (well under a second) never crosses a boundary
# the model sits exactly on. 5 is the poll interval, 900 the code's lifetime.
DEVICE_STEPS = (1, 2, 5, 7, 300, 900)
OTHER_SUBJECT = "auth0|another-user"

DEVICE_OPS: dict[str, st.SearchStrategy[Op]] = {
    "start": st.tuples(
        st.just("start"),
        st.sampled_from((CLIENT_ID, CLIENT_ID, *CLIENTS)),
        st.sampled_from((True, True, True, False)),  # False: an audience the service is not
        st.sampled_from((True, True, True, False)),  # False: no scope
    ),
    "poll": st.tuples(
        st.just("poll"),
        st.integers(0, 3),  # 0: the newest device code, 1: the one before, ...
        st.sampled_from((None,) * 6 + CLIENTS[1:]),  # None: the code's own client
        st.sampled_from((False, False, False, False, True)),  # True: the answer is lost
    ),
    "approve": st.tuples(
        st.just("approve"),
        st.integers(0, 3),
        st.sampled_from((None, None, OTHER_SUBJECT)),
        st.booleans(),  # typed in lower case with a space, as a user might
    ),
    "deny": st.tuples(st.just("deny"), st.integers(0, 3)),
    "advance": st.tuples(st.just("advance"), st.sampled_from(DEVICE_STEPS)),
    "refresh": st.tuples(st.just("refresh"), st.integers(0, 2), st.just(CLIENT_ID), st.just(False)),
    "exchange": st.tuples(st.just("exchange"), st.integers(0, 7)),
    "subjects": st.tuples(st.just("subjects")),
}
# How often each kind comes (one_of picks its alternatives alike, whatever their repeats).
DEVICE_WEIGHTS = {"start": 2, "poll": 6, "approve": 3, "deny": 1, "advance": 5} | dict.fromkeys(
    ("refresh", "exchange", "subjects"), 1
)
device_ops = st.sampled_from(
    [kind for kind, weight in DEVICE_WEIGHTS.items() for _ in range(weight)]
).flatmap(DEVICE_OPS.__getitem__)


class DeviceUpstream(Upstream):
    """``Upstream`` with the device flow: codes are known by their position in the order they
    were issued, subjects as ``default`` (the side's provider user) or as given."""

    def __init__(
        self,
        base: Upstream,
        *,
        issuer_url: str,
        approve: Callable[[str, str | None], None],
        deny: Callable[[str], None],
        lose_device_token: Callable[[], None],
        pending: Callable[[], list[str]],
        default_subject: str,
    ) -> None:
        super().__init__(
            base.identity,
            base.service,
            authorize=base.authorize,
            advance=base.advance,
            lose_refresh=base.lose_refresh,
            busy_refresh=base.busy_refresh,
            usable=base.usable,
            revoked=base.revoked,
        )
        self.issuer_url = issuer_url
        self.approve = approve
        self.deny = deny
        self.lose_device_token = lose_device_token
        self.pending = pending
        self.default_subject = default_subject
        self.codes: list[tuple[str, str, str]] = []  # device code, user code, client id
        self.messages: list[str] = []

    def step(self, op: Op) -> Any:
        kind = op[0]
        if kind == "start":
            _, client_id, good_audience, scope = op
            audience = self.service.api_url if good_audience else self.service.api_url + "/v2"
            return self._device_call(
                lambda: self.identity.request_device_code(
                    client_id=client_id, scope=SCOPE if scope else "", audience=audience
                ),
                lambda answer: self._started(answer, client_id),
            )
        if kind in ("poll", "approve", "deny") and not self.codes:
            return ("no device code",)
        if kind == "poll":
            device_code, _, own_client = self.codes[-1 - op[1] % len(self.codes)]
            if op[3]:
                self.lose_device_token()
            return self._device_call(
                lambda: self.identity.poll_device_token(
                    client_id=op[2] or own_client, device_code=device_code
                ),
                lambda answer: (
                    *self._issued(answer.refresh_token, answer.access_token),
                    self._subject(answer.access_token),
                    self._subject(answer.id_token),
                    answer.scope,
                    round(answer.access_token_expires_at - answer.received_at),
                    answer.expiry_source,
                    answer.problems,
                ),
            )
        if kind == "approve":
            user_code = self.codes[-1 - op[1] % len(self.codes)][1]
            typed = user_code.lower().replace("-", " ") if op[3] else user_code
            self.approve(typed, op[2])
            return ("approved",)
        if kind == "deny":
            self.deny(self.codes[-1 - op[1] % len(self.codes)][1])
            return ("denied",)
        if kind == "subjects":
            return (
                "subjects",
                [self._subject(t) for t in self.access_tokens + self.service_tokens],
            )
        return super().step(op)

    def codes_state(self) -> list[int]:
        """The positions of the codes still waiting for the user."""
        waiting = set(self.pending())
        return [i for i, (_, user_code, _) in enumerate(self.codes) if user_code in waiting]

    def _started(self, answer: Any, client_id: str) -> Any:
        self.codes.append((answer.device_code, answer.user_code, client_id))
        uri = answer.verification_uri
        return (
            "started",
            len(self.codes) - 1,
            re.fullmatch(r"[BCDFGHJKLMNPQRSTVWXZ]{4}-[BCDFGHJKLMNPQRSTVWXZ]{4}", answer.user_code)
            is not None,
            uri == self.issuer_url + "activate",
            answer.verification_uri_complete == f"{uri}?user_code={answer.user_code}",
            answer.expires_in,
            answer.interval,
            len({code for _, code, _ in self.codes}) == len(self.codes),
        )

    def _subject(self, token: str | None) -> str | None:
        if token is None:
            return None
        subject = jwt_claims(token).get("sub")
        return "default" if subject == self.default_subject else subject

    def _device_call(self, call: Callable[[], Any], describe: Callable[[Any], Any]) -> Any:
        """As ``_call``; the messages of the answered errors (which carry the provider's
        ``error_description``) are kept in ``messages``, the side's addresses left out."""

        def described() -> Any:
            try:
                return call()
            except CmsTokenError as exc:
                if getattr(exc, "status", None) is not None:
                    self.messages.append(str(exc).replace(self.service.api_url, "{api_url}"))
                raise

        return self._call(described, describe)


def emulator_device_side(emulator: Emulator) -> DeviceUpstream:
    base = emulator_side(emulator, 0)

    def pending() -> list[str]:
        state = requests.get(f"{emulator.base_url}/_emulator/state", timeout=10).json()
        codes: list[str] = state["pending_user_codes"]
        return codes

    return DeviceUpstream(
        base,
        issuer_url=emulator.issuer_url,
        approve=emulator.approve,
        deny=emulator.deny,
        lose_device_token=lambda: emulator.inject("device_token", "drop"),
        pending=pending,
        default_subject=emulator.subject,
    )


def model_device_side() -> DeviceUpstream:
    base = model_side(0)
    transport = cast(SimulatedUpstream, base.identity.transport)
    model = transport.identity
    return DeviceUpstream(
        base,
        issuer_url=ISSUER_URL,
        approve=model.approve,
        deny=model.deny,
        lose_device_token=lambda: transport.lose("device_token"),
        pending=model.pending_user_codes,
        default_subject=SUBJECT,
    )


def run_device_flows(emulator: Emulator, ops: list[Op]) -> list[Any]:
    """Run ``ops`` on both sides, asserting equal outcomes (with the codes still waiting and the
    refresh tokens' states) step by step; the outcomes."""
    real, model = emulator_device_side(emulator), model_device_side()
    outcomes = []
    for step, op in enumerate(ops):
        expected = (real.step(op), real.codes_state(), real.tokens_state())
        actual = (model.step(op), model.codes_state(), model.tokens_state())
        assert actual == expected, f"step {step}: {op}"
        assert model.messages == real.messages, f"step {step}: {op}"
        outcomes.append(expected)
    return outcomes


@settings(CONFORMANCE, max_examples=examples(120))
@given(
    ops=st.lists(device_ops, min_size=6, max_size=24).map(
        lambda ops: [("start", CLIENT_ID, True, True), *ops]
    ),
)
def test_the_device_authorization_model_answers_as_the_emulator_does(
    emulator: Emulator, ops: list[Op]
) -> None:
    run_device_flows(emulator, ops)


def test_the_device_flow_comparison_sees_every_kind_of_answer(emulator: Emulator) -> None:
    """One fixed sequence through every device flow outcome the generated ones rely on telling
    apart."""
    outcomes = run_device_flows(
        emulator,
        [
            ("start", CLIENT_ID, True, True),  # code 0
            ("poll", 0, None, False),  # pending
            ("poll", 0, None, False),  # too soon: slow down (interval 10)
            ("advance", 7),
            ("poll", 0, None, False),  # 7 s < 10 s: slow down again (interval 15)
            ("advance", 300),
            ("poll", 0, None, False),  # pending
            ("approve", 0, OTHER_SUBJECT, True),
            ("advance", 300),
            ("poll", 0, FREETRIAL_CLIENT_ID, False),  # another client's poll
            ("poll", 0, None, False),  # approved: tokens naming the other subject
            ("poll", 0, None, False),  # consumed
            ("refresh", 0, CLIENT_ID, False),  # the family keeps its subject
            ("exchange", 1),
            ("subjects",),
            ("start", "stranger", True, True),
            ("start", CLIENT_ID, False, True),
            ("start", CLIENT_ID, True, False),
            ("start", FREETRIAL_CLIENT_ID, True, True),  # code 1
            ("deny", 0),
            ("advance", 5),
            ("poll", 0, None, False),  # denied
            ("start", CLIENT_ID, True, True),  # code 2
            ("poll", 0, None, True),  # acted (pending), answer lost
            ("advance", 300),
            ("advance", 300),
            ("advance", 300),
            ("poll", 0, None, False),  # expired
            ("poll", 0, None, False),  # then invalid
            ("start", CLIENT_ID, True, True),  # code 3
            ("approve", 0, None, False),
            ("advance", 5),
            ("poll", 0, None, False),  # approved as the provider's user
        ],
    )
    steps = [outcome for outcome, _, _ in outcomes]
    assert steps[0] == ("started", 0, True, True, True, 900, 5, True)
    assert outcomes[0][1] == [0]
    assert steps[1] == ("error", "AuthorizationPendingError", 403, "authorization_pending", None)
    assert steps[2] == ("error", "SlowDownError", 429, "slow_down", None)
    assert steps[4] == steps[2]
    assert steps[6] == steps[1]
    assert outcomes[7][1] == []  # approved: no longer waiting
    assert steps[9] == ("error", "InvalidClientError", 401, "invalid_client", None)
    assert steps[10] == (
        "issued",
        0,
        False,
        OTHER_SUBJECT,
        OTHER_SUBJECT,
        SCOPE,
        86400,
        "expires_in",
        (),
    )
    assert steps[11] == ("error", "InvalidGrantError", 403, "invalid_grant", None)
    assert steps[12] == ("issued", 1, False)
    assert steps[14] == ("subjects", [OTHER_SUBJECT, OTHER_SUBJECT, OTHER_SUBJECT])
    assert steps[15] == ("error", "InvalidClientError", 401, "invalid_client", None)
    assert steps[16][:4] == ("error", "AccessDeniedError", 403, "access_denied")
    assert steps[17][:4] == ("error", "RequestRejectedError", 400, "invalid_request")
    assert steps[21] == ("error", "AccessDeniedError", 403, "access_denied", None)
    assert steps[23] == ("error", "UpstreamConnectionError", None, None, True)
    assert steps[27] == ("error", "ExpiredTokenError", 403, "expired_token", None)
    assert steps[28] == ("error", "InvalidGrantError", 403, "invalid_grant", None)
    assert steps[32][3:5] == ("default", "default")
