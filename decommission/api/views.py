"""Decommission API: requests (create, actions, progress, media), evidence events, certificates (download the
signed file, verify), custody, processors, the policy table, signing keys, and the host agent's endpoints.

Roles: viewers read; operators create and run; approvers approve, validate, hold, release and close (and never
approve their own request, nor validate what they ran: 400 naming the rule); admins edit the policy table. An
action the request's state does not allow answers 409.
"""

from __future__ import annotations

from typing import Any

from django.core.exceptions import PermissionDenied as DjangoPermissionDenied
from django.db.models import QuerySet
from django.http import HttpResponse
from django.urls import reverse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import mixins, renderers, status, viewsets
from rest_framework.decorators import action
from rest_framework.exceptions import PermissionDenied
from rest_framework.permissions import AllowAny
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from decommission import lifecycle, selectors, services
from decommission.api import serializers as s
from decommission.files import certificate_filename, certificate_json
from decommission.filters import CertificateFilter, EventFilter, RequestFilter
from decommission.models import Asset, Certificate, DecommissionRequest, PolicyRule, Processor
from decommission.pdf import certificate_pdf, certificate_pdf_filename
from decommission.services.agent import agent_results_submit, agent_token_issue
from decommission.services.certificates import certificate_verify
from fleet.api import ErrorSerializer, FleetAutoSchema, NewestFirstCursorPagination, with_request_id
from fleet.audit import audited_update
from fleet.http import attachment_response
from fleet.roles import ADMIN, APPROVER, OPERATOR, VIEWER

CONFLICT = OpenApiResponse(ErrorSerializer, description="Not allowed in the request's state, or changed meanwhile")


def _action(request: Any = None, response: Any = s.DecommissionRequestSerializer, **kwargs: Any) -> Any:
    return extend_schema(request=request, responses={200: response, 409: CONFLICT}, **kwargs)


class RequestViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, viewsets.GenericViewSet):
    schema = FleetAutoSchema()
    serializer_class = s.DecommissionRequestSerializer
    filterset_class = RequestFilter
    pagination_class = NewestFirstCursorPagination
    required_roles = {name: a.role for name, a in lifecycle.ACTIONS.items()} | {
        "release_hold": APPROVER, "downgrade": APPROVER, "destroyed": OPERATOR, "custody": OPERATOR}

    def get_queryset(self) -> QuerySet[DecommissionRequest]:
        return selectors.request_list()

    def handle_exception(self, exc: Exception) -> Response:
        if isinstance(exc, lifecycle.IllegalTransition):
            return Response(with_request_id({"detail": " ".join(exc.messages), "code": "conflict"}, self.request),
                            status=status.HTTP_409_CONFLICT)
        return super().handle_exception(exc)

    def _respond(self, obj: DecommissionRequest, code: int = status.HTTP_200_OK) -> Response:
        return Response(s.DecommissionRequestSerializer(self.get_queryset().get(pk=obj.pk)).data, status=code)

    @extend_schema(request=s.DecommissionRequestCreateSerializer, responses={201: s.DecommissionRequestSerializer})
    def create(self, request: Request) -> Response:
        """A request for servers (hostnames or serials), loose GPUs (serials), a whole rack or a GPU generation."""
        data = s.DecommissionRequestCreateSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        v = data.validated_data
        obj = services.request_create(servers=v["server_objs"], gpus=v["gpu_objs"], reason=v["reason"],
                                      category=v["category"], destination=v["destination"], level=v["level"],
                                      location=v["location"], actor=request.user)
        return self._respond(obj, status.HTTP_201_CREATED)

    def _simple(self, name: str, request: Request, **kwargs: Any) -> Response:
        service = {"approve": services.request_approve, "drain": services.request_drain,
                   "inventory": services.request_inventory_start, "sanitize": services.request_start_sanitizing,
                   "validate": services.request_validate, "certify": services.request_certify,
                   "release": services.request_release, "close": services.request_close,
                   "release_hold": services.request_release_hold}[name]
        return self._respond(service(request=self.get_object(), actor=request.user, **kwargs))

    @_action()
    @action(detail=True, methods=["post"])
    def approve(self, request: Request, pk: str | None = None) -> Response:
        """Approvers only, never the requester (two-person rule)."""
        return self._simple("approve", request)

    @_action()
    @action(detail=True, methods=["post"])
    def drain(self, request: Request, pk: str | None = None) -> Response:
        """No jobs: the GPUs leave service through inventory's lifecycle (to ``decommissioning``)."""
        return self._simple("drain", request)

    @_action()
    @action(detail=True, methods=["post"])
    def inventory(self, request: Request, pk: str | None = None) -> Response:
        """Workers read every medium from the BMCs; the request becomes ``inventoried`` when all are recorded."""
        return self._simple("inventory", request)

    @_action()
    @action(detail=True, methods=["post"])
    def sanitize(self, request: Request, pk: str | None = None) -> Response:
        """Start (or retry after a failure) sanitizing; a legal hold refuses it."""
        return self._simple("sanitize", request)

    @_action()
    @action(detail=True, methods=["post"])
    def validate(self, request: Request, pk: str | None = None) -> Response:
        """Approvers only, never the operator who ran the sanitization."""
        return self._simple("validate", request)

    @_action()
    @action(detail=True, methods=["post"])
    def certify(self, request: Request, pk: str | None = None) -> Response:
        return self._simple("certify", request)

    @_action()
    @action(detail=True, methods=["post"])
    def release(self, request: Request, pk: str | None = None) -> Response:
        return self._simple("release", request)

    @_action()
    @action(detail=True, methods=["post"])
    def close(self, request: Request, pk: str | None = None) -> Response:
        """Needs the downstream receipt, reconciled against what left."""
        return self._simple("close", request)

    @_action()
    @action(detail=True, methods=["post"], url_path="release-hold")
    def release_hold(self, request: Request, pk: str | None = None) -> Response:
        return self._simple("release_hold", request)

    @_action(request=s.DecomReasonSerializer)
    @action(detail=True, methods=["post"])
    def hold(self, request: Request, pk: str | None = None) -> Response:
        """A legal hold: blocks sanitizing until released."""
        data = s.DecomReasonSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        return self._respond(services.request_hold(request=self.get_object(), actor=request.user, **data.validated_data))

    @_action(request=s.DecomOptionalReasonSerializer)
    @action(detail=True, methods=["post"])
    def cancel(self, request: Request, pk: str | None = None) -> Response:
        """Only before sanitizing."""
        data = s.DecomOptionalReasonSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        return self._respond(services.request_cancel(request=self.get_object(), actor=request.user,
                                                     **data.validated_data))

    @_action(request=s.DecomOptionalReasonSerializer)
    @action(detail=True, methods=["post"])
    def escalate(self, request: Request, pk: str | None = None) -> Response:
        data = s.DecomOptionalReasonSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        return self._respond(services.request_escalate(request=self.get_object(), actor=request.user,
                                                       **data.validated_data))

    @_action(request=s.DestructionSerializer)
    @action(detail=True, methods=["post"])
    def destroyed(self, request: Request, pk: str | None = None) -> Response:
        """Record physical destruction (certificate of destruction) of every medium not sanitized."""
        data = s.DestructionSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        return self._respond(services.request_record_destruction(request=self.get_object(), actor=request.user,
                                                                 **data.validated_data))

    @_action(request=s.DecomDisposeSerializer)
    @action(detail=True, methods=["post"])
    def dispose(self, request: Request, pk: str | None = None) -> Response:
        data = s.DecomDisposeSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        return self._respond(services.request_dispose(request=self.get_object(), actor=request.user,
                                                      **data.validated_data))

    @_action(request=s.DowngradeSerializer)
    @action(detail=True, methods=["post"])
    def downgrade(self, request: Request, pk: str | None = None) -> Response:
        """An approved exception: a level below the policy, with its reason (approver, not the requester)."""
        data = s.DowngradeSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        return self._respond(services.request_downgrade(request=self.get_object(), actor=request.user,
                                                        **data.validated_data))

    @extend_schema(request=s.CustodyTransferCreateSerializer, responses={201: s.CustodyTransferSerializer})
    @action(detail=True, methods=["post"])
    def custody(self, request: Request, pk: str | None = None) -> Response:
        """A hand-off (the first one of a released request ships it) or the downstream receipt."""
        data = s.CustodyTransferCreateSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        transfer = services.custody_record(request=self.get_object(), actor=request.user, **data.validated_data)
        return Response(s.CustodyTransferSerializer(transfer).data, status=status.HTTP_201_CREATED)

    @extend_schema(responses=s.DecommissionAssetSerializer(many=True), filters=False)  # a plain list
    @action(detail=True, methods=["get"], pagination_class=None)
    def progress(self, request: Request, pk: str | None = None) -> Response:
        """Each server (or loose GPU) with its media counts: total, done, failed."""
        return Response(s.DecommissionAssetSerializer(selectors.asset_progress(request=self.get_object()), many=True).data)

    @extend_schema(responses=s.MediumSerializer(many=True), filters=False)  # a plain list
    @action(detail=True, methods=["get"], pagination_class=None)
    def media(self, request: Request, pk: str | None = None) -> Response:
        return Response(s.MediumSerializer(selectors.media_for(request=self.get_object()), many=True).data)

    @extend_schema(responses=s.CustodyTransferSerializer(many=True), filters=False)  # a plain list
    @action(detail=True, methods=["get"], url_path="custody-log", pagination_class=None)
    def custody_log(self, request: Request, pk: str | None = None) -> Response:
        return Response(s.CustodyTransferSerializer(selectors.custody_for(request=self.get_object()), many=True).data)


