"""Telemetry API: push ingest (Prometheus text, nvidia-smi, kernel log), history, heatmap, sources, XID events."""

from __future__ import annotations

import datetime as dt
from typing import Any

from django.conf import settings
from django.db import connection
from django.utils import timezone
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, PolymorphicProxySerializer, extend_schema
from rest_framework import serializers, status
from rest_framework.exceptions import ValidationError
from rest_framework.negotiation import DefaultContentNegotiation
from rest_framework.parsers import BaseParser
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from fleet.api import (
    AuditedModelViewSet,
    FleetAutoSchema,
    NewestFirstCursorPagination,
    ReadOnlyViewSet,
    ValidationErrorSerializer,
    with_request_id,
)
from fleet.filters import reject_unknown_params
from telemetry import selectors, services
from telemetry.filters import XidEventFilter
from telemetry.models import IngestKind, IngestSource, XidEvent
from telemetry.promql import StoreUnavailable
from telemetry.sample import TelemetryParseError

# --- ingest ------------------------------------------------------------------------------------------------


class RawBodyParser(BaseParser):
    """Leaves the body unread: the view reads it itself, bounded by FLEET_TELEMETRY_MAX_BYTES."""

    media_type = "*/*"

    def parse(self, stream, media_type=None, parser_context=None):  # type: ignore[no-untyped-def]
        return {}


class IngestResultSerializer(serializers.Serializer):
    samples = serializers.IntegerField(help_text="Samples written (on PostgreSQL into the inbox: the raw table, "
                                       "counters and latest values follow within one merge interval, ~15 s)")
    unknown = serializers.IntegerField(help_text="Samples and XID lines of GPUs Fleet does not know (not written)")
    rejected = serializers.DictField(child=serializers.IntegerField(),
                                     help_text="Values or samples dropped, by reason (sentinel, nan, too_old, ...)")
    xid_events = serializers.IntegerField(help_text="New XID events written by this request: kernel-log lines "
                                          "(on PostgreSQL, DCGM XID gauge changes are found by the merge, not "
                                          "counted here)")
    unknown_examples = serializers.ListField(child=serializers.CharField(), help_text="Up to 20 unknown identities")
    notices = serializers.ListField(child=serializers.CharField(), help_text="Harmless things read past, e.g. "
                                    "CSV columns a newer nvidia-smi added that Fleet does not use")
    visible = serializers.ChoiceField(choices=["now", "after_merge"], help_text="now: the samples are on the pages "
                                      "and in the API already; after_merge: they wait in the inbox for the beat's "
                                      "merge (PostgreSQL), at most visible_within_s seconds while beat runs")
    visible_within_s = serializers.FloatField(help_text="The merge interval (0 when visible now)")


class IngestErrorSerializer(serializers.Serializer):
    """The body was refused (nothing written): the detail shape of docs/api.md, with the reason and line."""

    detail = serializers.CharField()
    code = serializers.CharField(help_text="The same as reason")
    reason = serializers.CharField(help_text="syntax, header, unsafe_xml, label_too_long, body_too_large, "
                                   "length_required, not_text, format, ...")
    line = serializers.IntegerField(allow_null=True, help_text="1-based line of the error; null: the body as a whole")
    request_id = serializers.CharField(required=False)


class _NoFormatOverride:
    URL_FORMAT_OVERRIDE = None


class FormatParamNegotiation(DefaultContentNegotiation):
    """``?format=`` names the body's format here (nvidia-smi-xml, kernel-log, ...), not the response renderer."""

    settings = _NoFormatOverride()


def _error(request: Request, message: str, reason: str, line: int | None, code: int) -> Response:
    body = {"detail": message, "code": reason, "reason": reason, "line": line}
    return Response(with_request_id(body, request), status=code)


def _unavailable(request: Request, exc: StoreUnavailable) -> Response:
    """The history store (FLEET_TELEMETRY_BACKEND=prometheus) is down, slow or refusing: 503 with the reason, which
    the charts and the heatmap show in place of the series. Nothing else depends on it."""
    body = {"detail": f"Telemetry history is unavailable: {exc}", "code": "history_unavailable"}
    return Response(with_request_id(body, request), status=status.HTTP_503_SERVICE_UNAVAILABLE)


