"""Two writers publishing at once (moto in-process): the one that comes second keeps the other's
token when it comes from the same authorization or a newer one, and replaces it when it comes
from an older one, so that the published token and its metadata describe the credential in
use (a bootstrap's new authorization against a rotation of the credential it replaced)."""

from __future__ import annotations

from collections.abc import Iterator

import boto3
import pytest
from moto import mock_aws

from cmstoken.aws.documents import STATUS_REAUTHORIZATION_REQUIRED, ServiceTokenDocument
from cmstoken.aws.secrets import SecretStore
from cmstoken.aws.vault import CredentialVault
from cmstoken.core.settings import Settings
from support import FakeClock

AUTHORIZED = FakeClock().now() - 86_400


def document(token: str, authorized_at: float | None, **fields: object) -> ServiceTokenDocument:
    return ServiceTokenDocument(
        token=token,
        expires_at=AUTHORIZED + 200_000,
        api_url="https://api.example.com/api",
        issued_at=AUTHORIZED + 100_000,
        authorized_at=authorized_at,
        **fields,  # type: ignore[arg-type]
    )


@pytest.fixture
def vault(aws_credentials: None) -> Iterator[CredentialVault]:
    with mock_aws():
        client = boto3.client("secretsmanager")
        client.create_secret(Name="r")
        client.create_secret(Name="s")
        settings = Settings.from_environ(
            {
                "SERVICE_BASE_URL": "https://api.example.com",
                "REFRESH_SECRET_ID": "r",
                "SERVICE_TOKEN_SECRET_ID": "s",
            }
        )
        store = SecretStore()
        store.write("s", document("first", AUTHORIZED - 7200).to_json(), replacing=None)
        yield CredentialVault(settings, store, FakeClock())


def publish_meanwhile(vault: CredentialVault, theirs: ServiceTokenDocument) -> None:
    """Another writer publishes after ``vault`` read the published document."""
    current = vault.store.read("s")
    vault.store.write("s", theirs.to_json(), replacing=current.version_id)


def published_token(vault: CredentialVault) -> str:
    text = vault.store.read("s").text
    assert text is not None
    return ServiceTokenDocument.from_json(text).token


@pytest.mark.parametrize(
    ("theirs_authorized_at", "replaced"),
    [
        (AUTHORIZED - 3600, True),  # a rotation of the credential this authorization replaced
        (None, True),  # a document that does not say (an older stack's): older
        (AUTHORIZED, False),  # the same authorization: theirs is verified too
        (AUTHORIZED + 3600, False),  # a newer authorization: never undone
    ],
)
def test_the_newer_authorization_wins_a_publication_race(
    vault: CredentialVault, theirs_authorized_at: float | None, replaced: bool
) -> None:
    vault.read_published(deadline=FakeClock().now() + 60)
    publish_meanwhile(vault, document("theirs", theirs_authorized_at))
    written = vault.write_published(
        document("ours", AUTHORIZED), FakeClock().now() + 60, newer_wins=True
    )
    assert written is replaced
    assert published_token(vault) == ("ours" if replaced else "theirs")


def test_without_newer_wins_the_first_publication_is_kept(vault: CredentialVault) -> None:
    """The rotator's marking of a refused credential never replaces a token published
    meanwhile: whoever published it holds a working credential (the next due run finishes the
    marking when the credential is still the refused one)."""
    vault.read_published(deadline=FakeClock().now() + 60)
    publish_meanwhile(vault, document("theirs", AUTHORIZED - 3600))
    marking = document("ours", AUTHORIZED, credential_status=STATUS_REAUTHORIZATION_REQUIRED)
    assert vault.write_published(marking, FakeClock().now() + 60) is False
    assert published_token(vault) == "theirs"


@pytest.mark.parametrize(
    ("theirs_authorized_at", "replaced"),
    [
        (AUTHORIZED - 3600, True),  # the credential this authorization replaced
        (AUTHORIZED, True),  # the same authorization
        (AUTHORIZED + 3600, False),  # a newer authorization: never undone
    ],
)
def test_a_writer_that_read_nothing_published_never_undoes_a_newer_authorization(
    vault: CredentialVault, theirs_authorized_at: float, replaced: bool
) -> None:
    """A rotation whose read of the published document answered nothing (an eventually
    consistent read of a secret that had no value before; found by the exploration near the
    version quota) read it again before its write, and wrote over the token a re-authorization
    had published meanwhile with its own, from the credential that authorization replaced."""
    publish_meanwhile(vault, document("theirs", theirs_authorized_at))
    written = vault.write_published(
        document("ours", AUTHORIZED), FakeClock().now() + 60, newer_wins=True
    )
    assert written is replaced
    assert published_token(vault) == ("ours" if replaced else "theirs")
