"""The pilot: profile a decode system, find its largest gaps to the machine's ceilings, explore directions
that close them, keep only what passes the gate (token forcing + a significant speedup), and remember it."""

from specdec.pilot.profile import RoundProfile, copy_bandwidth, profile_system
from specdec.pilot.spec import BuiltSystem, SystemSpec, build

__all__ = ["BuiltSystem", "RoundProfile", "SystemSpec", "build", "copy_bandwidth", "profile_system"]