class EventViewSet(mixins.ListModelMixin, viewsets.GenericViewSet):
    """Evidence events (append-only; hash-chained per asset and in the request's own chain), in the order written."""

    schema = FleetAutoSchema()
    serializer_class = s.EvidenceEventSerializer
    filterset_class = EventFilter

    def get_queryset(self) -> QuerySet:
        return selectors.events_for_all()


class PdfRenderer(renderers.BaseRenderer):
    """Selects ``application/pdf`` for the PDF action (the view answers the bytes; errors render as JSON)."""

    media_type = "application/pdf"
    format = "pdf"
    charset = None

    def render(self, data: Any, accepted_media_type: str | None = None, renderer_context: Any = None) -> bytes:
        return data if isinstance(data, bytes) else b""


class CertificateViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, viewsets.GenericViewSet):
    schema = FleetAutoSchema()
    serializer_class = s.CertificateSerializer
    filterset_class = CertificateFilter
    lookup_value_regex = "[0-9a-f-]{36}"
    required_roles = {"verify": VIEWER}  # verifying writes nothing

    def get_queryset(self) -> QuerySet[Certificate]:
        return selectors.certificates_for()

    @extend_schema(responses={(200, "application/json"): OpenApiResponse(description="The signed file")})
    @action(detail=True, methods=["get"])
    def download(self, request: Request, pk: str | None = None) -> HttpResponse:
        """The signed JSON file (the record; the same bytes as ``export_certificates``)."""
        cert = self.get_object()
        return attachment_response(certificate_json(cert), content_type="application/json",
                                   filename=certificate_filename(cert))

    @extend_schema(responses={(200, "application/pdf"): OpenApiResponse(
        OpenApiTypes.BINARY, description="A rendering for people: the certificate id and the SHA-256 of the signed "
                                         "JSON file on top, the Appendix G fields below. The JSON is the record.")})
    @action(detail=True, methods=["get"], renderer_classes=[PdfRenderer])
    def pdf(self, request: Request, pk: str | None = None) -> HttpResponse:
        """The certificate as a PDF (beside ``download``, the signed JSON file, which is the record)."""
        cert = self.get_object()
        return attachment_response(certificate_pdf(cert), content_type="application/pdf",
                                   filename=certificate_pdf_filename(cert))

    @extend_schema(request=None, responses=s.CertificateVerifySerializer)
    @action(detail=True, methods=["post"])
    def verify(self, request: Request, pk: str | None = None) -> Response:
        """Verify the signature, completeness, the events it carries and its request's chain."""
        cert = self.get_object()
        chain = services.chain_verify(request=cert.request)
        problems = certificate_verify(document=cert.document, stored_sha256=cert.sha256, chain_ok=chain.ok)
        return Response({"valid": not problems, "problems": problems, "sha256": cert.sha256, "key_id": cert.key_id})