def _visibility() -> dict[str, Any]:
    """When pushed samples become visible: the beat merges the inbox (PostgreSQL); SQLite writes directly."""
    if connection.vendor != "postgresql":
        return {"visible": "now", "visible_within_s": 0.0}
    merge = settings.CELERY_BEAT_SCHEDULE.get("telemetry-merge", {}).get("schedule", 15.0)
    return {"visible": "after_merge", "visible_within_s": float(merge)}


def _read_at_most(stream: Any, size: int) -> bytes:
    """Up to ``size`` bytes of ``stream``, in pieces (a WSGI input may return less than asked)."""
    parts, left = [], size
    while left > 0:
        part = stream.read(min(left, 1 << 20))
        if not part:
            break
        parts.append(part)
        left -= len(part)
    return b"".join(parts)


class _IngestView(APIView):
    """Pushes are operator work (a token of a user with the operator role)."""

    schema = FleetAutoSchema()
    parser_classes = [RawBodyParser]
    content_negotiation_class = FormatParamNegotiation

    def _body(self, request: Request) -> bytes | Response:
        """The body, at most FLEET_TELEMETRY_MAX_BYTES: with a Content-Length, or chunked.

        A chunked body (``Transfer-Encoding: chunked``, what many HTTP clients and remote-write shims send)
        has no Content-Length, and Django reads such a body as empty. It is read from the WSGI input when
        the server says it ends the input at the body's end (``wsgi.input_terminated``, set by gunicorn);
        behind a server that does not, it is refused with 411 rather than taken for an empty push.
        """
        limit = settings.FLEET_TELEMETRY_MAX_BYTES
        meta = request.META
        encoding = meta.get("HTTP_TRANSFER_ENCODING", "").strip().lower()
        if encoding and encoding != "identity" and "wsgi.input" not in meta:
            body = request._request.read(limit + 1)  # ASGI: the server hands Django the whole, de-chunked body
        elif encoding and encoding != "identity":
            if not meta.get("wsgi.input_terminated"):
                return _error(request, "A chunked body cannot be read behind this server; send a Content-Length.",
                              "length_required", None, status.HTTP_411_LENGTH_REQUIRED)
            body = _read_at_most(meta["wsgi.input"], limit + 1)
        else:
            try:
                declared = int(meta.get("CONTENT_LENGTH") or 0)
            except ValueError:
                declared = 0
            if declared > limit:
                return _error(request, f"The body is {declared} bytes; at most {limit}.", "body_too_large", None,
                              status.HTTP_413_REQUEST_ENTITY_TOO_LARGE)
            body = request._request.read(limit + 1)  # not request.body: DATA_UPLOAD_MAX_MEMORY_SIZE is for forms
        if len(body) > limit:
            return _error(request, f"The body is over {limit} bytes.", "body_too_large", None,
                          status.HTTP_413_REQUEST_ENTITY_TOO_LARGE)
        return body

    def _ingest(self, request: Request, fmt: str) -> Response:
        reject_unknown_params(request.query_params.keys(), ("format", "host", "source"))
        if settings.FLEET_TELEMETRY_BACKEND == "prometheus" and fmt != "kernel-log":
            return _error(request, "Fleet reads samples from the Prometheus-compatible store "
                          "(FLEET_TELEMETRY_BACKEND=prometheus) and keeps none itself: send them to the store. "
                          "Kernel logs (XID events) are still taken here.", "backend_prometheus", None,
                          status.HTTP_409_CONFLICT)
        body = self._body(request)
        if isinstance(body, Response):
            return body
        name = (request.query_params.get("source") or request.headers.get("X-Fleet-Source") or "").strip()
        name = name or f"push-{request.user.get_username()}"
        source = services.ingest_source_for(name=name[:100], kind=IngestKind.PUSH, actor=request.user)
        try:
            result = services.telemetry_ingest(source=source, content=body, fmt=fmt, actor=request.user,
                                               host=request.query_params.get("host"), filename=name)
        except TelemetryParseError as exc:
            code = status.HTTP_413_REQUEST_ENTITY_TOO_LARGE if exc.reason == "body_too_large" else 400
            return _error(request, exc.message, exc.reason, exc.line_no, code)
        return Response({**result.summary(), **_visibility()})


