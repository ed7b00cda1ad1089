"""Shapes of a 2xx token answer for property tests: valid, RFC-minimal (RFC 6749 5.1: only
``access_token`` and ``token_type`` are required), sloppy and hostile, as edits the emulator's
``rewrite`` fault applies to the real answer (or a whole replacement body)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from hypothesis import strategies as st

KEEP: Any = ("keep",)
DROP: Any = ("drop",)
DEEP = "[" * 100_000 + "]" * 100_000  # unreadable: deeper than any JSON reader goes
NESTED = "[" * 50 + "]" * 50  # nested, but readable


def set_(value: Any) -> tuple[str, Any]:
    return ("set", value)


def raw(text: str) -> tuple[str, str]:
    return ("raw", text)


EDITS: dict[str, list[Any]] = {
    # RFC 6749 5.1: RECOMMENDED; sloppy: a string; hostile: NaN, 1e400, 10**12, -Infinity
    "expires_in": [
        KEEP,
        DROP,
        set_("86400"),
        set_(" 3600 "),
        set_(0),
        set_(-5),
        set_(1.5),
        set_(True),
        set_(None),
        set_(10**12),
        set_(10**30),
        raw("NaN"),
        raw("1e400"),
        raw("-Infinity"),
    ],
    "scope": [KEEP, DROP, set_(""), set_(None), set_(42)],
    "token_type": [KEEP, KEEP, DROP, set_("bearer"), set_("mac"), set_(None)],
    "access_token": [KEEP, KEEP, KEEP, DROP, set_(None), set_(""), set_(7)],
    "refresh_token": [KEEP, KEEP, KEEP, KEEP, DROP, set_(None), set_(""), set_(7)],
    "id_token": [KEEP, DROP, set_(None), raw("1e400")],
    "padding": [DROP, raw(NESTED), raw("NaN"), set_({"a": [1, {"b": None}]})],
}
BODIES = [DEEP, "NaN", "[]", "", '{"refresh_token": ', "<html>signed in</html>"]


@dataclass(frozen=True)
class AnswerShape:
    """One generated answer: field edits, or a whole body instead."""

    edits: dict[str, Any]
    body: str | None

    @property
    def carries_refresh_token(self) -> bool:
        return self.body is None and self.edits["refresh_token"] == KEEP

    def rewrite(self) -> dict[str, Any] | None:
        """The emulator's ``rewrite`` fault parameters; ``None`` for the valid answer."""
        if self.body is not None:
            return {"body": self.body}
        drop = [name for name, edit in self.edits.items() if edit == DROP]
        values = {name: edit[1] for name, edit in self.edits.items() if edit[0] == "set"}
        texts = {name: edit[1] for name, edit in self.edits.items() if edit[0] == "raw"}
        if not values and not texts and drop == ["padding"]:
            return None  # the valid answer, as the identity provider sends it
        return {"drop": drop, "set": values, "raw": texts}


SHAPES: dict[str, dict[str, list[Any]]] = {
    "valid": {},
    "rfc-minimal": {"expires_in": [KEEP, DROP], "scope": [KEEP, DROP], "id_token": [KEEP, DROP]},
    "sloppy": {
        "expires_in": [set_("86400"), set_(" 3600 "), set_(1.5), set_(0)],
        "scope": [set_(""), set_(None)],
        "token_type": [KEEP, set_("bearer")],
    },
    "hostile": EDITS,
}


@st.composite
def answer_shapes(draw: st.DrawFn) -> AnswerShape:
    """A valid, RFC-minimal, sloppy or hostile answer."""
    shape = draw(st.sampled_from(sorted(SHAPES)))
    edits = dict.fromkeys(EDITS, KEEP) | {"padding": DROP}
    for name, choices in SHAPES[shape].items():
        edits[name] = draw(st.sampled_from(choices))
    body = draw(st.sampled_from([None] * 6 + BODIES)) if shape == "hostile" else None
    return AnswerShape(edits=edits, body=body)
