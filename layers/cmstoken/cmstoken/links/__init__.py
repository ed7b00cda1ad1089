"""One-click re-authorization: signed, single-use links that start a new device authorization
from the alert, the pages the function URL serves, and the messages that carry the links.

``tokens`` signs and checks links and ``refusals`` says why one is refused; ``stack`` and
``stack_state`` hold what a link is about (the bootstrap's ``status``); ``pages`` and ``web``
answer the function URL; ``messages`` writes the notices and ``notifying`` decides when to
send them; ``events`` reads what invoked the function, ``app`` runs it, and ``portal`` reaches
AWS through the adapters. All but ``portal`` and ``app`` are pure.

Imports ``aws`` and ``core``.
"""
