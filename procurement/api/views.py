"""DRF ViewSets of the procurement app. Roles: viewers read; operators create orders, receive deliveries, open and
move RMA cases, edit pools and recompute forecasts; approvers approve purchase orders above the threshold."""

from __future__ import annotations

from typing import Any

from django.db.models import QuerySet
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import mixins, status, viewsets
from rest_framework.decorators import action
from rest_framework.exceptions import ParseError, ValidationError
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from fleet.api import FleetAutoSchema, NewestFirstCursorPagination
from fleet.audit import audited_create, audited_update
from fleet.roles import APPROVER
from procurement import selectors
from procurement.api import serializers as s
from procurement.filters import (
    DeliveryFilter,
    FailureFilter,
    ForecastFilter,
    OrderFilter,
    RmaFilter,
    StrictFilterSet,
    WarrantyFilter,
)
from procurement.models import ForecastRun, PurchaseOrder, SparesPool, Vendor
from procurement.services import forecast as forecast_services
from procurement.services import orders as order_services
from procurement.services import rma as rma_services


class FlatErrors:
    """400s in the project's documented shape ``{field: [messages]}``: nested field errors (order lines, serial
    lists) flattened to ``lines[0].quantity``, a body that does not parse as ``non_field_errors``."""

    def handle_exception(self, exc: Exception) -> Response:
        if isinstance(exc, ParseError):
            exc = ValidationError({"non_field_errors": [str(exc.detail)]})
        elif isinstance(exc, ValidationError) and isinstance(exc.detail, dict | list):
            exc = ValidationError(s.flat_errors(exc.detail))
        return super().handle_exception(exc)  # type: ignore[misc]


class _Base(FlatErrors, viewsets.GenericViewSet):
    schema = FleetAutoSchema()


def _no_filters(model_class: type) -> type[StrictFilterSet]:
    """A FilterSet with no filters: any query parameter but the pager's is a 400."""
    meta = type("Meta", (), {"model": model_class, "fields": []})
    return type(f"{model_class.__name__}NoFilter", (StrictFilterSet,), {"Meta": meta})


class VendorViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, mixins.CreateModelMixin,
                    mixins.UpdateModelMixin, _Base):
    serializer_class = s.VendorSerializer
    http_method_names = ["get", "post", "patch", "head", "options"]
    filterset_class = _no_filters(Vendor)

    def get_queryset(self) -> QuerySet:
        return selectors.vendor_list()

    def perform_create(self, serializer: s.VendorSerializer) -> None:
        serializer.instance = audited_create(model_class=Vendor, actor=self.request.user, **serializer.validated_data)

    def perform_update(self, serializer: s.VendorSerializer) -> None:
        audited_update(obj=serializer.instance, actor=self.request.user, **serializer.validated_data)


class PurchaseOrderViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, mixins.CreateModelMixin, _Base):
    """Purchase orders with their lines. An order above ``PROCUREMENT_APPROVAL_THRESHOLD`` waits for an approver
    (``POST .../approve/``); an approved order is received line by line (``POST .../receive/``)."""

    serializer_class = s.PurchaseOrderSerializer
    filterset_class = OrderFilter
    pagination_class = NewestFirstCursorPagination
    required_roles = {"approve": APPROVER, "reject": APPROVER}

    def get_queryset(self) -> QuerySet:
        return selectors.order_list()

    def perform_create(self, serializer: s.PurchaseOrderSerializer) -> None:
        data = dict(serializer.validated_data)
        lines = [dict(line) for line in data.pop("lines")]
        order = order_services.order_create(actor=self.request.user, lines=lines, **data)
        serializer.instance = selectors.order_list().get(pk=order.pk)

    @extend_schema(request=None, responses=s.PurchaseOrderSerializer)
    @action(detail=True, methods=["post"])
    def approve(self, request: Request, pk: str | None = None) -> Response:
        """Approve an order awaiting approval. Approver."""
        order = order_services.order_approve(order=self.get_object(), actor=request.user)
        return Response(s.PurchaseOrderSerializer(selectors.order_list().get(pk=order.pk)).data)

    @extend_schema(request=s.RejectSerializer, responses=s.PurchaseOrderSerializer)
    @action(detail=True, methods=["post"])
    def reject(self, request: Request, pk: str | None = None) -> Response:
        """Reject an order awaiting approval with a reason (it is cancelled). Approver."""
        body = s.RejectSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        order = order_services.order_reject(order=self.get_object(), actor=request.user,
                                            reason=body.validated_data["reason"])
        return Response(s.PurchaseOrderSerializer(selectors.order_list().get(pk=order.pk)).data)

    @extend_schema(request=s.ReceiveSerializer, responses={201: s.DeliverySerializer})
    @action(detail=True, methods=["post"])
    def receive(self, request: Request, pk: str | None = None) -> Response:
        """Receive serials against one of this order's lines: all rows valid or nothing written (400 with
        ``rows``: one message per bad line)."""
        order: PurchaseOrder = self.get_object()
        body = s.ReceiveSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        line = body.validated_data["line"]
        if line.order_id != order.pk:
            raise ValidationError({"line": [f"Line {line.pk} is not on order {order.reference}."]})
        rows = [order_services.ReceiptRow(i, serial.strip()) for i, serial in
                enumerate(body.validated_data["serials"], start=1)]
        delivery = order_services.delivery_receive(order_line=line, site=body.validated_data["site"],
                                                   received_on=body.validated_data["received_on"], rows=rows,
                                                   note=body.validated_data["note"], source="api",
                                                   actor=request.user)
        return Response(s.DeliverySerializer(selectors.delivery_list().get(pk=delivery.pk)).data,
                        status=status.HTTP_201_CREATED)


class DeliveryViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, _Base):
    serializer_class = s.DeliverySerializer
    filterset_class = DeliveryFilter
    pagination_class = NewestFirstCursorPagination

    def get_queryset(self) -> QuerySet:
        return selectors.delivery_list()


class WarrantyViewSet(mixins.ListModelMixin, _Base):
    """Boards in the fleet with their warranty and support end, filterable by period, site and model."""

    serializer_class = s.WarrantySerializer
    filterset_class = WarrantyFilter

    def get_queryset(self) -> QuerySet:
        return selectors.warranty_list()


class FailureViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, _Base):
    """Failure history: recorded by RMA cases, health flags and the history import (never typed twice)."""

    serializer_class = s.FailureRecordSerializer
    filterset_class = FailureFilter
    pagination_class = NewestFirstCursorPagination

    def get_queryset(self) -> QuerySet:
        return selectors.failure_list()


class RmaCaseViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, _Base):
    """RMA cases: open (``POST``), ``ship``, ``replace`` (the replacement's serial), ``close``. Operator."""

    serializer_class = s.RmaCaseSerializer
    filterset_class = RmaFilter
    pagination_class = NewestFirstCursorPagination

    def get_queryset(self) -> QuerySet:
        return selectors.rma_list()

    def _step(self, request: Request, body_class: type, service: Any, **objects: Any) -> Response:
        """Validate the body, call the one service of this action, answer with the case as it now is."""
        body = body_class(data=request.data)
        body.is_valid(raise_exception=True)
        case = service(actor=request.user, **objects, **body.validated_data)
        code = status.HTTP_201_CREATED if self.action == "create" else status.HTTP_200_OK
        return Response(s.RmaCaseSerializer(selectors.rma_list().get(pk=case.pk)).data, status=code)

    @extend_schema(request=s.RmaOpenSerializer, responses={201: s.RmaCaseSerializer})
    def create(self, request: Request) -> Response:
        """Open a case for a GPU (moved to ``rma`` if it is not there; its failure recorded)."""
        return self._step(request, s.RmaOpenSerializer, rma_services.rma_open)

    @extend_schema(request=s.RmaShipSerializer, responses=s.RmaCaseSerializer)
    @action(detail=True, methods=["post"])
    def ship(self, request: Request, pk: str | None = None) -> Response:
        """The failed board left with a carrier and tracking number."""
        return self._step(request, s.RmaShipSerializer, rma_services.rma_ship, case=self.get_object())

    @extend_schema(request=s.RmaReplaceSerializer, responses=s.RmaCaseSerializer)
    @action(detail=True, methods=["post"])
    def replace(self, request: Request, pk: str | None = None) -> Response:
        """The vendor's replacement arrived: its serial creates (or links) a GPU in ``received``."""
        return self._step(request, s.RmaReplaceSerializer, rma_services.rma_replace, case=self.get_object())

    @extend_schema(request=s.RmaCloseSerializer, responses=s.RmaCaseSerializer)
    @action(detail=True, methods=["post"])
    def close(self, request: Request, pk: str | None = None) -> Response:
        return self._step(request, s.RmaCloseSerializer, rma_services.rma_close, case=self.get_object())


class SparesPoolViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, mixins.CreateModelMixin,
                        mixins.UpdateModelMixin, _Base):
    serializer_class = s.SparesPoolSerializer
    http_method_names = ["get", "post", "patch", "head", "options"]
    filterset_class = _no_filters(SparesPool)

    def get_queryset(self) -> QuerySet:
        return selectors.pool_list()

    def perform_create(self, serializer: s.SparesPoolSerializer) -> None:
        serializer.instance = audited_create(model_class=SparesPool, actor=self.request.user,
                                             **serializer.validated_data)

    def perform_update(self, serializer: s.SparesPoolSerializer) -> None:
        audited_update(obj=serializer.instance, actor=self.request.user, **serializer.validated_data)


class ForecastRunViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, _Base):
    """Stored forecast runs; ``POST`` computes one now (as of a past date: only history before it). Operator."""

    serializer_class = s.ForecastRunSerializer
    pagination_class = NewestFirstCursorPagination
    filterset_class = _no_filters(ForecastRun)

    def get_queryset(self) -> QuerySet:
        return ForecastRun.objects.order_by("-id")

    @extend_schema(request=s.ForecastRunCreateSerializer, responses={201: s.ForecastRunSerializer})
    def create(self, request: Request) -> Response:
        body = s.ForecastRunCreateSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        run = forecast_services.forecast_compute(actor=request.user, **body.validated_data)
        return Response(s.ForecastRunSerializer(run).data, status=status.HTTP_201_CREATED)


class ForecastViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, _Base):
    """Spares forecasts per scope (site and model, pool and model, model fleet-wide). Without ``run``: the
    latest run's."""

    serializer_class = s.ForecastSerializer
    filterset_class = ForecastFilter

    def get_queryset(self) -> QuerySet:
        if getattr(self, "swagger_fake_view", False):
            return selectors.forecast_list().none()
        if self.action == "list" and "run" not in self.request.query_params:
            run = selectors.latest_run()
            return selectors.forecast_list(run=run) if run else selectors.forecast_list().none()
        return selectors.forecast_list()


class BacktestView(FlatErrors, APIView):
    """Roll the spares forecast monthly over the stored history and score it against the failures that
    followed, with the fixed rules (1-5 % of the installed base) for comparison."""

    schema = FleetAutoSchema()

    @extend_schema(parameters=[OpenApiParameter(name, type=t, required=name in ("date_from", "date_to"))
                               for name, t in (("date_from", str), ("date_to", str), ("lead_days", int),
                                               ("fill_rate", float), ("model", int), ("site", str), ("pool", str),
                                               ("method", str))],
                   responses={200: s.BacktestSerializer, 400: OpenApiResponse(description="Invalid input")})
    def get(self, request: Request) -> Response:
        known = set(s.BacktestQuerySerializer().fields) | {"format"}
        unknown = sorted(set(request.query_params) - known)
        if unknown:
            raise ValidationError({k: [f"Unknown parameter; parameters are {', '.join(sorted(known))}."]
                                   for k in unknown})
        body = s.BacktestQuerySerializer(data=request.query_params.dict())
        body.is_valid(raise_exception=True)
        try:
            return Response(forecast_services.backtest_run(**body.validated_data))
        except forecast_services.BacktestWindowError as exc:
            raise ValidationError({"date_to": [str(exc)]}) from exc
