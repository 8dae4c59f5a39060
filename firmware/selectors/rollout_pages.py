"""Reads behind the rollout pages: the list, one rollout with its bundle, and its live progress (waves, counts per
target state, per-domain progress, failures). Set-based: the progress of a rollout of 12,500 targets is one
GROUP BY over ``target_rollout_state_idx``'s rows, whatever the number of targets."""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass, field

from django.db.models import Count, Prefetch, Q, QuerySet
from django.db.models.fields.json import KT

from firmware.models import (
    BundleItem,
    ErrorClass,
    Rollout,
    RolloutState,
    RolloutTarget,
    RolloutWave,
    TargetState,
    WaveState,
)
from firmware.models.rollout import TARGET_DONE, TARGET_IN_FLIGHT

# Failure domains shown on the rollout page, in the order a reader scans them (the planner's names).
PROGRESS_DOMAINS = ("rack", "power_feed", "row", "nvlink_domain")
DOMAIN_LABELS = {"rack": "Rack", "power_feed": "Power feed", "row": "Row", "site": "Site",
                 "nvlink_domain": "NVLink domain"}
# A rollout in these states changes without anybody on the page: its progress polls.
LIVE_STATES = (RolloutState.APPROVED, RolloutState.RUNNING, RolloutState.PAUSED)
TERMINAL_STATES = (RolloutState.COMPLETED, RolloutState.ABORTED, RolloutState.ROLLED_BACK)


def rollout_list(*, state: str | None = None) -> QuerySet[Rollout]:
    """Rollouts newest first with what the list shows (index ``rollout_state_idx`` when filtered)."""
    qs = Rollout.objects.select_related("bundle", "bundle__platform", "created_by", "approved_by")
    if state:
        qs = qs.filter(state=state)
    return qs.order_by("-id")


def rollout_done_counts(rollouts: list[Rollout]) -> dict[int, int]:
    """Finished targets per rollout, for the running and paused rollouts of one list page (one query; the
    others show their plan's totals: a finished rollout's counts do not move)."""
    ids = [r.pk for r in rollouts if r.state in (RolloutState.RUNNING, RolloutState.PAUSED)]
    if not ids:
        return {}
    rows = (RolloutTarget.objects.filter(rollout_id__in=ids, state__in=TARGET_DONE).order_by()
            .values("rollout_id").annotate(n=Count("id")).values_list("rollout_id", "n"))
    return dict(rows)


def rollout_detail(pk: int) -> Rollout:
    """One rollout with its bundle's releases in apply order (raises Rollout.DoesNotExist)."""
    items = BundleItem.objects.select_related("release").order_by("order", "id")
    return (Rollout.objects.select_related("bundle", "bundle__platform", "previous_bundle", "created_by",
                                           "approved_by", "rollback_of")
            .prefetch_related(Prefetch("bundle__items", queryset=items)).get(pk=pk))


class _Bar:
    """What a progress bar shows of ``total``, ``done`` and ``failed`` targets."""

    total: int
    done: int
    failed: int

    @property
    def percent(self) -> int:
        return round(100 * self.done / self.total) if self.total else 0

    @property
    def failed_percent(self) -> int:
        """The failed part of ``percent`` (shown in red)."""
        return round(100 * self.failed / self.total) if self.total else 0

    @property
    def ok_percent(self) -> int:
        """The finished part of ``percent`` that did not fail."""
        return self.percent - self.failed_percent

    @property
    def all_ok(self) -> bool:
        """Every target finished, none failed (the bar turns green)."""
        return bool(self.total) and self.done == self.total and not self.failed


@dataclass
class DomainProgress(_Bar):
    name: str
    total: int = 0
    done: int = 0
    failed: int = 0
    in_flight: int = 0


class _StateCounts(_Bar):
    """Totals over ``counts`` (target state -> targets)."""

    counts: dict[str, int]

    @property  # type: ignore[override]
    def total(self) -> int:
        return sum(self.counts.values())

    @property  # type: ignore[override]
    def done(self) -> int:
        return sum(n for s, n in self.counts.items() if s in TARGET_DONE)

    @property  # type: ignore[override]
    def failed(self) -> int:
        return self.counts.get(TargetState.FAILED, 0)

    @property
    def in_flight(self) -> int:
        return sum(n for s, n in self.counts.items() if s in TARGET_IN_FLIGHT)


