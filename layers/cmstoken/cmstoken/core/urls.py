"""The URL rule for every configured or answered address: ``https``, or ``http`` on loopback."""

from __future__ import annotations

from urllib.parse import urlsplit

from cmstoken.core.errors import ConfigurationError

LOOPBACK_HOSTS = frozenset({"127.0.0.1", "::1", "localhost"})


def validate_url(url: str, *, what: str, allow_query: bool = False) -> str:
    """Check the https-or-loopback rule and return ``url`` without a trailing slash.

    ``http`` is allowed only for ``127.0.0.1``, ``::1`` and ``localhost``. A URL must name a host
    and carry no user name, password or fragment, nor a query unless ``allow_query``. ``what``
    names the setting in errors.
    """
    if not isinstance(url, str) or not url.strip():
        raise ConfigurationError(f"{what} is empty; expected an https URL")
    try:
        parts = urlsplit(url.strip())
        host = parts.hostname
        parts.port  # noqa: B018 -- raises ValueError for a bad port
    except ValueError as exc:
        # urlsplit's reason quotes the offending part (a port, say): it is not repeated.
        reason = str(exc)
        problem = (
            "its port is not a number from 0 to 65535"
            if "Port" in reason
            else "its host is a malformed IPv6 address"
            if "IPv6" in reason
            else "it cannot be parsed"
        )
        raise ConfigurationError(f"{what} is not a valid URL ({problem})") from exc
    # Checked first, and no message repeats the URL: it might carry a password.
    if parts.username is not None or parts.password is not None:
        raise ConfigurationError(f"{what} must not contain a user name or password")
    if parts.scheme not in ("https", "http") or not host:
        raise ConfigurationError(f"{what} must be an absolute https URL (https://host/...)")
    if parts.scheme == "http" and host not in LOOPBACK_HOSTS:
        raise ConfigurationError(
            f"{what} must use https (plain http is allowed only for 127.0.0.1, ::1 and localhost)"
        )
    if parts.fragment or (parts.query and not allow_query):
        raise ConfigurationError(f"{what} must not contain a query or fragment")
    return url.strip() if parts.query else url.strip().rstrip("/")
