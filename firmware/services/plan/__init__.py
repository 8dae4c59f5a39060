"""Rollout strategy and wave planning: deterministic, previewable, set-based.

``plan_preview(bundle=, selector=, strategy=)`` computes a :class:`Plan` without writing anything (the dry run);
``firmware.services.rollout.rollout_plan`` persists the same plan as waves and targets. Same inputs, same plan,
same ``plan_hash``.

How a plan is made (docs/firmware.md):
1. Servers: the GPU list's filters (``inventory.filters.GpuFilter``) select GPUs; their servers of the bundle's
   platform are the candidates. Three set-based reads (servers with their domains, GPU firmware columns, server
   firmware observations), then pure Python.
2. Already compliant servers (every bundle component already at the bundle's version) are skipped.
3. Units: servers of one NVLink domain form one unit (``unit_key`` ``nvl:<id>``): they always go in one wave.
4. Canary: one unit for every distinct upgrade path (platform x current firmware tuple x site), the unit chosen
   by a stable hash of (seed, unit), so every path is tried once before any wave.
5. Waves: the other units in hash order, cumulative percentages (``[1, 5, 25, 100]``), each wave holding at most
   ``domain_caps[d]`` servers of any one rack / power feed / row / site (NVLink domains count as units). A unit
   that does not fit waits for the next wave; extra waves are added until every unit is placed. A unit larger
   than a cap on its own goes into a wave where its domain is still empty.

Modules: :mod:`.strategy` (the strategy and the target selector, validated), :mod:`.waves` (the plan). Import
from ``firmware.services.plan``.
"""

from firmware.services.plan.strategy import (
    DOMAINS,
    Strategy,
    StrategySerializer,
    selector_filter,
    strategy_parse,
)
from firmware.services.plan.waves import (
    GPU_COLUMNS,
    PLANNER_VERSION,
    Plan,
    PlannedServer,
    PlannedWave,
    plan_preview,
    plan_servers,
)

__all__ = ["DOMAINS", "GPU_COLUMNS", "PLANNER_VERSION", "Plan", "PlannedServer", "PlannedWave", "Strategy",
           "StrategySerializer", "plan_preview", "plan_servers", "selector_filter", "strategy_parse"]
