"""Run the chaos tests N times in a row and tally each test's outcome per run (``make test-chaos-repeat``).

Each run is a fresh ``pytest -m chaos`` process (new workers, a new simulator, the test database created again);
the tally is printed and written to ``var/chaos-repeat.json``. A test counts as flaky if it failed in any run: a
chaos test whose fault may not land, or whose window depends on the machine's speed, shows here.

    python tests/repeat_chaos.py --runs 10 [-k EXPR]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("-k", default="", help="pytest -k expression (default: every chaos test)")
    args = parser.parse_args()
    out = ROOT / "var"
    out.mkdir(exist_ok=True)
    tally: dict[str, list[str]] = defaultdict(list)
    durations: list[float] = []
    for run in range(1, args.runs + 1):
        report = out / f"chaos-run-{run}.xml"
        command = [sys.executable, "-m", "pytest", "-m", "chaos", "-p", "no:cacheprovider", "-q",
                   f"--junitxml={report}", *(["-k", args.k] if args.k else [])]
        started = time.monotonic()
        subprocess.run(command, cwd=ROOT, check=False, stdout=subprocess.DEVNULL)  # noqa: S603
        durations.append(time.monotonic() - started)
        for case in ET.parse(report).getroot().iter("testcase"):  # noqa: S314 - our own pytest report
            name = f"{case.get('classname')}::{case.get('name')}"
            failed = case.find("failure") is not None or case.find("error") is not None
            tally[name].append("skipped" if case.find("skipped") is not None else "failed" if failed else "passed")
        failures = sum(v[-1] == "failed" for v in tally.values())
        print(f"run {run}/{args.runs}: {durations[-1]:.0f} s, {failures} failed", flush=True)
    width = max(len(n) for n in tally)
    for name, outcomes in sorted(tally.items()):
        print(f"{name:<{width}}  {outcomes.count('passed')}/{len(outcomes)} passed")
    (out / "chaos-repeat.json").write_text(json.dumps({"runs": args.runs, "seconds": durations, "tests": tally},
                                                      indent=1))
    return 1 if any("failed" in v for v in tally.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