_INGEST_RESPONSES = {
    200: OpenApiResponse(IngestResultSerializer, description="Written (all of it): what was stored and dropped, "
                         "and when it becomes visible (on PostgreSQL the beat's next merge, ~15 s)"),
    400: OpenApiResponse(PolymorphicProxySerializer(
        component_name="IngestBadRequest", resource_type_field_name=None,
        serializers=[IngestErrorSerializer, ValidationErrorSerializer]),
        description="The body does not parse (detail, reason, line), or a query parameter is unknown or invalid "
                    "(field errors): nothing was written"),
    411: OpenApiResponse(IngestErrorSerializer, description="A chunked body behind a server that cannot read it "
                         "(send a Content-Length)"),
    409: OpenApiResponse(IngestErrorSerializer, description="Samples pushed while FLEET_TELEMETRY_BACKEND is "
                         "prometheus (Fleet keeps none: the store does)"),
    413: OpenApiResponse(IngestErrorSerializer, description="The body is over FLEET_TELEMETRY_MAX_BYTES"),
}
_SOURCE_PARAM = OpenApiParameter("source", str, description="Ingest source name (default push-<user>); "
                                 "or the X-Fleet-Source header")


class PrometheusPushView(_IngestView):
    @extend_schema(summary="Push dcgm-exporter /metrics text", request={"text/plain": OpenApiTypes.STR},
                   parameters=[_SOURCE_PARAM, OpenApiParameter("host", str, description="Hostname for series "
                                                               "without a Hostname label")],
                   responses=_INGEST_RESPONSES)
    def post(self, request: Request) -> Response:
        return self._ingest(request, "prometheus")


class IngestView(_IngestView):
    @extend_schema(summary="Push nvidia-smi XML or CSV, or kernel log text",
                   request={"text/plain": OpenApiTypes.STR, "application/xml": OpenApiTypes.STR},
                   parameters=[OpenApiParameter("format", str, required=True, enum=list(services.FORMATS)),
                               OpenApiParameter("host", str, description="The host the output comes from"),
                               _SOURCE_PARAM],
                   responses=_INGEST_RESPONSES)
    def post(self, request: Request) -> Response:
        fmt = request.query_params.get("format", "")
        if fmt not in services.FORMATS:
            raise ValidationError({"format": [f"One of {', '.join(services.FORMATS)}."]})
        return self._ingest(request, fmt)


# --- history and heatmap ----------------------------------------------------------------------------------


class HistoryQuerySerializer(serializers.Serializer):
    scope = serializers.ChoiceField(choices=selectors.SCOPES, default="gpu")
    id = serializers.IntegerField(min_value=1)
    metric = serializers.ChoiceField(choices=selectors.METRICS)
    start = serializers.DateTimeField(required=False, help_text="Default: end minus 24 hours")
    end = serializers.DateTimeField(required=False, help_text="Default: now")
    resolution = serializers.ChoiceField(choices=selectors.RESOLUTIONS, default="auto")

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        attrs.setdefault("end", timezone.now())
        attrs.setdefault("start", attrs["end"] - dt.timedelta(hours=24))
        if attrs["end"] <= attrs["start"]:
            raise serializers.ValidationError({"end": ["Must be after start."]})
        if attrs["end"] - attrs["start"] > dt.timedelta(days=3660):
            raise serializers.ValidationError({"start": ["At most 10 years."]})
        return attrs


class HistoryPointSerializer(serializers.Serializer):
    t = serializers.DateTimeField(help_text="Bucket start (or sample time, raw)")
    min = serializers.FloatField(allow_null=True)
    avg = serializers.FloatField(allow_null=True)
    max = serializers.FloatField(allow_null=True)


class HistorySerializer(serializers.Serializer):
    scope = serializers.CharField()
    id = serializers.IntegerField()
    metric = serializers.CharField()
    unit = serializers.CharField()
    resolution = serializers.CharField(help_text="The tier read: raw, 5m or 1h")
    start = serializers.DateTimeField()
    end = serializers.DateTimeField()
    points = HistoryPointSerializer(many=True)


