"""Rollout API: CRUD (create = draft + plan), the dry-run preview, the state actions, progress, targets.

Roles: viewers read; operators create, edit (draft/planned), submit, start, pause, resume, abort and roll back;
approvers approve (and the approver is never the creator). An action the rollout's state does not allow, or a
concurrent change, answers 409.
"""

from __future__ import annotations

from typing import Any

from django.core.exceptions import ValidationError as DjangoValidationError
from django.db.models import QuerySet
from django_filters import rest_framework as filters
from drf_spectacular.utils import OpenApiResponse, extend_schema, extend_schema_field
from rest_framework import mixins, serializers, status, viewsets
from rest_framework.decorators import action
from rest_framework.exceptions import PermissionDenied
from rest_framework.request import Request
from rest_framework.response import Response

from firmware.lifecycle import ROLLOUT_ACTIONS
from firmware.models import Bundle, ErrorClass, Rollout, RolloutTarget, TargetState
from firmware.selectors.rollout import rollout_progress_json, rollout_targets
from firmware.selectors.rollout_pages import rollout_list
from firmware.services import held
from firmware.services import rollout as services
from firmware.services.plan import StrategySerializer, plan_preview
from fleet.api import ErrorSerializer, FleetAutoSchema, with_request_id
from fleet.roles import VIEWER

# --- serializers ------------------------------------------------------------------------------------------------


@extend_schema_field(StrategySerializer)
class StrategyField(serializers.JSONField):
    """The strategy as JSON; validated by the service (errors keyed ``strategy.<field>``)."""


@extend_schema_field({"type": "object", "additionalProperties": True,
                      "example": {"site": "fra1", "model": "H100-SXM5-80GB", "state": ["in_service"]}})
class SelectorField(serializers.JSONField):
    """The GPU list's filters as query parameters (``inventory.filters.GpuFilter``)."""


class _UserRef(serializers.Serializer):
    id = serializers.IntegerField()
    username = serializers.CharField()


class RolloutSerializer(serializers.ModelSerializer):
    bundle_name = serializers.CharField(source="bundle.name", read_only=True)
    created_by = _UserRef(read_only=True)
    approved_by = _UserRef(read_only=True, allow_null=True)
    selector = SelectorField(read_only=True)
    strategy = StrategyField(read_only=True)

    class Meta:
        model = Rollout
        fields = ["id", "name", "bundle", "bundle_name", "previous_bundle", "rollback_of", "selector", "strategy",
                  "state", "pause_reason", "version", "plan_hash", "plan_summary", "current_wave", "created_by",
                  "created_at", "approved_by", "approved_at", "started_at", "paused_at", "finished_at"]
        read_only_fields = fields


class RolloutCreateSerializer(serializers.Serializer):
    name = serializers.CharField(max_length=120)
    bundle = serializers.PrimaryKeyRelatedField(queryset=Bundle.objects.all())
    selector = SelectorField(required=False, default=dict)
    strategy = StrategyField(required=False, default=dict)


class RolloutUpdateSerializer(serializers.Serializer):
    name = serializers.CharField(max_length=120, required=False)
    selector = SelectorField(required=False)
    strategy = StrategyField(required=False)


class PreviewRequestSerializer(serializers.Serializer):
    bundle = serializers.PrimaryKeyRelatedField(queryset=Bundle.objects.all())
    selector = SelectorField(required=False, default=dict)
    strategy = StrategyField(required=False, default=dict)


class PlannedWaveSerializer(serializers.Serializer):
    index = serializers.IntegerField()
    name = serializers.CharField()
    servers = serializers.IntegerField()
    units = serializers.IntegerField()
    per_domain = serializers.DictField(child=serializers.DictField(child=serializers.IntegerField()),
                                       help_text="Servers per failure domain: {rack: {name: n}, power_feed: ...}")


class UpgradePathSerializer(serializers.Serializer):
    path = serializers.CharField()
    servers = serializers.IntegerField()
    platform = serializers.CharField()
    site = serializers.CharField()
    firmware = serializers.DictField(child=serializers.ListField(child=serializers.CharField()))


