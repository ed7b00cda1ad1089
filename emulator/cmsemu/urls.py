"""The addresses the emulator answers on, derived from its base URL."""

from dataclasses import dataclass


@dataclass(frozen=True)
class Urls:
    """{base_url} and the addresses built from it."""

    base_url: str

    @property
    def issuer_url(self) -> str:
        """The issuerUri, with a trailing slash like a real Auth0 tenant."""
        return f"{self.base_url}/idp/"

    @property
    def api_url(self) -> str:
        """The audience, {base_url}/api."""
        return f"{self.base_url}/api"

    @property
    def verification_uri(self) -> str:
        """Where the user enters the user code."""
        return f"{self.base_url}/idp/activate"
