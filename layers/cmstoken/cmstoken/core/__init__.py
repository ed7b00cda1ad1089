"""The core every layer uses: errors, the clock, settings, URL rules, retries, redaction,
token lifetimes and the rotator's trigger events.

Imports the standard library only (and nothing of ``cmstoken`` outside ``core``).
"""
