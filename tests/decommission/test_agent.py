"""The host agent's token (bound to one server, single use, expiring) and its upload: real-format outputs decide
each medium; a medium not recorded at inventory is refused and nothing is written."""

from __future__ import annotations

import datetime as dt

import pytest
from django.core.exceptions import PermissionDenied, ValidationError
from django.utils import timezone

from decommission.models import AgentToken, EvidenceEvent, MediaState, Medium
from decommission.services.agent import agent_results_submit, agent_script, agent_token_issue
from tests.decommission.decom_factories import walk
from tests.decommission.tool_outputs import agent_results

pytestmark = pytest.mark.django_db
URL = "http://fleet.test/api/v1/decommission/agent/results/"


@pytest.fixture
def sanitizing(users):
    return walk("sanitizing", users=users)


def _issue(r, users):
    asset = r.assets.get()
    token, raw = agent_token_issue(asset=asset, actor=users["operator"])
    return asset, raw


def _nvme_serials(asset):
    return list(Medium.objects.filter(asset=asset, media_type="nvme").values_list("serial", flat=True))


def test_script_then_upload_sanitizes_nvme_and_tpm(sanitizing, users):
    asset, raw = _issue(sanitizing, users)
    script = agent_script(raw_token=raw, server=asset.label, upload_url=URL)
    assert "nvme sanitize" in script and "tpm2_clear -c p" in script and raw in script
    decisions = agent_results_submit(raw_token=raw, server=asset.label, results=agent_results(_nvme_serials(asset)))
    assert {d.state for d in decisions} == {MediaState.SANITIZED}
    assert Medium.objects.filter(asset=asset, media_type__in=["nvme", "tpm"], state="sanitized").count() == 3
    assert EvidenceEvent.objects.filter(asset=asset, step="gpu.reset", result="ok").exists()


def test_old_nvme_cli_shape_also_passes(sanitizing, users):
    asset, raw = _issue(sanitizing, users)
    agent_script(raw_token=raw, server=asset.label, upload_url=URL)
    agent_results_submit(raw_token=raw, server=asset.label, results=agent_results(_nvme_serials(asset), old=True))
    assert Medium.objects.filter(asset=asset, media_type="nvme", state="sanitized").count() == 2


def test_device_failure_counts_and_medium_returns_to_pending(sanitizing, users):
    asset, raw = _issue(sanitizing, users)
    agent_script(raw_token=raw, server=asset.label, upload_url=URL)
    agent_results_submit(raw_token=raw, server=asset.label,
                         results=agent_results(_nvme_serials(asset), nvme_status=3, tpm_rc=1))
    nvme = Medium.objects.filter(asset=asset, media_type="nvme").first()
    assert (nvme.state, nvme.device_failures) == (MediaState.PENDING, 1)
    assert Medium.objects.get(asset=asset, media_type="tpm").device_failures == 1


def test_wrong_server_is_refused_and_burns_the_token(sanitizing, users):
    asset, raw = _issue(sanitizing, users)
    with pytest.raises(PermissionDenied, match="another server"):
        agent_script(raw_token=raw, server="other-host", upload_url=URL)
    with pytest.raises(PermissionDenied, match="already used"):
        agent_script(raw_token=raw, server=asset.label, upload_url=URL)


def test_reused_token_is_refused(sanitizing, users):
    asset, raw = _issue(sanitizing, users)
    agent_script(raw_token=raw, server=asset.label, upload_url=URL)
    with pytest.raises(PermissionDenied, match="already used"):
        agent_script(raw_token=raw, server=asset.label, upload_url=URL)
    agent_results_submit(raw_token=raw, server=asset.label, results=agent_results(_nvme_serials(asset)))
    with pytest.raises(PermissionDenied, match="already used"):
        agent_results_submit(raw_token=raw, server=asset.label, results=agent_results(_nvme_serials(asset)))


def test_expired_token_is_refused(sanitizing, users):
    asset, raw = _issue(sanitizing, users)
    AgentToken.objects.filter(asset=asset).update(expires_at=timezone.now() - dt.timedelta(seconds=1))
    with pytest.raises(PermissionDenied, match="expired"):
        agent_script(raw_token=raw, server=asset.label, upload_url=URL)


def test_unknown_token_and_upload_before_fetch_are_refused(sanitizing, users):
    asset, raw = _issue(sanitizing, users)
    with pytest.raises(PermissionDenied, match="Unknown"):
        agent_script(raw_token="nope", server=asset.label, upload_url=URL)  # noqa: S106 - a wrong token on purpose
    with pytest.raises(PermissionDenied, match="Fetch the agent script"):
        agent_results_submit(raw_token=raw, server=asset.label, results=[])


def test_a_drive_that_appeared_after_inventory_is_refused_and_nothing_is_written(sanitizing, users):
    asset, raw = _issue(sanitizing, users)
    agent_script(raw_token=raw, server=asset.label, upload_url=URL)
    events = EvidenceEvent.objects.count()
    with pytest.raises(ValidationError, match="appeared afterwards"):
        agent_results_submit(raw_token=raw, server=asset.label,
                             results=agent_results([*_nvme_serials(asset), "S6CKNA0T999999"]))
    assert EvidenceEvent.objects.count() == events
    assert not Medium.objects.filter(asset=asset, state="sanitized").exists()
    assert AgentToken.objects.get(asset=asset).used_at is None


def test_token_only_while_sanitizing(users):
    r = walk("inventoried", users=users)
    with pytest.raises(ValidationError):
        agent_token_issue(asset=r.assets.get(), actor=users["operator"])


@pytest.mark.parametrize(("before", "progress", "proven"), [
    ("never", False, True),  # never sanitized before the run, completed after: this run's
    ("same", True, True),  # seen in progress (SSTAT 2, SPROG 1310/65535) right after the start
    ("same", False, False),  # the same completed log before and after: an earlier sanitize, not proven
    (None, False, False),  # no reading before the run
])
def test_the_agent_proves_the_sanitize_it_reports_is_this_runs(sanitizing, users, before, progress, proven):
    asset, raw = _issue(sanitizing, users)
    script = agent_script(raw_token=raw, server=asset.label, upload_url=URL)
    assert script.index("nvme.sanitize-log.before") < script.index("nvme sanitize \"$dev\"") < script.index(
        "nvme.sanitize-log.progress")
    decisions = agent_results_submit(raw_token=raw, server=asset.label, results=agent_results(
        _nvme_serials(asset), before=before, progress=progress))
    nvme = [d for d in decisions if d.medium.media_type == "nvme"]
    assert {d.state for d in nvme} == {MediaState.SANITIZED if proven else MediaState.FAILED}
    for medium in Medium.objects.filter(asset=asset, media_type="nvme"):
        if proven:
            assert medium.state == MediaState.SANITIZED, medium.detail
            assert ("in progress" if progress else "changed since the reading before") in medium.detail, medium.detail
        else:  # not a device failure: the medium waits for another run of the agent, with the reason
            assert (medium.state, medium.device_failures) == (MediaState.PENDING, 0)
            assert "earlier sanitize" in medium.detail or "not proven" in medium.detail, medium.detail