@dataclass
class WaveProgress(_StateCounts):
    wave: RolloutWave
    counts: dict[str, int] = field(default_factory=dict)  # target state -> targets
    domains: dict[str, list[DomainProgress]] = field(default_factory=dict)  # domain kind -> per-name progress

    @property
    def state_counts(self) -> list[tuple[str, str, int]]:
        """(state, label, targets) in the target state machine's order, states with targets only."""
        return [(s.value, s.label, self.counts[s.value]) for s in TargetState if self.counts.get(s.value)]

    @property
    def domain_max(self) -> list[tuple[str, int]]:
        """(domain kind's label, the most targets any one domain of that kind holds in this wave)."""
        return [(DOMAIN_LABELS[kind], max(d.total for d in rows)) for kind, rows in self.domains.items() if rows]

    @property
    def domain_rows(self) -> list[tuple[str, list[DomainProgress]]]:
        """(domain kind's label, progress of each domain of that kind), for the per-domain bars."""
        return [(DOMAIN_LABELS[kind], rows) for kind, rows in self.domains.items()]


@dataclass
class RolloutProgress(_StateCounts):
    waves: list[WaveProgress]
    counts: dict[str, int]  # target state -> targets, whole rollout

    @property
    def succeeded(self) -> int:
        return self.counts.get(TargetState.SUCCEEDED, 0) + self.counts.get(TargetState.SKIPPED, 0)

    @property
    def current(self) -> WaveProgress | None:
        """The wave being worked on: the first not yet passed (None when every wave passed)."""
        return next((w for w in self.waves if w.wave.state != WaveState.PASSED), None)


def rollout_progress(rollout: Rollout) -> RolloutProgress:
    """Waves with target counts per state and per failure domain: two queries (waves; one GROUP BY over the
    targets by wave, state and domain names)."""
    waves = list(RolloutWave.objects.filter(rollout=rollout).order_by("index", "id"))
    rows = (RolloutTarget.objects.filter(rollout=rollout).order_by()
            .values("wave_id", "state", **{f"d_{d}": KT(f"domains__{d}") for d in PROGRESS_DOMAINS})
            .annotate(n=Count("id")))
    by_wave: dict[int, Counter[str]] = defaultdict(Counter)
    domains: dict[int, dict[str, dict[str, DomainProgress]]] = defaultdict(lambda: defaultdict(dict))
    for row in rows:
        n, state = row["n"], row["state"]
        by_wave[row["wave_id"]][state] += n
        for kind in PROGRESS_DOMAINS:
            name = row[f"d_{kind}"]
            if not name:
                continue
            entry = domains[row["wave_id"]][kind].setdefault(name, DomainProgress(name=name))
            entry.total += n
            if state in TARGET_DONE:
                entry.done += n
            if state == TargetState.FAILED:
                entry.failed += n
            if state in TARGET_IN_FLIGHT:
                entry.in_flight += n
    progress = []
    for wave in waves:
        per_kind = domains.get(wave.pk, {})
        progress.append(WaveProgress(
            wave=wave, counts=dict(by_wave.get(wave.pk, {})),
            domains={kind: sorted(per_kind[kind].values(), key=lambda d: d.name)
                     for kind in PROGRESS_DOMAINS if per_kind.get(kind)}))
    total: Counter[str] = Counter()
    for counts in by_wave.values():
        total.update(counts)
    return RolloutProgress(waves=progress, counts=dict(total))


def rollout_failures(rollout: Rollout) -> QuerySet[RolloutTarget]:
    """Targets that failed, or carry an error while they retry, newest first (index ``target_rollout_state_idx``
    for the failed ones)."""
    return (RolloutTarget.objects.filter(rollout=rollout)
            .filter(Q(state=TargetState.FAILED) | Q(error_class__in=ErrorClass.values) & ~Q(last_error=""))
            .exclude(state=TargetState.CANCELLED)
            .select_related("server", "wave").order_by("-finished_at", "-id"))


def rollout_children(rollout: Rollout) -> list[Rollout]:
    """Rollbacks started from this rollout."""
    return list(Rollout.objects.filter(rollback_of=rollout).order_by("-id").only("id", "name", "state"))


__all__ = ["DOMAIN_LABELS", "LIVE_STATES", "PROGRESS_DOMAINS", "TERMINAL_STATES", "DomainProgress",
           "RolloutProgress", "WaveProgress", "rollout_children", "rollout_detail", "rollout_done_counts",
           "rollout_failures", "rollout_list", "rollout_progress"]