_ISO: dict[dt.datetime, str] = {}  # bucket starts as text: every chart of the same range shows the same ones


def _iso(t: dt.datetime) -> str:
    """``t`` as DRF's JSON encoder writes it (``...Z`` for UTC), kept per process: encoding a year's 8,760 points
    called the encoder's fallback and ``isoformat`` per point, 2/3 of the history API's time."""
    text = _ISO.get(t)
    if text is None:
        if len(_ISO) > 200_000:
            _ISO.clear()
        text = t.isoformat()
        text = _ISO[t] = text[:-6] + "Z" if text.endswith("+00:00") else text
    return text


class HistoryView(APIView):
    schema = FleetAutoSchema()

    @extend_schema(summary="History of one metric for a GPU, rack, row or site", parameters=[HistoryQuerySerializer],
                   responses={200: HistorySerializer})
    def get(self, request: Request) -> Response:
        reject_unknown_params(request.query_params.keys(), {*HistoryQuerySerializer().fields, "format"})
        query = HistoryQuerySerializer(data=request.query_params)
        query.is_valid(raise_exception=True)
        q = query.validated_data
        tier = selectors.history_tier(scope=q["scope"], start=q["start"], end=q["end"], resolution=q["resolution"])
        try:
            points = selectors.history(scope=q["scope"], scope_id=q["id"], metric=q["metric"], start=q["start"],
                                       end=q["end"], resolution=tier)
        except StoreUnavailable as exc:
            return _unavailable(request, exc)
        kept = _ISO.get
        return Response({"scope": q["scope"], "id": q["id"], "metric": q["metric"], "unit": selectors.UNITS[q["metric"]],
                         "resolution": "5m" if q["metric"] in selectors.BUCKET_METRICS and tier == "raw" else tier,
                         "start": q["start"], "end": q["end"],
                         "points": [{"t": kept(t) or _iso(t), "min": a, "avg": b, "max": c} for t, a, b, c in points]})


class HeatmapQuerySerializer(serializers.Serializer):
    metric = serializers.ChoiceField(choices=selectors.heatmap_metrics(), default="gpu_temp",
                                     help_text="A telemetry metric or a registered layer (health, ...)")

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.fields["metric"].choices = selectors.heatmap_metrics()  # layers registered by other apps too
    at = serializers.DateTimeField(required=False, help_text="A past instant (its 5-minute bucket); default: latest")


class GroupArraysSerializer(serializers.Serializer):
    id = serializers.ListField(child=serializers.IntegerField())
    name = serializers.ListField(child=serializers.CharField())
    start = serializers.ListField(child=serializers.IntegerField(), help_text="Index in gpus where the group starts")


class HeatmapGroupsSerializer(serializers.Serializer):
    site = GroupArraysSerializer()
    row = GroupArraysSerializer()
    rack = GroupArraysSerializer()
    server = GroupArraysSerializer()


class HeatmapCategorySerializer(serializers.Serializer):
    label = serializers.CharField()
    color = serializers.CharField(help_text="CSS colour, #rrggbb")
    always = serializers.BooleanField(help_text="Shown in the legend even when no cell has this value")


class HeatmapSerializer(serializers.Serializer):
    metric = serializers.CharField()
    unit = serializers.CharField()
    at = serializers.DateTimeField(allow_null=True)
    categories = HeatmapCategorySerializer(many=True, help_text="A categorical layer's values by index (health, "
                                                                "scheduler); empty for a measured metric")
    gpus = serializers.ListField(child=serializers.IntegerField(), help_text="GPU ids, site/row/rack/server/slot order")
    values = serializers.ListField(child=serializers.IntegerField(allow_null=True))
    servers = serializers.ListField(child=serializers.IntegerField(), help_text="Index into groups.server per GPU")
    groups = HeatmapGroupsSerializer()


class HeatmapView(APIView):
    schema = FleetAutoSchema()

    @extend_schema(summary="One value per GPU for the fleet heatmap (parallel arrays)",
                   parameters=[HeatmapQuerySerializer],
                   responses={200: HeatmapSerializer, 503: OpenApiResponse(description="The history store "
                              "(prometheus backend) is down, slow or refused the query: detail says which")})
    def get(self, request: Request) -> Response:
        reject_unknown_params(request.query_params.keys(), {*HeatmapQuerySerializer().fields, "format"})
        query = HeatmapQuerySerializer(data=request.query_params)
        query.is_valid(raise_exception=True)
        try:
            return Response(selectors.heatmap_data_kept(metric=query.validated_data["metric"],
                                                        at=query.validated_data.get("at")))
        except StoreUnavailable as exc:
            return _unavailable(request, exc)


