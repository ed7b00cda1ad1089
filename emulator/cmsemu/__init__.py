"""Emulator of the Cluster Management Service API and its identity provider, for tests and demos."""
