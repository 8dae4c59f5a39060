"""Acceptance API under ``/api/v1/acceptance/``: diagnostic runs (POST a ``dcgmi diag -j`` document), acceptance
checks, a GPU's burn-in gate, a delivery's burn-in progress and group actions, and infant mortality.
Roles: viewers read; operators post results and move groups through burn-in."""

from __future__ import annotations

from typing import Any

from django.core.exceptions import ValidationError as DjangoValidationError
from django.db.models import QuerySet
from django.shortcuts import get_object_or_404
from drf_spectacular.utils import extend_schema, inline_serializer
from rest_framework import mixins, serializers, status, viewsets
from rest_framework.exceptions import NotFound
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from acceptance import selectors, services, stats
from acceptance.filters import CheckFilter, RunFilter
from acceptance.gate import evaluate
from acceptance.models import AcceptanceCheck, DiagnosticResult, DiagnosticRun, RunGpu
from fleet.api import FleetAutoSchema, NewestFirstCursorPagination
from inventory.models import Gpu, Server


class RunGpuSerializer(serializers.ModelSerializer):
    identity = serializers.CharField(source="gpu.identity", read_only=True)

    class Meta:
        model = RunGpu
        fields = ["gpu", "identity", "entity_id", "placed_by", "verdict", "reasons"]


class ResultSerializer(serializers.ModelSerializer):
    class Meta:
        model = DiagnosticResult
        fields = ["gpu", "category", "test", "status", "status_raw", "error_ids", "messages"]


class RunSerializer(serializers.ModelSerializer):
    server = serializers.SlugRelatedField(slug_field="hostname", read_only=True)
    gpus = RunGpuSerializer(many=True, read_only=True)

    class Meta:
        model = DiagnosticRun
        fields = ["id", "server", "level", "level_inferred", "dcgm_version", "dcgm_major", "driver_version",
                  "runtime_error", "ran_at", "source", "actor_name", "gpus"]


class RunDetailSerializer(RunSerializer):
    results = ResultSerializer(many=True, read_only=True)

    class Meta(RunSerializer.Meta):
        fields = [*RunSerializer.Meta.fields, "results", "document"]


class RunCreateSerializer(serializers.Serializer):
    host = serializers.CharField(required=False, allow_blank=True, max_length=253,
                                 help_text="Hostname the run was on: GPUs without serials are placed by its slots")
    level = serializers.IntegerField(required=False, allow_null=True, min_value=1, max_value=4,
                                     help_text="dcgmi diag -r level; read from the tests when left out")
    ran_at = serializers.DateTimeField(required=False, allow_null=True)
    document = serializers.JSONField(help_text="The dcgmi diag -j output: the JSON object, or its text")

    def validate_host(self, value: str) -> Server | None:
        if not value:
            return None
        server = Server.objects.filter(hostname=value.strip().lower()).first()
        if server is None:
            raise serializers.ValidationError(f"No server named {value!r}.")
        return server

    def validate_document(self, value: Any) -> Any:
        if not isinstance(value, dict | str):
            raise serializers.ValidationError("Give the dcgmi diag -j document: a JSON object or its text.")
        return value


class CheckSerializer(serializers.ModelSerializer):
    class Meta:
        model = AcceptanceCheck
        fields = ["id", "gpu", "name", "passed", "value", "unit", "threshold", "details", "measured_at",
                  "actor_name"]
        read_only_fields = ["threshold", "actor_name"]
        extra_kwargs = {"passed": {"required": False, "allow_null": True},
                        "measured_at": {"required": False, "allow_null": True}}


def _validation(exc: DjangoValidationError) -> serializers.ValidationError:
    return serializers.ValidationError(exc.message_dict if hasattr(exc, "error_dict") else
                                       {"non_field_errors": exc.messages})


class DiagRunViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, viewsets.GenericViewSet):
    """Diagnostic runs. ``POST`` a document: 201 with the per-GPU verdicts, or 400 (nothing written) when it is not
    a diagnostic or a GPU entity cannot be placed."""

    schema = FleetAutoSchema()
    filterset_class = RunFilter
    pagination_class = NewestFirstCursorPagination

    def get_queryset(self) -> QuerySet[DiagnosticRun]:
        return selectors.run_list().prefetch_related("gpus__gpu__server")

    def get_serializer_class(self) -> type[serializers.Serializer]:
        return RunDetailSerializer if self.action == "retrieve" else RunSerializer

    @extend_schema(request=RunCreateSerializer, responses={201: RunSerializer})
    def create(self, request: Request) -> Response:
        body = RunCreateSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        data = body.validated_data
        try:
            run = services.diag_ingest(document=data["document"], server=data.get("host"), level=data.get("level"),
                                       ran_at=data.get("ran_at"), source="api", actor=request.user)
        except DjangoValidationError as exc:
            raise _validation(exc) from exc
        return Response(RunSerializer(run).data, status=status.HTTP_201_CREATED)


class CheckViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, viewsets.GenericViewSet):
    """Site acceptance checks (NCCL all-reduce bandwidth, nvbandwidth, HPL): pass/fail, or a value judged by the
    threshold of the GPU's model."""

    schema = FleetAutoSchema()
    serializer_class = CheckSerializer
    filterset_class = CheckFilter
    pagination_class = NewestFirstCursorPagination

    def get_queryset(self) -> QuerySet[AcceptanceCheck]:
        return AcceptanceCheck.objects.order_by("-id")

    @extend_schema(request=CheckSerializer, responses={201: CheckSerializer})
    def create(self, request: Request) -> Response:
        body = CheckSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        data = body.validated_data
        try:
            check = services.check_record(gpu=data["gpu"], name=data["name"], passed=data.get("passed"),
                                          value=data.get("value"), unit=data.get("unit", ""),
                                          details=data.get("details", ""), measured_at=data.get("measured_at"),
                                          actor=request.user)
        except DjangoValidationError as exc:
            raise _validation(exc) from exc
        return Response(CheckSerializer(check).data, status=status.HTTP_201_CREATED)


