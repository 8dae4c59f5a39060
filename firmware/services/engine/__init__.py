"""The rollout engine: PostgreSQL holds the state machine, Celery only runs short steps.

``rollout_tick()`` (beat, every FLEET_ROLLOUT_TICK_SECONDS, and once after start/resume), under a
transaction-scoped advisory lock so two ticks never overlap:
1. judges the current wave of every running rollout (``gates.wave_gate``): next wave, completed, paused or aborted;
2. admits pending targets of the current wave (whole units: an NVLink domain goes together) up to the per-BMC-class
   concurrency (FLEET_ROLLOUT_BMC_CONCURRENCY);
3. picks due targets ``SELECT ... FOR UPDATE SKIP LOCKED LIMIT n``, leases them (``next_run_at = now + lease``)
   and, once committed, sends them in chunks of FLEET_ROLLOUT_CHUNK (target id, version) pairs.

``target_steps(pairs)`` (the Celery task's body) advances each target by one step:
- a (target, version) whose version moved (stale, redelivered) is skipped;
- a session advisory lock on the server id means one BMC is never driven by two steps at once;
- a side effect (update, activate, reset) is recorded as a ``TargetStep`` with a unique idempotency key and
  committed BEFORE it is sent; a step that finds its key already recorded reconciles with the BMC (the task it
  created, the BMC's task list, the inventory) instead of sending it again;
- the result is written with a compare-and-set ``UPDATE ... WHERE id AND state AND version`` (version + 1);
- nothing sleeps: waiting is ``next_run_at`` (Retry-After honoured). A target that can go on at once is sent
  again straight away (one message per chunk), so a rollout does not wait for the tick between steps.
A worker killed anywhere leaves either the old row (the lease expires, the tick sends the step again, which
reconciles) or the new one (done). docs/firmware.md has the whole argument.

One module per concern, re-exported here (``from firmware.services import engine``, ``engine.rollout_tick``,
``engine.target_steps``, ``engine.send_steps`` keep working):
- ``tick``: ``rollout_tick`` and the wave verdicts; ``admission``: pending -> precheck within concurrency;
- ``dispatch``: leasing due targets, ``send_steps`` (chunks to Celery);
- ``steps``: ``target_steps``, one step per target, draining; ``context``: what a chunk shares, idempotency keys;
- ``side_effects``: staging and activation on the BMC, recorded first; ``verification``: precheck, verify,
  the chunk's successes counted and observed; ``outcomes``: ``Outcome`` and its compare-and-set;
- ``locks``: advisory locks, asynchronous commit.
"""

from firmware.services.engine.dispatch import send_steps
from firmware.services.engine.locks import SERVER_LOCK_NS, SITE_LOCK_NS, TICK_LOCK
from firmware.services.engine.outcomes import Outcome
from firmware.services.engine.steps import StepsResult, target_steps
from firmware.services.engine.tick import TickResult, rollout_tick

__all__ = [
    "SERVER_LOCK_NS", "SITE_LOCK_NS", "TICK_LOCK", "Outcome", "StepsResult", "TickResult", "rollout_tick", "send_steps",
    "target_steps",
]
