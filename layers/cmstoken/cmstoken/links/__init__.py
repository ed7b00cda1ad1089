"""One-click re-authorization: signed, single-use links to start a new device authorization
from the alert, the pages the function URL serves, and the messages that carry the links.

``tokens`` signs and checks links (pure), ``messages`` writes the notifications (pure).

Imports ``aws`` and ``core``.
"""
