"""Rollout pages: the list, the wizard with its live plan preview (a dry run on every change), and the rollout
page whose progress partial polls while the rollout can move by itself. Every action is a POST calling one
service; a refused transition is a message on the page, never an error page."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.contrib import messages
from django.core.exceptions import PermissionDenied, ValidationError
from django.db.models import Count, Q
from django.http import Http404, HttpResponse
from django.shortcuts import redirect, render
from django.template.defaultfilters import pluralize
from django.urls import reverse
from django.views.decorators.http import require_POST
from django_htmx.http import HttpResponseClientRedirect

from firmware import lifecycle
from firmware.forms import CAP_DOMAINS, RolloutForm
from firmware.lifecycle import RolloutAction
from firmware.models import ErrorClass, Rollout, RolloutState, RolloutTarget, TargetState
from firmware.selectors import rollout_pages as selectors
from firmware.selectors.drains import rollout_drain_context
from firmware.services import held as held_services
from firmware.services import rollout as services
from firmware.services.plan import Plan, plan_preview, selector_filter, strategy_parse
from fleet import selectors as fleet_selectors
from fleet.pagination import keyset_page
from fleet.roles import APPROVER, has_role
from fleet.views import (
    HtmxHttpRequest,
    audit_query_for,
    audit_rows,
    operator_required,
    query_params,
    query_with,
    query_without,
    render_page,
    viewer_required,
)

# --- list -------------------------------------------------------------------------------------------------------


@viewer_required
@query_params(state=RolloutState.values)
def rollout_list(request: HtmxHttpRequest) -> HttpResponse:
    state = request.GET.get("state", "")
    page = keyset_page(selectors.rollout_list(state=state or None), after=request.GET.get("after"),
                       size=settings.FLEET_PAGE_SIZE, sort="-id", allowed=("-id",))
    done = selectors.rollout_done_counts(page.items)
    rows = []
    for rollout in page.items:
        targets = (rollout.plan_summary or {}).get("targets", 0)
        finished = targets if rollout.state == RolloutState.COMPLETED else done.get(rollout.pk)
        rows.append({"rollout": rollout, "targets": targets, "done": finished,
                     "percent": round(100 * finished / targets) if targets and finished is not None else None,
                     "waves": (rollout.plan_summary or {}).get("waves", 0)})
    context = {
        "rows": rows,
        "page": page,
        "state": state,
        "states": RolloutState.choices,
        "next_query": query_with(request.GET, after=page.next_after) if page.has_next else None,
        "first_query": query_without(request.GET, "after"),
    }
    return render_page(request, "firmware/rollout_list.html", "rollout-table", context)


# --- wizard and live preview ------------------------------------------------------------------------------------


def _wave_rows(plan: Plan) -> list[dict[str, Any]]:
    """Each planned wave with, per failure domain, how many of its servers the fullest domain holds."""
    rows = []
    for wave in plan.waves:
        per_domain = wave.per_domain
        rows.append({
            "wave": wave,
            "servers": len(wave.server_ids),
            "max": {d: max(per_domain.get(d, {}).values(), default=0) for d in CAP_DOMAINS},
            "domains": {d: len(per_domain.get(d, {})) for d in CAP_DOMAINS},
            "sites": len(per_domain.get("site", {})),
        })
    return rows


def _canary_paths(plan: Plan, want: dict[str, str]) -> list[dict[str, Any]]:
    """The canary's units, one per upgrade path: the server, where it is, and its firmware now -> then."""
    if not plan.waves or plan.waves[0].name != "canary":
        return []
    rows = []
    for server_id in plan.waves[0].server_ids:
        server = plan.servers[server_id]
        path = plan.paths.get(server.path, {})
        rows.append({
            "server": server, "path": server.path, "paths_servers": path.get("servers", 0),
            "changes": [(component, ", ".join(versions) or "unknown", want.get(component, ""))
                        for component, versions in sorted(server.current.items())],
        })
    return rows


@dataclass
class Preview:
    form: RolloutForm
    plan: Plan | None = None
    matched_gpus: int | None = None
    matched_servers: int | None = None
    filtered: bool = False
    waves: list[dict[str, Any]] | None = None
    canary: list[dict[str, Any]] | None = None
    bundle_versions: dict[str, str] | None = None
    skipped_sample: list[str] | None = None
    skipped_more: int = 0