class FramesQuerySerializer(serializers.Serializer):
    metric = serializers.ChoiceField(choices=list(selectors.TELEMETRY_HEATMAP_LABELS), default="gpu_temp")
    hours = serializers.IntegerField(min_value=1, max_value=24 * 7, default=24)
    level = serializers.ChoiceField(choices=["auto", "gpu", "rack"], default="auto")


class FramesSerializer(serializers.Serializer):
    metric = serializers.CharField()
    unit = serializers.CharField()
    level = serializers.CharField(help_text="gpu, or rack for fleets too large for per-GPU frames")
    step_s = serializers.IntegerField()
    times = serializers.ListField(child=serializers.DateTimeField())
    ids = serializers.ListField(child=serializers.IntegerField(), help_text="GPU (or rack) ids in heatmap order")
    values = serializers.ListField(child=serializers.ListField(child=serializers.IntegerField(allow_null=True)))


class HeatmapFramesView(APIView):
    schema = FleetAutoSchema()

    @extend_schema(summary="Heatmap playback: one frame per 5 minutes over the last hours",
                   parameters=[FramesQuerySerializer], responses={200: FramesSerializer})
    def get(self, request: Request) -> Response:
        reject_unknown_params(request.query_params.keys(), {*FramesQuerySerializer().fields, "format"})
        query = FramesQuerySerializer(data=request.query_params)
        query.is_valid(raise_exception=True)
        q = query.validated_data
        end = timezone.now()
        return Response(selectors.heatmap_frames(metric=q["metric"], start=end - dt.timedelta(hours=q["hours"]),
                                                 end=end, level=q["level"]))


# --- sources and XID events ----------------------------------------------------------------------------


class IngestSourceSerializer(serializers.ModelSerializer):
    class Meta:
        model = IngestSource
        fields = ["id", "name", "kind", "url", "host", "enabled", "interval_s", "timeout_s", "last_attempt_at",
                  "last_ok_at", "last_error", "last_duration_ms", "last_samples", "last_unknown", "last_rejected",
                  "samples_total", "unknown_total", "rejected_total", "unknown_examples", "created_at"]
        read_only_fields = [f for f in fields if f not in services.SOURCE_FIELDS]

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        kind = attrs.get("kind", getattr(self.instance, "kind", IngestKind.SCRAPE))
        url = attrs.get("url", getattr(self.instance, "url", ""))
        if kind == IngestKind.SCRAPE and not url:
            raise serializers.ValidationError({"url": ["A scrape source needs the exporter's URL."]})
        return attrs


class IngestSourceViewSet(AuditedModelViewSet):
    """Ingest status per source (viewers); operators add, change and disable sources, admins delete them."""

    queryset = IngestSource.objects.none()
    serializer_class = IngestSourceSerializer
    filterset_fields = ["kind", "enabled"]
    create_service = staticmethod(lambda *, model_class, actor, **fields: services.ingest_source_create(
        actor=actor, **fields))
    update_service = staticmethod(lambda *, obj, actor, **fields: services.ingest_source_update(
        source=obj, actor=actor, **fields))
    delete_service = staticmethod(lambda *, obj, actor: services.ingest_source_delete(source=obj, actor=actor))

    def get_queryset(self):  # type: ignore[no-untyped-def]
        return selectors.ingest_sources()


class XidEventSerializer(serializers.ModelSerializer):
    class Meta:
        model = XidEvent
        fields = ["id", "gpu", "at", "xid", "hardware", "pid", "process", "message", "source", "ingest_source"]


class XidEventViewSet(ReadOnlyViewSet):
    serializer_class = XidEventSerializer
    filterset_class = XidEventFilter
    pagination_class = NewestFirstCursorPagination

    def get_queryset(self):  # type: ignore[no-untyped-def]
        return selectors.xid_events()

