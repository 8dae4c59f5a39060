"""Signing in and API tokens: the throttled login page, ``POST /api/v1/auth/token/`` and the account page
where a user issues, sees and revokes their tokens."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import messages
from django.contrib.auth import authenticate
from django.contrib.auth import views as auth_views
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import get_object_or_404, render
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.http import require_POST
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import exceptions, serializers
from rest_framework.authtoken.models import Token
from rest_framework.permissions import AllowAny
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from fleet.api import ErrorSerializer, ValidationErrorSerializer
from fleet.audit import audit_account_event
from fleet.models import ApiToken, AuditAction, TokenScope
from fleet.throttle import client_address, signin_check, signin_failed, signin_succeeded
from fleet.tokens import token_create, token_list, token_revoke, token_state

THROTTLED = "Too many sign-in attempts. Try again in {wait} seconds."


class LoginView(auth_views.LoginView):
    """Django's login page, throttled per client and per account before the password is checked."""

    def post(self, request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        address, username = client_address(request), request.POST.get("username", "")[:150]
        wait = signin_check(address=address, username=username)
        if wait is not None:
            form = self.get_form_class()(request, initial={"username": username})  # unbound: nothing is checked
            context = self.get_context_data(form=form, throttled=THROTTLED.format(wait=wait))
            response = self.render_to_response(context, status=429)
            response["Retry-After"] = str(wait)
            return response
        self.signin = (address, username)
        return super().post(request, *args, **kwargs)

    def form_valid(self, form: Any) -> HttpResponse:
        signin_succeeded(address=self.signin[0], username=self.signin[1])
        return super().form_valid(form)

    def form_invalid(self, form: Any) -> HttpResponse:
        if self.signin[1] and form.data.get("password"):
            signin_failed(address=self.signin[0], username=self.signin[1])
        return super().form_invalid(form)


# --- POST /api/v1/auth/token/ --------------------------------------------------------------------------------


class TokenRequestSerializer(serializers.Serializer):
    username = serializers.CharField(max_length=150)
    password = serializers.CharField(max_length=4096, style={"input_type": "password"}, trim_whitespace=False)
    name = serializers.CharField(max_length=100, required=False, default="api", help_text="What the token is for")
    scope = serializers.ChoiceField(choices=TokenScope.choices, required=False, default=TokenScope.FULL,
                                    help_text="full: what your role allows; read: reads only; push: telemetry push only")
    expires_in_days = serializers.IntegerField(min_value=0, max_value=3650, required=False, allow_null=True,
                                               default=None, help_text="Default FLEET_TOKEN_DEFAULT_DAYS; 0: never")


class TokenResponseSerializer(serializers.Serializer):
    token = serializers.CharField(help_text="Send as `Authorization: Token <token>`; shown only now")
    name = serializers.CharField()
    scope = serializers.ChoiceField(choices=TokenScope.choices)
    expires_at = serializers.DateTimeField(allow_null=True)


class TokenObtainView(APIView):
    """Trade a username and password for a new API token (scoped and expiring). Throttled: repeated wrong
    passwords lock the account and the client for a while (429 with ``Retry-After``)."""

    permission_classes = [AllowAny]
    authentication_classes: list[type] = []

    @extend_schema(request=TokenRequestSerializer, responses={
        200: TokenResponseSerializer,
        400: OpenApiResponse(ValidationErrorSerializer, description="Missing fields or wrong credentials"),
        429: OpenApiResponse(ErrorSerializer, description="Too many attempts; see Retry-After")},
        auth=[])
    def post(self, request: Request) -> Response:
        address = client_address(request._request)
        username = str(request.data.get("username", ""))[:150] if hasattr(request.data, "get") else ""
        wait = signin_check(address=address, username=username)
        if wait is not None:
            raise exceptions.Throttled(wait=wait, detail=THROTTLED.format(wait=wait))
        serializer = TokenRequestSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        data = serializer.validated_data
        user = authenticate(request._request, username=data["username"], password=data["password"])
        if user is None:
            signin_failed(address=address, username=data["username"])
            raise exceptions.ValidationError({"non_field_errors": ["Unable to log in with provided credentials."]})
        signin_succeeded(address=address, username=data["username"])
        token, key = token_create(user=user, name=data["name"], scope=data["scope"],
                                  expires_in_days=data["expires_in_days"], actor=user)
        return Response({"token": key, "name": token.name, "scope": token.scope, "expires_at": token.expires_at})


# --- the account page ----------------------------------------------------------------------------------------


class TokenForm(forms.Form):
    name = forms.CharField(max_length=100)
    scope = forms.ChoiceField(choices=TokenScope.choices, initial=TokenScope.READ)
    expires_in_days = forms.IntegerField(min_value=0, max_value=3650, initial=90,
                                         help_text="0: never expires")


@login_required
def account(request: HttpRequest) -> HttpResponse:
    """The signed-in user's tokens: issue one (its key is shown once), see when each was used, revoke."""
    form = TokenForm(request.POST or None)
    new_key = None
    if request.method == "POST" and form.is_valid():
        token, new_key = token_create(user=request.user, name=form.cleaned_data["name"],  # type: ignore[arg-type]
                                      scope=form.cleaned_data["scope"],
                                      expires_in_days=form.cleaned_data["expires_in_days"], actor=request.user)
        form = TokenForm()
    now = timezone.now()
    tokens = [(token, token_state(token, now)) for token in token_list(user=request.user)]  # type: ignore[arg-type]
    legacy = Token.objects.filter(user=request.user).first()
    status = 400 if request.method == "POST" and new_key is None else 200
    return render(request, "fleet/account.html",
                  {"form": form, "tokens": tokens, "new_key": new_key, "legacy": legacy}, status=status)


@login_required
@require_POST
def account_token_revoke(request: HttpRequest, pk: int) -> HttpResponse:
    token = get_object_or_404(ApiToken, pk=pk, user=request.user)
    if token_revoke(token=token, actor=request.user):  # type: ignore[arg-type]
        messages.success(request, f"Token '{token.name}' revoked.")
    return HttpResponseRedirect(reverse("account"))


@login_required
@require_POST
def account_legacy_token_revoke(request: HttpRequest) -> HttpResponse:
    """Delete the user's old unscoped DRF token (made before scoped tokens existed)."""
    if Token.objects.filter(user=request.user).delete()[0]:
        audit_account_event(username=request.user.get_username(), action=AuditAction.REVOKE,
                            message="Legacy API token revoked", actor=request.user)  # type: ignore[arg-type]
        messages.success(request, "Legacy token revoked.")
    return HttpResponseRedirect(reverse("account"))