def _preview(form: RolloutForm) -> Preview:
    """Validate the wizard and, when it holds a bundle and a valid strategy, plan it without writing anything."""
    form.is_valid()
    preview = Preview(form=form)
    selector = form.selector_params()
    if form.selector.is_valid():
        filterset = selector_filter(selector)
        preview.filtered = bool(selector)
        counts = filterset.qs.order_by().aggregate(gpus=Count("id"),
                                                    servers=Count("server_id", distinct=True, filter=Q(server__isnull=False)))
        preview.matched_gpus, preview.matched_servers = counts["gpus"], counts["servers"]
    bundle = form.cleaned_data.get("bundle")
    if bundle is None or form.strategy is None or not form.selector.is_valid():
        return preview
    try:
        plan = plan_preview(bundle=bundle, selector=selector, strategy=form.strategy)
    except ValidationError as exc:
        form.add_service_errors(exc)
        return preview
    want = {item.component: item.release.version for item in bundle.items.select_related("release")}
    preview.plan, preview.bundle_versions = plan, want
    preview.waves = _wave_rows(plan)
    preview.canary = _canary_paths(plan, want)
    preview.skipped_sample = [plan.servers[i].hostname for i in plan.skipped[:8]]
    preview.skipped_more = len(plan.skipped) - len(preview.skipped_sample)
    return preview


def _wizard(request: HtmxHttpRequest, form: RolloutForm, preview: Preview | None) -> HttpResponse:
    return render(request, "firmware/rollout_form.html",
                  {"form": form, "preview": preview, "cap_domains": CAP_DOMAINS})


@operator_required
def rollout_create(request: HtmxHttpRequest) -> HttpResponse:
    """The wizard. ``_preview`` in the POST (the no-JavaScript "Preview plan" button) shows the plan and creates
    nothing; otherwise a valid form creates and plans the rollout and goes to its page."""
    if request.method != "POST":  # ?bundle=&name=: opened from a release ("Roll out this release")
        initial = {name: request.GET[name] for name in ("bundle", "name") if request.GET.get(name)}
        return _wizard(request, RolloutForm(initial=initial) if initial else RolloutForm(), None)
    form = RolloutForm(request.POST, preview="_preview" in request.POST)
    if "_preview" not in request.POST and form.is_valid():
        data = form.cleaned_data
        try:
            rollout = services.rollout_create(name=data["name"], bundle=data["bundle"],
                                              selector=form.selector_params(), strategy=form.strategy,
                                              actor=request.user)
        except ValidationError as exc:
            form.add_service_errors(exc)
        else:
            messages.success(request, f"Rollout “{rollout.name}” planned: {rollout.plan_summary.get('targets', 0)} "
                                      f"targets in {rollout.plan_summary.get('waves', 0)} waves. "
                                      "Submit it for approval when it looks right.")
            return redirect("rollout-detail", pk=rollout.pk)
    return _wizard(request, form, _preview(form))


@operator_required
@require_POST
def rollout_preview(request: HtmxHttpRequest) -> HttpResponse:
    """The dry-run plan of the wizard's current inputs (htmx), with every field's errors swapped out of band."""
    form = RolloutForm(request.POST, preview=True)
    return render(request, "firmware/includes/plan_preview.html",
                  {"preview": _preview(form), "form": form, "oob": True, "cap_domains": CAP_DOMAINS})


# --- the rollout page ---------------------------------------------------------------------------------------------


# What each action of firmware.lifecycle.ROLLOUT_ACTIONS calls (the table says who may, and when).
CALLS: dict[str, Callable[[Rollout, Any, str], Any]] = {
    "plan": lambda r, u, why: services.rollout_plan(rollout=r, actor=u),
    "submit": lambda r, u, why: services.rollout_submit(rollout=r, actor=u),
    "approve": lambda r, u, why: services.rollout_approve(rollout=r, actor=u),
    "approve_start": lambda r, u, why: services.rollout_approve_and_start(rollout=r, actor=u),
    "reject": lambda r, u, why: services.rollout_reject(rollout=r, actor=u, reason=why),
    "start": lambda r, u, why: services.rollout_start(rollout=r, actor=u),
    "pause": lambda r, u, why: services.rollout_pause(rollout=r, actor=u, reason=why),
    "resume": lambda r, u, why: services.rollout_resume(rollout=r, actor=u, reason=why),
    "retry_exceptions": lambda r, u, why: services.rollout_retry_exceptions(rollout=r, actor=u),
    "abort": lambda r, u, why: services.rollout_abort(rollout=r, actor=u, reason=why),
    "rollback": lambda r, u, why: services.rollout_rollback(rollout=r, actor=u),
}


