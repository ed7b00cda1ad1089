"""In-memory models of the services the rotator talks to, for deterministic simulation tests.

``secretsmanager``: Secrets Manager as the project's ``SecretStore`` uses it (a boto3 client
stand-in). ``upstream``: the identity provider (refresh families) and the service (exchange,
project listing), answering the real clients' HTTP requests through an ``HttpTransport``.
Every call on a model goes through one ``Interceptor`` hook, the place where a scheduler
pauses, crashes or loses the answer. Conformance tests keep the models equal to moto's server
and to the emulator.
"""
