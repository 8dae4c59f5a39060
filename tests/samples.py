"""Where the real tool outputs the tests read live: ``tests/fixtures/`` (copied from ``shared/samples``; see
``tests/fixtures/SOURCES.md`` for each file's origin and licence)."""

from pathlib import Path

SAMPLES = Path(__file__).resolve().parent / "fixtures"
