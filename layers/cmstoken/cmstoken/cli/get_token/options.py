"""What ``get-token``'s command line gives (``Options``), and the names its messages use."""

from __future__ import annotations

from dataclasses import dataclass, field

PROG = "get-token"
ENV_BASE_URL = "SERVICE_BASE_URL"
ENV_REFRESH_TOKEN = "CMS_REFRESH_TOKEN"  # noqa: S105 -- the variable's name, not a secret
FROM_STDIN = "-"
FORMATS = ("json", "plain")
REFRESH_FILE_OPTION = "--refresh-file"


@dataclass(frozen=True)
class Options:
    """The parsed command line."""

    base_url: str
    free_trial: bool
    output_format: str
    refresh_token: str | None = field(default=None, repr=False)
    refresh_file: str | None = field(default=None, repr=False)
