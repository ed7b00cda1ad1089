"""Fixed-window rate limiting of the token endpoint, with Auth0's X-RateLimit-* headers."""

import math


class RateLimiter:
    """Request counts per key (client IP, credential) in the current window."""

    def __init__(self) -> None:
        self._windows: dict[tuple[str, str], tuple[int, int]] = {}

    def hit(
        self, key: tuple[str, str], now: float, limit: int, window: int, retry_after: bool
    ) -> tuple[bool, dict[str, str]]:
        """Count one request; return whether it is allowed and the headers to send."""
        start = int(now // window) * window
        window_start, count = self._windows.get(key, (start, 0))
        count = count + 1 if window_start == start else 1
        self._windows[key] = (start, count)
        reset = start + window
        headers = {
            "X-RateLimit-Limit": str(limit),
            "X-RateLimit-Remaining": str(max(0, limit - count)),
            "X-RateLimit-Reset": str(reset),
        }
        allowed = count <= limit
        if not allowed and retry_after:
            headers["Retry-After"] = str(max(1, math.ceil(reset - now)))
        return allowed, headers
