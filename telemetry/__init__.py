"""Thermal and health history: parsers, storage (raw partitions, rollups, latest values), health flags.

Modules, not code, live here: import from ``telemetry.<module>``.
"""