class PlanSerializer(serializers.Serializer):
    plan_hash = serializers.CharField()
    planner_version = serializers.IntegerField()
    targets = serializers.IntegerField()
    skipped = serializers.IntegerField(help_text="Servers already compliant (not targeted)")
    upgrade_paths = serializers.IntegerField()
    waves = serializers.IntegerField()
    wave_plan = PlannedWaveSerializer(many=True)
    skipped_sample = serializers.ListField(child=serializers.CharField())
    paths = UpgradePathSerializer(many=True)


class ReasonSerializer(serializers.Serializer):
    reason = serializers.CharField(max_length=500)


class OptionalReasonSerializer(serializers.Serializer):
    reason = serializers.CharField(max_length=500, required=False, allow_blank=True, default="")


class DomainProgressSerializer(serializers.Serializer):
    name = serializers.CharField()
    total = serializers.IntegerField()
    done = serializers.IntegerField()
    failed = serializers.IntegerField()
    in_flight = serializers.IntegerField()


class WaveProgressSerializer(serializers.Serializer):
    index = serializers.IntegerField()
    name = serializers.CharField()
    state = serializers.CharField()
    planned = serializers.IntegerField()
    counts = serializers.DictField(child=serializers.IntegerField(), help_text="Targets per target state")
    done = serializers.IntegerField()
    failed = serializers.IntegerField()
    in_flight = serializers.IntegerField()
    percent = serializers.IntegerField()
    soak_until = serializers.DateTimeField(allow_null=True)
    gate = serializers.DictField(help_text="The last gate verdict: outcome, reason, counts")
    domains = serializers.DictField(child=DomainProgressSerializer(many=True))


class FailureSerializer(serializers.Serializer):
    target = serializers.IntegerField()
    server = serializers.CharField()
    wave = serializers.IntegerField()
    state = serializers.CharField()
    error_class = serializers.ChoiceField(choices=[*ErrorClass.values, ""])
    reason = serializers.CharField()
    attempts = serializers.IntegerField()
    finished_at = serializers.DateTimeField(allow_null=True)


class ProgressSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    state = serializers.CharField()
    pause_reason = serializers.CharField()
    current_wave = serializers.IntegerField()
    total = serializers.IntegerField()
    done = serializers.IntegerField()
    failed = serializers.IntegerField()
    in_flight = serializers.IntegerField()
    percent = serializers.IntegerField()
    counts = serializers.DictField(child=serializers.IntegerField())
    waves = WaveProgressSerializer(many=True)
    failures = FailureSerializer(many=True)


class RolloutTargetSerializer(serializers.ModelSerializer):
    server = serializers.CharField(source="server.hostname", read_only=True)
    server_id = serializers.IntegerField(read_only=True)
    wave = serializers.IntegerField(source="wave.index", read_only=True)
    # "" until a failure is classified (DRF drops allow_blank from read-only model fields, so the schema's
    # enum would leave it out).
    error_class = serializers.ChoiceField(choices=[*ErrorClass.values, ""], read_only=True)

    class Meta:
        model = RolloutTarget
        fields = ["id", "server", "server_id", "wave", "unit_key", "upgrade_path", "domains", "state", "version",
                  "attempts", "next_run_at", "last_error", "error_class", "before", "after", "started_at",
                  "finished_at"]
        read_only_fields = fields


# --- views --------------------------------------------------------------------------------------------------------

CONFLICT = OpenApiResponse(ErrorSerializer, description="Not allowed in the rollout's state, or changed meanwhile")


def _action_schema(request: Any = None, response: Any = RolloutSerializer, **kwargs: Any) -> Any:
    return extend_schema(request=request, responses={200: response, 409: CONFLICT}, **kwargs)


class RolloutViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, viewsets.GenericViewSet):
    schema = FleetAutoSchema()
    serializer_class = RolloutSerializer
    # Who may take each action: firmware.lifecycle's table ("plan" here is the GET of the plan); a dry run
    # writes nothing.
    required_roles = {**{name: a.role for name, a in ROLLOUT_ACTIONS.items() if name != "plan"}, "preview": VIEWER,
                      "plan": VIEWER, "progress": VIEWER, "exceptions": VIEWER}
    filterset_fields = ["state"]

    def get_queryset(self) -> QuerySet[Rollout]:
        return rollout_list().select_related("created_by", "approved_by")

    def handle_exception(self, exc: Exception) -> Response:
        if isinstance(exc, services.RolloutStateError):
            return Response(with_request_id({"detail": " ".join(exc.messages), "code": "conflict"}, self.request),
                            status=status.HTTP_409_CONFLICT)
        if isinstance(exc, DjangoValidationError) and getattr(exc, "code", None) in ("two_person_rule",
                                                                                   "not_approver"):
            exc = PermissionDenied(" ".join(exc.messages))
        return super().handle_exception(exc)

    def _respond(self, rollout: Rollout, code: int = status.HTTP_200_OK) -> Response:
        rollout = self.get_queryset().get(pk=rollout.pk)
        return Response(RolloutSerializer(rollout).data, status=code)

    @extend_schema(request=RolloutCreateSerializer, responses={201: RolloutSerializer})
    def create(self, request: Request) -> Response:
        """Create a rollout and plan it (a draft is planned at once: waves and targets exist when this returns)."""
        data = RolloutCreateSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        rollout = services.rollout_create(actor=request.user, **data.validated_data)
        return self._respond(rollout, status.HTTP_201_CREATED)

    @extend_schema(request=RolloutUpdateSerializer, responses={200: RolloutSerializer, 409: CONFLICT})
    def partial_update(self, request: Request, pk: str | None = None) -> Response:
        """Edit a draft or planned rollout; a changed selector or strategy re-plans it."""
        data = RolloutUpdateSerializer(data=request.data, partial=True)
        data.is_valid(raise_exception=True)
        rollout = services.rollout_update(rollout=self.get_object(), actor=request.user, **data.validated_data)
        return self._respond(rollout)

    @extend_schema(request=PreviewRequestSerializer, responses=PlanSerializer)
    @action(detail=False, methods=["post"])
    def preview(self, request: Request) -> Response:
        """The plan these inputs give, without writing anything (the dry run): waves with per-domain counts,
        compliant servers that would be skipped, upgrade paths. Same inputs, same ``plan_hash``."""
        data = PreviewRequestSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        plan = plan_preview(**data.validated_data)
        return Response(plan.as_json())

    @extend_schema(responses={200: PlanSerializer})
    @action(detail=True, methods=["get"])
    def plan(self, request: Request, pk: str | None = None) -> Response:
        """The plan the rollout's inputs give now (compare its ``plan_hash`` with the rollout's)."""
        return Response(services.plan_for(self.get_object()).as_json())

    @extend_schema(responses=ProgressSerializer)
    @action(detail=True, methods=["get"])
    def progress(self, request: Request, pk: str | None = None) -> Response:
        """Waves, per-domain progress, counts per target state, failures with their reason and error class."""
        return Response(rollout_progress_json(self.get_object()))

    @_action_schema()
    @action(detail=True, methods=["post"])
    def submit(self, request: Request, pk: str | None = None) -> Response:
        return self._respond(services.rollout_submit(rollout=self.get_object(), actor=request.user))

    @_action_schema()
    @action(detail=True, methods=["post"])
    def approve(self, request: Request, pk: str | None = None) -> Response:
        """Approvers only, and never the rollout's creator (two-person rule): 403 otherwise."""
        return self._respond(services.rollout_approve(rollout=self.get_object(), actor=request.user))

    @_action_schema()
    @action(detail=True, methods=["post"], url_path="approve-start")
    def approve_start(self, request: Request, pk: str | None = None) -> Response:
        """Approve and start in one step (approvers, never the creator)."""
        return self._respond(services.rollout_approve_and_start(rollout=self.get_object(), actor=request.user))

    @_action_schema()
    @action(detail=True, methods=["post"])
    def start(self, request: Request, pk: str | None = None) -> Response:
        return self._respond(services.rollout_start(rollout=self.get_object(), actor=request.user))

    @_action_schema(request=ReasonSerializer)
    @action(detail=True, methods=["post"])
    def pause(self, request: Request, pk: str | None = None) -> Response:
        data = ReasonSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        return self._respond(services.rollout_pause(rollout=self.get_object(), actor=request.user,
                                                    reason=data.validated_data["reason"]))

    @_action_schema(request=OptionalReasonSerializer)
    @action(detail=True, methods=["post"])
    def resume(self, request: Request, pk: str | None = None) -> Response:
        data = OptionalReasonSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        return self._respond(services.rollout_resume(rollout=self.get_object(), actor=request.user,
                                                     reason=data.validated_data["reason"]))

    @_action_schema(request=OptionalReasonSerializer)
    @action(detail=True, methods=["post"])
    def abort(self, request: Request, pk: str | None = None) -> Response:
        """Cancel the targets that have not reached activation; activated ones finish and hold."""
        data = OptionalReasonSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        return self._respond(services.rollout_abort(rollout=self.get_object(), actor=request.user,
                                                    reason=data.validated_data["reason"]))

    @_action_schema()
    @action(detail=True, methods=["post"])
    def retry_exceptions(self, request: Request, pk: str | None = None) -> Response:
        """A rollout completed with exceptions: its infra-failed and inconclusive targets go through the engine
        again, in a new wave (operators; 409 in any other state)."""
        return self._respond(services.rollout_retry_exceptions(rollout=self.get_object(), actor=request.user))

    @extend_schema(responses=RolloutTargetSerializer(many=True), filters=False)  # a plain list (first 1,000)
    @action(detail=True, methods=["get"], pagination_class=None)
    def exceptions(self, request: Request, pk: str | None = None) -> Response:
        """The targets the rollout left behind that were not the firmware's fault (infra) or are not known
        (inconclusive), with their evidence (``last_error``)."""
        targets = services.exception_targets(self.get_object()).select_related("server", "wave").order_by("id")
        return Response(RolloutTargetSerializer(targets[:1000], many=True).data)

    @extend_schema(request=None, responses={201: RolloutSerializer, 409: CONFLICT})
    @action(detail=True, methods=["post"])
    def rollback(self, request: Request, pk: str | None = None) -> Response:
        """Create (and plan) a new rollout back to the previous bundle for the servers this one activated;
        answers the NEW rollout. This one becomes rolled back."""
        return self._respond(services.rollout_rollback(rollout=self.get_object(), actor=request.user),
                             status.HTTP_201_CREATED)