def _actions(user: Any, rollout: Rollout) -> list[tuple[str, RolloutAction]]:
    """The buttons this user gets for this rollout now (firmware.lifecycle decides)."""
    return lifecycle.rollout_actions(user, rollout)


def _strategy_summary(rollout: Rollout) -> list[tuple[str, str]]:
    try:
        s = strategy_parse(rollout.strategy)
    except ValidationError:
        return [("Strategy", "unreadable")]
    caps = ", ".join(f"{CAP_DOMAINS.get(d, d)} ≤ {n}" for d, n in s.domain_caps.items()) or "none"
    unavailable = ", ".join(f"{n} per {what}" for what, n in (("site", s.max_unavailable_per_site),
                                                              ("pool", s.max_unavailable_per_pool)) if n) or "no limit"
    return [
        ("Canary", "one unit per upgrade path" if s.canary else "off"),
        ("Waves", " → ".join(f"{w:g} %" for w in s.waves)),
        ("Cap per wave", caps),
        ("Max unavailable", unavailable),
        ("Soak", f"{s.soak_seconds // 60} min" if s.soak_seconds else "none"),
        ("Success threshold", f"{s.success_threshold:g} %"),
        ("Failure limits", f"{s.max_failures} or {s.max_failure_ratio:.0%} after {s.min_sample} finished"),
        ("On failure", s.on_failure),
        ("Maintenance window", "required" if s.require_window else "not required"),
        ("Retries", f"{s.retry_max_attempts} attempts, backoff {', '.join(str(b) for b in s.retry_backoff_seconds)} s"),
    ]


def _selector_summary(rollout: Rollout) -> list[tuple[str, str]]:
    """(filter, value) rows of the rollout's selector; explicit servers are one row without a filter name."""
    rows = []
    for name, value in sorted(rollout.selector.items()):
        if name == "_server_ids":  # explicit servers: a rollback's, or chosen (the demo rollout)
            servers = f"server{pluralize(len(value))}"
            rows.append(("", f"{len(value)} {servers} activated by the rolled-back rollout" if rollout.rollback_of_id
                         else f"{len(value)} chosen {servers}"))
        else:
            rows.append((name, ", ".join(map(str, value)) if isinstance(value, list) else str(value)))
    return rows


def _rollout_or_404(pk: int) -> Rollout:
    try:
        return selectors.rollout_detail(pk)
    except Rollout.DoesNotExist:
        raise Http404("No such rollout.") from None


# What a rollout in each state waits for, and the next step (shown above its buttons).
WAITING = {
    RolloutState.DRAFT: "A draft: plan it to see its waves.",
    RolloutState.PLANNED: "Planned. Next: check the waves and submit it for approval.",
    RolloutState.AWAITING_APPROVAL: "Waiting for an approver (not its creator): approve and start, approve only, "
                                    "or send it back with a reason.",
    RolloutState.APPROVED: "Approved. Next: start it; the engine then takes the canary and the waves.",
    RolloutState.RUNNING: "Running: the engine updates the targets wave by wave; it pauses by itself on a failed "
                          "gate.",
    RolloutState.PAUSED: "Paused: nothing new starts. Next: look at the failures, then resume (with a reason), "
                         "abort or roll back.",
    RolloutState.COMPLETED_WITH_EXCEPTIONS: "Done except for targets that failed for infrastructure reasons or "
                                            "could not be told: retry them, or roll back.",
}


def _live_context(request: HtmxHttpRequest, rollout: Rollout,
                  notices: list[tuple[str, str]] | None = None) -> dict[str, Any]:
    progress = selectors.rollout_progress(rollout)
    current = progress.current if rollout.state in selectors.LIVE_STATES else None
    return {
        "rollout": rollout,
        "progress": progress,
        "current": current,
        "failures": list(selectors.rollout_failures(rollout)[:50]),
        "exceptions": (list(services.exception_targets(rollout).select_related("server").order_by("id")[:200])
                       if rollout.state == RolloutState.COMPLETED_WITH_EXCEPTIONS else []),
        "held": _held(rollout) if progress.failed else [],  # no failed target: none held, no query
        "actions": _actions(request.user, rollout),
        "waiting": (f"Paused: {rollout.pause_reason}. " if rollout.state == RolloutState.PAUSED and rollout.pause_reason
                    else "") + WAITING.get(rollout.state, ""),
        "awaits_other_approver": (rollout.state == RolloutState.AWAITING_APPROVAL
                                  and request.user.pk == rollout.created_by_id and has_role(request.user, APPROVER)),
        "live": rollout.state in selectors.LIVE_STATES,
        "audit": audit_rows(fleet_selectors.audit_latest(rollout), objects=False),
        "audit_query": audit_query_for(rollout),
        "notices": notices or [],
        **rollout_drain_context(rollout),
    }


