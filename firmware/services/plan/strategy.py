"""A rollout's strategy (waves, caps per failure domain, retries) and its target selector: validated, typed."""


from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from django.core.exceptions import ValidationError
from django.http import QueryDict
from rest_framework import serializers

from inventory.filters import GpuFilter
from inventory.models import Gpu

DOMAINS = ("rack", "power_feed", "row", "site", "nvlink_domain")


# --- strategy ---------------------------------------------------------------------------------------------------

class _RetrySerializer(serializers.Serializer):
    max_attempts = serializers.IntegerField(min_value=1, max_value=20, default=3,
                                            help_text="Attempts per step on infrastructure errors")
    backoff_seconds = serializers.ListField(child=serializers.IntegerField(min_value=0, max_value=3600),
                                            default=[10, 60, 300], min_length=1,
                                            help_text="Wait before attempt n+1 (the last value repeats)")


class _MaxUnavailableSerializer(serializers.Serializer):
    per_site = serializers.IntegerField(min_value=1, required=False, allow_null=True, default=None,
                                        help_text="Servers of one site draining or activating at once")
    per_pool = serializers.IntegerField(min_value=1, required=False, allow_null=True, default=None,
                                        help_text="Servers of one scheduler pool draining or activating at once")


class _DrainSerializer(serializers.Serializer):
    """What a rollout does with the workload scheduler's jobs before it activates a server (docs/scheduler.md)."""

    deadline_seconds = serializers.IntegerField(min_value=0, default=3600,
                                                help_text="How long to wait for a drained node's jobs to end")
    on_deadline = serializers.ChoiceField(choices=["wait", "skip", "requeue"], default="wait",
                                          help_text="Then: keep waiting, skip the server as an exception, or "
                                                    "requeue its jobs (only with allow_requeue)")
    allow_requeue = serializers.BooleanField(default=False, help_text="Jobs may be sent back to the queue")
    partition_max_percent = serializers.FloatField(min_value=0.1, max_value=100, required=False, allow_null=True,
                                                   default=None, help_text="Never drain more than this % of a "
                                                   "scheduler partition's nodes at once (across rollouts)")
    reservation = serializers.BooleanField(default=False, help_text="Each wave reserves its nodes in the scheduler "
                                           "for its window (a maintenance reservation), so no job that would run "
                                           "into the window is started there ahead of it")
    reservation_minutes = serializers.IntegerField(min_value=1, max_value=7 * 24 * 60, default=240,
                                                   help_text="The reservation's length when no allow window bounds "
                                                             "it (a strategy without require_window)")

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        if attrs.get("on_deadline") == "requeue" and not attrs.get("allow_requeue"):
            raise serializers.ValidationError({"on_deadline": "requeue needs allow_requeue: true (the jobs are "
                                                              "sent back to the queue and restart elsewhere)."})
        return attrs


class StrategySerializer(serializers.Serializer):
    """A rollout strategy. Every key is optional; the defaults are a cautious rollout."""

    canary = serializers.BooleanField(default=True, help_text="One unit per upgrade path before any wave")
    waves = serializers.ListField(child=serializers.FloatField(min_value=0.001, max_value=100), min_length=1,
                                  default=[1, 5, 25, 100], help_text="Cumulative percentages of the units")
    domain_caps = serializers.DictField(child=serializers.IntegerField(min_value=1), default=dict,
                                        help_text=f"Servers per failure domain per wave; keys: {', '.join(DOMAINS)}")
    max_unavailable = _MaxUnavailableSerializer(default=dict)
    soak_seconds = serializers.IntegerField(min_value=0, max_value=7 * 86400, default=0)
    success_threshold = serializers.FloatField(min_value=0, max_value=100, default=95,
                                               help_text="% of attempted targets that must succeed per wave")
    max_failures = serializers.IntegerField(min_value=0, default=2, help_text="Firmware failures per wave")
    max_failure_ratio = serializers.FloatField(min_value=0, max_value=1, default=0.05)
    min_sample = serializers.IntegerField(min_value=1, default=5,
                                          help_text="Failure limits apply once this many targets finished")
    on_failure = serializers.ChoiceField(choices=["pause", "abort"], default="pause")
    require_window = serializers.BooleanField(default=False, help_text="Activate only inside an allow window")
    window_ids = serializers.ListField(child=serializers.IntegerField(min_value=1), default=list,
                                       help_text="Allow windows to use (empty: any in scope)")
    retry = _RetrySerializer(default=dict)
    drain = _DrainSerializer(default=dict)
    seed = serializers.IntegerField(default=0, help_text="Changes the order of units, not the rules")

    def validate_waves(self, value: list[float]) -> list[float]:
        if any(b <= a for a, b in zip(value, value[1:], strict=False)):
            raise serializers.ValidationError("Wave percentages are cumulative and must increase.")
        return value if value[-1] == 100 else [*value, 100.0]

    def validate_domain_caps(self, value: dict[str, int]) -> dict[str, int]:
        unknown = sorted(set(value) - set(DOMAINS))
        if unknown:
            raise serializers.ValidationError(f"Unknown failure domains {unknown}; known: {', '.join(DOMAINS)}.")
        return value