class RolloutTargetFilter(filters.FilterSet):
    state = filters.ChoiceFilter(choices=TargetState.choices)
    error_class = filters.ChoiceFilter(choices=ErrorClass.choices)
    wave = filters.NumberFilter(field_name="wave__index", label="Wave index (0 = canary)")

    class Meta:
        model = RolloutTarget
        fields = ["state", "error_class", "wave"]


class ResolveSerializer(serializers.Serializer):
    landed = serializers.BooleanField(help_text="What the BMC showed: true, the request landed (go on from it); "
                                                "false, it did not (send it once more when retried)")
    note = serializers.CharField(max_length=300, help_text="What was checked on the BMC (kept in the audit log)")


class RolloutTargetViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, viewsets.GenericViewSet):
    """A rollout's targets (one per server), cursor-paginated, filtered by state, error class and wave; a target
    held for a person (an unanswered request the BMC could not account for) is resolved here."""

    schema = FleetAutoSchema()
    serializer_class = RolloutTargetSerializer
    filterset_class = RolloutTargetFilter

    def get_queryset(self) -> QuerySet[RolloutTarget]:
        if getattr(self, "swagger_fake_view", False):  # schema generation: no URL kwargs
            return RolloutTarget.objects.none()
        return rollout_targets(rollout_id=int(self.kwargs["rollout_pk"]))

    @extend_schema(request=ResolveSerializer, responses={200: RolloutTargetSerializer, 409: CONFLICT})
    @action(detail=True, methods=["post"])
    def resolve(self, request: Request, rollout_pk: str | None = None, pk: str | None = None) -> Response:
        """Record what a person found on the BMC for a target held on an unanswered request (operators; 409 when
        the target is not held). The target stays failed until the rollout's exceptions are retried."""
        data = ResolveSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        target = self.get_object()
        try:
            held.rollout_target_resolve(target=target, actor=request.user, **data.validated_data)
        except DjangoValidationError as exc:
            if getattr(exc, "code", None) != "not_held":
                raise
            return Response(with_request_id({"detail": " ".join(exc.messages), "code": "conflict"}, request),
                            status=status.HTTP_409_CONFLICT)
        return Response(RolloutTargetSerializer(self.get_queryset().get(pk=target.pk)).data)