def _held(rollout: Rollout) -> list[held_services.HeldStep]:
    """Targets held for a person on an unanswered request, with the BMC's findings (first 100)."""
    targets = list(RolloutTarget.objects.filter(rollout=rollout, state=TargetState.FAILED,
                                                error_class=ErrorClass.INCONCLUSIVE)
                   .select_related("server").order_by("id")[:100])
    return list(held_services.held_steps(targets).values()) if targets else []


@viewer_required
def rollout_detail(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    rollout = _rollout_or_404(pk)
    context = _live_context(request, rollout)
    context |= {
        "items": list(rollout.bundle.items.all()),
        "strategy": _strategy_summary(rollout),
        "selector": _selector_summary(rollout),
        "children": selectors.rollout_children(rollout),
    }
    return render_page(request, "firmware/rollout_detail.html", "rollout-live", context)


@viewer_required
def rollout_progress(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    """The live part of the rollout page (what it polls); without htmx, the whole page."""
    if not request.htmx:
        return redirect("rollout-detail", pk=pk)
    return render(request, "firmware/rollout_detail.html#rollout-live", _live_context(request, _rollout_or_404(pk)))


@operator_required
@require_POST
def rollout_action(request: HtmxHttpRequest, pk: int, action: str) -> HttpResponse:
    """One of ACTIONS through its service. htmx gets the live partial back with the outcome; a plain form post is
    redirected to the rollout page with a message."""
    spec = lifecycle.ROLLOUT_ACTIONS.get(action)
    if spec is None or action not in CALLS:
        raise Http404("No such action.")
    if not has_role(request.user, spec.role):
        raise PermissionDenied(f"{spec.label} needs the {spec.role} role.")
    rollout = _rollout_or_404(pk)
    reason = request.POST.get("reason", "").strip()[:500]
    notices: list[tuple[str, str]] = []
    try:
        result = CALLS[action](rollout, request.user, reason)
    except ValidationError as exc:  # RolloutStateError and RolloutConflict are ValidationErrors
        notices = [("error", f"{spec.label}: {message}") for message in exc.messages]
    else:
        if action == "rollback":
            messages.success(request, f"Rolled back: “{result.name}” is planned and needs approval.")
            url = reverse("rollout-detail", args=[result.pk])
            return HttpResponseClientRedirect(url) if request.htmx else redirect(url)
        notices = [("success", f"{spec.label}: done. The rollout is {result.get_state_display().lower()}.")]
    if not request.htmx:
        for level, text in notices:
            messages.add_message(request, messages.ERROR if level == "error" else messages.SUCCESS, text)
        return redirect("rollout-detail", pk=pk)
    return render(request, "firmware/rollout_detail.html#rollout-live",
                  _live_context(request, _rollout_or_404(pk), notices))


@operator_required
@require_POST
def rollout_target_resolve(request: HtmxHttpRequest, pk: int, target_pk: int) -> HttpResponse:
    """What a person found on the BMC for a held target: ``landed`` yes or no, and a note (required)."""
    rollout = _rollout_or_404(pk)
    target = RolloutTarget.objects.filter(rollout=rollout, pk=target_pk).select_related("server").first()
    if target is None:
        raise Http404("No such target in this rollout.")
    landed = request.POST.get("landed")
    notices: list[tuple[str, str]] = []
    if landed not in ("yes", "no"):
        notices = [("error", "Choose whether the request landed on the BMC.")]
    else:
        try:
            held_services.rollout_target_resolve(target=target, actor=request.user, landed=landed == "yes",
                                                 note=request.POST.get("note", "")[:300])
        except ValidationError as exc:
            notices = [("error", f"{target.server.hostname}: {message}") for message in exc.messages]
        else:
            verdict = "it landed" if landed == "yes" else "it did not land; it is sent once more when retried"
            notices = [("success", f"{target.server.hostname}: recorded, {verdict}. “Retry the exceptions” goes "
                                   f"on once the rollout has finished its waves.")]
    if not request.htmx:
        for level, text in notices:
            messages.add_message(request, messages.ERROR if level == "error" else messages.SUCCESS, text)
        return redirect("rollout-detail", pk=pk)
    return render(request, "firmware/rollout_detail.html#rollout-live",
                  _live_context(request, _rollout_or_404(pk), notices))
