"""What the links function may ask of the bootstrap: through the bootstrap's alias ``links``
(template.yaml, ``BootstrapLinksAlias``, the only qualifier the links' role may invoke), an
``action`` and the tag of the link that asks, which the bootstrap records on the authorization
that link starts."""

from __future__ import annotations

import re

LINKS_ALIAS = "links"
# A link's tag (``links.tokens.tag``): 32 hexadecimal digits of a hash of its nonce.
LINK_TAG = re.compile(r"[0-9a-f]{32}")


def is_link_tag(value: object) -> bool:
    """Whether ``value`` (from an event: anything) is a link's tag."""
    return isinstance(value, str) and LINK_TAG.fullmatch(value) is not None
