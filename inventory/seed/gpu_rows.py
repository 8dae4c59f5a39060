"""Building the demo fleet, one GPU at a time: its identity, state history, moves and firmware, and its row.
A part of :class:`inventory.seed.builder.Builder` (its base class), kept apart to keep modules small."""

from __future__ import annotations

import datetime as dt
import random
import uuid
from collections.abc import Sequence

from inventory.models import (
    FirmwareComponent,
    GpuModel,
    MoveKind,
)
from inventory.seed.catalog import (
    DAY,
    DRAIN_REASONS,
    HGX_BUSES,
    HOUR,
    LAG,
    RMA_REASONS,
    S,
    Sku,
)
from inventory.seed.plans import (
    MASKED_SERIAL,
    MASKED_UUID,
    UNPLACED,
    ServerPlan,
    weighted,
)


class GpuRows:
    """The per-GPU half of the builder: it reads the builder's random stream, ids, clock and row buffers."""

    rng: random.Random
    ids: list[int]
    suffixes: list[int]
    tags: int
    now: dt.datetime
    anchor: dt.datetime
    states: list[tuple]
    moves: list[tuple]
    firmware: list[tuple]

    def history(self, gpu_id: int, steps: Sequence[tuple[str, dt.datetime, str]]) -> dt.datetime:
        """State rows for ``steps`` of (to_state, at, reason); returns when the last one happened."""
        before = ""
        for to_state, at, reason in steps:
            self.states.append((gpu_id, before, to_state, self.actor_name, reason, at))
            before = to_state
        return steps[-1][1]

    def move(self, gpu_id: int, kind: str, at: dt.datetime, p: ServerPlan, k: int, *, out: bool = False) -> None:
        place = (p.id, f"00000000:{HGX_BUSES[k]}:00.0", k + 1)
        empty = (None, "", None)
        self.moves.append((gpu_id, kind, *(place if out else empty), *(empty if out else place), self.actor_name,
                           "", at))

    def observe(self, gpu_id: int, versions: Sequence[tuple[str, str, dt.datetime, dt.datetime]]) -> None:
        for component, version, first, last in versions:
            self.firmware.append((gpu_id, None, component, version, "nvidia-smi-xml", first, last))

    def identity(self, i: int, sku: Sku, *, serial: bool = True, uuid_known: bool = True) -> tuple:
        """(serial, serial_raw, uuid, uuid_raw, identity_masked); a UUID is drawn either way (stable streams).
        The ``*_raw`` columns hold what a tool reported only when it was masked (as the importer keeps them)."""
        drawn = f"GPU-{uuid.UUID(int=self.rng.getrandbits(128))}"
        sn = f"{sku.serial_prefix}{self.suffixes[i]:07d}" if serial else None
        uid = drawn if uuid_known else None
        return sn, "", uid, "", False

    def tag(self) -> str:
        self.tags += 1
        return f"FA{self.tags:07d}"

    def row(self, i: int, ident: tuple, gm: GpuModel, sku: Sku, state: str, changed: dt.datetime,
            received: dt.datetime | None, placement: tuple, firmware: tuple[str, str, str], tag: bool = True) -> tuple:
        years = 5 if sku.vendor == "Dell" else 3
        warranty = (received + years * 365 * DAY).date() if received else None
        return (self.ids[i], *ident, gm.pk, sku.board_part_number, self.tag() if tag else None, warranty, state,
                changed, *placement, *firmware, self.now, self.now)

    def placed(self, i: int, p: ServerPlan, k: int, gm: GpuModel, *, drained: bool,
               replaced_at: dt.datetime | None) -> tuple:
        rng, gpu_id, sku = self.rng, self.ids[i], p.sku
        vbios, driver = p.vbios, p.driver
        if replaced_at is not None:  # came from the spares pool when the first GPU of this slot was pulled
            received = replaced_at - rng.randint(30, 200) * DAY
            installed = replaced_at + DAY
            vbios = sku.vbios[-1][0]  # the spares pool is flashed to the newest VBIOS
            steps = [(S.RECEIVED, received, ""), (S.SPARE, received + 3 * DAY, "intake test passed"),
                     (S.BURN_IN, installed, "replacement"), (S.IN_SERVICE, installed + DAY, "")]
            self.move(gpu_id, MoveKind.FROM_SPARES, installed, p, k)
        else:
            installed = p.deployed - LAG[S.BURN_IN] * DAY
            received = p.deployed - LAG[S.RECEIVED] * DAY
            steps = [(S.RECEIVED, received, ""), (S.BURN_IN, installed, "")]
            if not p.burn_in:
                steps.append((S.IN_SERVICE, p.deployed, "burn-in passed"))
            self.move(gpu_id, MoveKind.INSTALL, installed, p, k)
        if drained:
            at = max(p.deployed + DAY, self.anchor - rng.randint(1, 20) * DAY - rng.randint(0, 23) * HOUR)
            steps.append((S.DRAINED, at, rng.choice(DRAIN_REASONS)))
        changed = self.history(gpu_id, steps)
        if p.masked:  # a pass-through host: nvidia-smi reports zeroes; half of them mask the UUID too
            uid = f"GPU-{uuid.UUID(int=self.rng.getrandbits(128))}"
            ident = (None, MASKED_SERIAL, None if p.node % 2 else uid, MASKED_UUID if p.node % 2 else "", True)
        else:
            ident = self.identity(i, sku)
        observed = [(FirmwareComponent.GPU_VBIOS, vbios, installed, p.last_seen),
                    (FirmwareComponent.GPU_INFOROM_IMAGE, sku.inforom, installed, p.last_seen)]
        if p.driver_upgraded and installed < p.driver_upgraded:
            observed += [(FirmwareComponent.DRIVER, sku.drivers[0][0], installed, p.driver_upgraded),
                         (FirmwareComponent.DRIVER, driver, p.driver_upgraded, p.last_seen)]
        else:
            observed.append((FirmwareComponent.DRIVER, driver, installed, p.last_seen))
        self.observe(gpu_id, observed)
        placement = (p.id, k + 1, f"00000000:{HGX_BUSES[k]}:00.0", k, p.site_id, p.row, p.rack)
        return self.row(i, ident, gm, sku, steps[-1][0], changed, received, placement,
                        (vbios, sku.inforom, driver), tag=not p.masked)

    def former(self, i: int, p: ServerPlan, k: int, gm: GpuModel, state: str, removed: dt.datetime) -> tuple:
        """An RMA or decommissioning GPU: installed with its server, drained, pulled at ``removed``."""
        rng, gpu_id, sku = self.rng, self.ids[i], p.sku
        installed, received = p.deployed - LAG[S.BURN_IN] * DAY, p.deployed - LAG[S.RECEIVED] * DAY
        reason = rng.choice(RMA_REASONS) if state == S.RMA else "end of life after failed repair"
        changed = self.history(gpu_id, [(S.RECEIVED, received, ""), (S.BURN_IN, installed, ""),
                                        (S.IN_SERVICE, p.deployed, "burn-in passed"),
                                        (S.DRAINED, removed - DAY, rng.choice(DRAIN_REASONS)),
                                        (state, removed, reason)])
        self.move(gpu_id, MoveKind.INSTALL, installed, p, k)
        self.move(gpu_id, MoveKind.REMOVE, removed, p, k, out=True)
        upgraded_later = p.driver_upgraded is not None and removed < p.driver_upgraded
        driver = sku.drivers[0][0] if upgraded_later else p.driver
        self.observe(gpu_id, [(FirmwareComponent.GPU_VBIOS, p.vbios, installed, removed),
                              (FirmwareComponent.GPU_INFOROM_IMAGE, sku.inforom, installed, removed),
                              (FirmwareComponent.DRIVER, driver, installed, removed)])
        return self.row(i, self.identity(i, sku), gm, sku, state, changed, received, UNPLACED,
                        (p.vbios, sku.inforom, driver))

    def unplaced(self, i: int, sku: Sku, gm: GpuModel, state: str) -> tuple:
        """Spares (tested at intake), GPUs just received, GPUs on order; and RMA/decommissioning GPUs of fleets
        too small to have had a replacement."""
        rng, gpu_id = self.rng, self.ids[i]
        received = self.anchor - rng.randint(10, 400) * DAY - rng.randint(0, 23) * HOUR
        vbios = inforom = ""
        if state == S.ORDERED:
            received = None
            steps = [(S.ORDERED, self.anchor - rng.randint(1, 60) * DAY, "PO demo")]
        elif state == S.RECEIVED:
            received = self.anchor - rng.randint(1, 10) * DAY
            steps = [(S.RECEIVED, received, "")]
        elif state == S.SPARE:
            steps = [(S.RECEIVED, received, ""), (S.SPARE, received + 3 * DAY, "intake test passed")]
        else:
            steps = [(S.RECEIVED, received, ""), (S.BURN_IN, received + 7 * DAY, ""),
                     (S.IN_SERVICE, received + 14 * DAY, ""), (S.DRAINED, received + 30 * DAY, ""),
                     (state, received + 31 * DAY, "")]
        if state not in (S.ORDERED, S.RECEIVED):
            vbios, inforom = weighted(rng, sku.vbios), sku.inforom
            tested = received + 2 * DAY
            self.observe(gpu_id, [(FirmwareComponent.GPU_VBIOS, vbios, tested, tested),
                                  (FirmwareComponent.GPU_INFOROM_IMAGE, inforom, tested, tested)])
        changed = self.history(gpu_id, steps)
        ident = self.identity(i, sku, serial=state != S.ORDERED, uuid_known=state not in (S.ORDERED, S.RECEIVED))
        return self.row(i, ident, gm, sku, state, changed, received, UNPLACED, (vbios, inforom, ""),
                        tag=state != S.ORDERED)
