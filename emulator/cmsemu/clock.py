"""The emulator's clock: real time plus an offset that tests move forward."""

import time


class Clock:
    """Epoch seconds as the emulator sees them."""

    def __init__(self) -> None:
        self.offset = 0.0

    def now(self) -> float:
        """Return real time plus the offset."""
        return time.time() + self.offset

    def advance(self, seconds: float) -> None:
        """Move the clock forward; it never goes back."""
        if seconds < 0:
            raise ValueError("the emulator clock only moves forward")
        self.offset += seconds

    def reset(self) -> None:
        """Return to real time."""
        self.offset = 0.0