class ProcessorViewSet(mixins.ListModelMixin, mixins.CreateModelMixin, viewsets.GenericViewSet):
    schema = FleetAutoSchema()
    serializer_class = s.ProcessorSerializer
    queryset = Processor.objects.order_by("name", "id")

    def perform_create(self, serializer: s.ProcessorSerializer) -> None:
        serializer.instance = services.processor_create(actor=self.request.user, **serializer.validated_data)


class PolicyViewSet(mixins.ListModelMixin, mixins.UpdateModelMixin, viewsets.GenericViewSet):
    """The policy table (data): admins edit a rule's minimum level; every edit is audited."""

    schema = FleetAutoSchema()
    serializer_class = s.PolicyRuleSerializer
    required_roles = {"update": ADMIN, "partial_update": ADMIN}
    http_method_names = ["get", "patch", "head", "options"]

    def get_queryset(self) -> QuerySet[PolicyRule]:
        return selectors.policy_table()

    def perform_update(self, serializer: s.PolicyRuleSerializer) -> None:
        audited_update(obj=serializer.instance, actor=self.request.user, **serializer.validated_data)


class KeysView(APIView):
    """One document, not a list: an APIView, so the schema does not describe an array."""

    schema = FleetAutoSchema()

    @extend_schema(responses=s.PublicKeysSerializer)
    def get(self, request: Request) -> Response:
        """Every public key an auditor needs to verify certificates offline (retired keys too)."""
        return Response(services.public_keys_document())


class AssetTokenViewSet(viewsets.GenericViewSet):
    schema = FleetAutoSchema()
    queryset = Asset.objects.select_related("request", "server")
    required_roles = {"agent_token": OPERATOR, "resume": APPROVER}

    @extend_schema(request=s.AssetResumeSerializer, responses={200: s.DecommissionAssetSerializer})
    @action(detail=True, methods=["post"])
    def resume(self, request: Request, pk: str | None = None) -> Response:
        """A person's decision on an asset the workers held for one (its hold_reason and hold_evidence)."""
        data = s.AssetResumeSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        asset = services.asset_resume(asset=self.get_object(), actor=request.user, **data.validated_data)
        row = selectors.asset_progress(request=asset.request).get(pk=asset.pk)
        return Response(s.DecommissionAssetSerializer(row).data)

    @extend_schema(request=None, responses={201: s.AgentTokenSerializer})
    @action(detail=True, methods=["post"], url_path="agent-token")
    def agent_token(self, request: Request, pk: str | None = None) -> Response:
        """A one-time host agent token for this server (shown once), for the sanitize image that boots it."""
        asset = self.get_object()
        token, raw = agent_token_issue(asset=asset, actor=request.user)
        upload = request.build_absolute_uri(reverse("api:decommission-agent-results"))
        script = request.build_absolute_uri(reverse("decommission:agent-script")) + f"?server={asset.label}"
        return Response({"token": raw, "expires_at": token.expires_at, "script_url": script, "upload_url": upload},
                        status=status.HTTP_201_CREATED)


class AgentResultsViewSet(viewsets.ViewSet):
    """The host agent's upload: ``Authorization: AgentToken <token>``; no user session."""

    schema = FleetAutoSchema()
    permission_classes = [AllowAny]
    authentication_classes: list = []

    @extend_schema(request=s.AgentUploadSerializer, responses={200: s.AgentDecisionSerializer(many=True)},
                   auth=[])
    def create(self, request: Request) -> Response:
        header = request.headers.get("Authorization", "")
        raw = header.split(" ", 1)[1] if header.startswith("AgentToken ") else ""
        if not raw:  # a caller without an agent token learns nothing about the body it sent
            raise PermissionDenied("An agent token is required (Authorization: AgentToken <token>).")
        data = s.AgentUploadSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        try:
            decisions = agent_results_submit(raw_token=raw, server=data.validated_data["server"],
                                             results=data.validated_data["results"])
        except DjangoPermissionDenied as exc:
            raise PermissionDenied(str(exc)) from exc  # the API's error shape: detail, code, request id
        return Response([{"medium": str(d.medium), "state": d.state, "reason": d.reason} for d in decisions])