GATE = inline_serializer("BurnInGate", {
    "gpu": serializers.IntegerField(), "state": serializers.CharField(), "met": serializers.BooleanField(),
    "failed": serializers.BooleanField(), "reasons": serializers.ListField(child=serializers.CharField()),
    "passing_runs": serializers.ListField(child=serializers.IntegerField())})


class GateView(APIView):
    """What the burn-in gate says about a GPU now (the same answer the lifecycle gives on a transition)."""

    schema = FleetAutoSchema()

    @extend_schema(responses=GATE)
    def get(self, request: Request, gpu_id: int) -> Response:
        gpu = get_object_or_404(Gpu, pk=gpu_id)
        s = evaluate(gpu)
        return Response({"gpu": gpu.pk, "state": gpu.state, "met": s.met, "failed": s.failed, "reasons": s.reasons,
                         "passing_runs": s.passing_runs})


PROGRESS = inline_serializer("BurnInProgress", {
    "title": serializers.CharField(), "counts": serializers.DictField(child=serializers.IntegerField()),
    "gpus": serializers.ListField(child=inline_serializer("BurnInRow", {
        "gpu": serializers.IntegerField(), "identity": serializers.CharField(), "state": serializers.CharField(),
        "outcome": serializers.CharField(), "reason": serializers.CharField()}))})
ACTION = inline_serializer("BurnInAction", {
    "action": serializers.ChoiceField(choices=["start", "complete"]),
    "reason": serializers.CharField(required=False, allow_blank=True, max_length=500)})
ACTION_RESULT = inline_serializer("BurnInActionResult", {
    "moved": serializers.ListField(child=serializers.IntegerField(), help_text="GPUs moved now"),
    "queued": serializers.ListField(child=serializers.IntegerField(),
                                    help_text="GPUs a background job moves (a group above the bulk limit)"),
    "job": serializers.IntegerField(allow_null=True, help_text="That job's id (GET /api/v1/jobs/{id}/)"),
    "held": serializers.ListField(child=serializers.DictField())})


class DeliveryBurnInView(APIView):
    """A delivery's GPUs through burn-in together: progress (passed / failed / pending, with reasons) and the
    group actions (``start``: into burn-in; ``complete``: those that meet the policy into service)."""

    schema = FleetAutoSchema()

    def _gpus(self, pk: int) -> tuple[str, list[Gpu]]:
        try:
            return selectors.delivery_title(delivery_id=pk), selectors.delivery_gpus(delivery_id=pk)
        except (LookupError, Exception) as exc:
            raise NotFound("No such delivery.") from exc

    @extend_schema(responses=PROGRESS)
    def get(self, request: Request, pk: int) -> Response:
        title, gpus = self._gpus(pk)
        p = selectors.progress(title=title, gpus=gpus)
        return Response({"title": p.title, "counts": p.counts, "gpus": [
            {"gpu": r["gpu"].pk, "identity": r["gpu"].identity, "state": r["gpu"].state, "outcome": r["outcome"],
             "reason": r["reason"]} for r in p.rows]})

    @extend_schema(request=ACTION, responses=ACTION_RESULT)
    def post(self, request: Request, pk: int) -> Response:
        _, gpus = self._gpus(pk)
        action = request.data.get("action") if hasattr(request.data, "get") else None
        if action not in ("start", "complete"):
            raise serializers.ValidationError({"action": ["Choose start or complete."]})
        act = services.burn_in_start if action == "start" else services.burn_in_complete
        try:
            result = act(gpus=gpus, actor=request.user, reason=str(request.data.get("reason") or "")[:500])
        except DjangoValidationError as exc:
            raise _validation(exc) from exc
        return Response({"moved": result.moved, "queued": result.queued, "job": result.job, "held": result.held})


RATE = inline_serializer("EarlyFailureRate", {
    "key": serializers.CharField(), "n": serializers.IntegerField(), "k": serializers.IntegerField(),
    "rate": serializers.FloatField(), "low": serializers.FloatField(), "high": serializers.FloatField()})


class InfantMortalityView(APIView):
    """Early-failure rates per model, vendor, batch and site (95 % Clopper-Pearson), and the batch flags."""

    schema = FleetAutoSchema()

    @extend_schema(responses=inline_serializer("InfantMortality", {
        "units": serializers.IntegerField(), "alpha": serializers.FloatField(),
        "by": serializers.DictField(child=serializers.ListField(child=RATE)),
        "batches": serializers.ListField(child=serializers.DictField())}))
    def get(self, request: Request) -> Response:
        report = stats.infant_mortality_report()
        return Response({"units": report.units, "alpha": report.alpha, "by": {
            g: [{"key": r.key, "n": r.n, "k": r.k, "rate": r.rate, "low": r.low, "high": r.high} for r in rows]
            for g, rows in report.by.items()}, "batches": [
            {"model": b.model, "batch": b.batch, "n": b.n, "k": b.k, "rest_n": b.rest_n, "rest_k": b.rest_k,
             "p_value": b.p_value, "flagged": b.flagged} for b in report.batches]})