@dataclass(frozen=True)
class Strategy:
    canary: bool = True
    waves: tuple[float, ...] = (1.0, 5.0, 25.0, 100.0)
    domain_caps: dict[str, int] = field(default_factory=dict)
    max_unavailable_per_site: int | None = None
    max_unavailable_per_pool: int | None = None
    soak_seconds: int = 0
    success_threshold: float = 95.0
    max_failures: int = 2
    max_failure_ratio: float = 0.05
    min_sample: int = 5
    on_failure: str = "pause"
    require_window: bool = False
    window_ids: tuple[int, ...] = ()
    retry_max_attempts: int = 3
    retry_backoff_seconds: tuple[int, ...] = (10, 60, 300)
    seed: int = 0
    drain: dict[str, Any] = field(default_factory=dict)

    def as_json(self) -> dict[str, Any]:
        """The validated strategy in the request's shape (stored on the rollout)."""
        return {
            "canary": self.canary, "waves": list(self.waves), "domain_caps": dict(self.domain_caps),
            "max_unavailable": {"per_site": self.max_unavailable_per_site, "per_pool": self.max_unavailable_per_pool},
            "soak_seconds": self.soak_seconds, "success_threshold": float(self.success_threshold),
            "max_failures": self.max_failures, "max_failure_ratio": float(self.max_failure_ratio),
            "min_sample": self.min_sample, "on_failure": self.on_failure, "require_window": self.require_window,
            "window_ids": list(self.window_ids),
            "retry": {"max_attempts": self.retry_max_attempts, "backoff_seconds": list(self.retry_backoff_seconds)},
            "seed": self.seed, **({"drain": dict(self.drain)} if self.drain else {}),
        }

    def backoff(self, attempt: int) -> int:
        """Seconds to wait after the ``attempt``-th failed attempt (1-based)."""
        steps = self.retry_backoff_seconds
        return steps[min(attempt, len(steps)) - 1]


def _flatten_errors(errors: Any, prefix: str) -> dict[str, list[str]]:
    if isinstance(errors, dict):
        flat: dict[str, list[str]] = {}
        for key, value in errors.items():
            flat |= _flatten_errors(value, f"{prefix}.{key}")
        return flat
    if isinstance(errors, list) and errors and not isinstance(errors[0], str | serializers.ErrorDetail):
        flat = {}
        for n, value in enumerate(errors):
            if value:
                flat |= _flatten_errors(value, f"{prefix}.{n}")
        return flat
    return {prefix: [str(e) for e in (errors if isinstance(errors, list) else [errors])]}


def strategy_parse(data: dict[str, Any] | None) -> Strategy:
    """Validate a strategy (the request's JSON); bad input raises ValidationError keyed ``strategy.<field>``."""
    data = dict(data or {})
    for nested in ("retry", "max_unavailable", "drain"):  # an absent nested object still gets its fields' defaults
        if data.get(nested) is None:
            data[nested] = {}
    serializer = StrategySerializer(data=data)
    if not serializer.is_valid():
        raise ValidationError(_flatten_errors(serializer.errors, "strategy"))
    v = serializer.validated_data
    return Strategy(
        canary=v["canary"], waves=tuple(v["waves"]), domain_caps=dict(v["domain_caps"]),
        max_unavailable_per_site=v["max_unavailable"].get("per_site"),
        max_unavailable_per_pool=v["max_unavailable"].get("per_pool"),
        soak_seconds=v["soak_seconds"], success_threshold=v["success_threshold"], max_failures=v["max_failures"],
        max_failure_ratio=v["max_failure_ratio"], min_sample=v["min_sample"], on_failure=v["on_failure"],
        require_window=v["require_window"], window_ids=tuple(v["window_ids"]),
        retry_max_attempts=v["retry"]["max_attempts"], retry_backoff_seconds=tuple(v["retry"]["backoff_seconds"]),
        seed=v["seed"], drain=dict(v["drain"]) if data.get("drain") else {},
    )


def selector_filter(selector: dict[str, Any] | None) -> GpuFilter:
    """The GPU list's FilterSet over ``selector`` (query parameters); invalid filters raise ValidationError."""
    params = QueryDict(mutable=True)
    for key, value in (selector or {}).items():
        if key == "_server_ids":  # reserved: explicit servers (rollbacks, the demo rollout)
            continue
        if isinstance(value, list | tuple):
            params.setlist(key, [str(v) for v in value])
        elif value not in (None, ""):
            params[key] = str(value)
    filterset = GpuFilter(params, queryset=Gpu.objects.all())
    if not filterset.is_valid():
        raise ValidationError({f"selector.{k}": [str(m) for m in v] for k, v in filterset.errors.items()})
    unknown = sorted(set(params) - set(filterset.filters))
    if unknown:
        raise ValidationError({"selector": [f"Unknown filters {unknown}; known: {', '.join(filterset.filters)}."]})
    return filterset
