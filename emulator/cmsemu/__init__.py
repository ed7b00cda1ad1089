"""Emulator of the Cluster Management Service API and its identity provider, for tests and demos."""

from cmsemu.config import EmulatorConfig
from cmsemu.emulator import Emulator
from cmsemu.records import RequestRecord

__all__ = ["Emulator", "EmulatorConfig", "RequestRecord"]
