"""Image integrity (issue 21): Fleet hashes an uploaded image itself (a declared SHA-256 that differs is a form and
an API error), a URL's image must match on first fetch, and the engine refuses to send an image whose bytes no
longer match the catalog (the target is held, with the reason; the BMC receives nothing)."""

from __future__ import annotations

import hashlib
import http.server
import threading

import pytest
from django.core.exceptions import ValidationError
from django.core.files.uploadedfile import SimpleUploadedFile
from django.urls import reverse

from firmware.models import ComponentSpec, Release, RolloutTarget, TargetState, UpdateMethod
from firmware.services import catalog
from firmware.services import rollout as svc
from fleet.audit import SYSTEM
from tests.firmware import fw_factories, rollout_fleet
from world.bmc.testing import running_simulator

IMAGE = b"VBIOS image 96.00.A0.00.01\n" * 64
IMAGE_SHA = hashlib.sha256(IMAGE).hexdigest()


@pytest.fixture
def media(settings, tmp_path):
    settings.MEDIA_ROOT = tmp_path
    return tmp_path


@pytest.mark.django_db
def test_an_uploaded_image_is_hashed_by_fleet_and_a_wrong_declared_hash_is_refused(media, client, users):
    client.force_login(users["operator"])
    form = {"component": "bmc", "version": "01.05.00", "channel": "testing"}

    # A declared hash that is not the file's (64 zeros): a form error naming both, nothing created.
    response = client.post(reverse("firmware-release-create"),
                           {**form, "sha256": "0" * 64, "image_file": SimpleUploadedFile("bmc.bin", IMAGE)})
    assert response.status_code == 400
    assert IMAGE_SHA in response.content.decode() and "differs" in response.content.decode()
    assert not Release.objects.exists()

    # No declared hash: Fleet computes it.
    response = client.post(reverse("firmware-release-create"),
                           {**form, "image_file": SimpleUploadedFile("bmc.bin", IMAGE)})
    assert response.status_code == 302, response.content.decode()[:2000]
    assert Release.objects.get().sha256 == IMAGE_SHA


@pytest.mark.django_db
def test_the_api_refuses_a_declared_hash_that_differs_from_the_upload(media, api):
    upload = SimpleUploadedFile("bmc.bin", IMAGE)
    response = api("operator").post(reverse("api:release-list"), {
        "component": "bmc", "version": "01.05.01", "sha256": "ab" * 32, "image_file": upload}, format="multipart")
    assert response.status_code == 400
    assert "sha256" in str(response.json()) and IMAGE_SHA in str(response.json())
    assert not Release.objects.exists()


@pytest.mark.django_db
def test_a_url_image_needs_its_hash_and_must_match_on_first_fetch(media):
    with pytest.raises(ValidationError) as err:
        catalog.release_create(component="bmc", version="2", image_url="http://127.0.0.1:9/x.bin", actor=SYSTEM)
    assert "sha256" in err.value.message_dict

    served = {"body": IMAGE}

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 - the stdlib's name
            self.send_response(200)
            self.send_header("Content-Length", str(len(served["body"])))
            self.end_headers()
            self.wfile.write(served["body"])

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        url = f"http://127.0.0.1:{server.server_port}/bmc.bin"
        good = catalog.release_create(component="bmc", version="3", image_url=url, sha256=IMAGE_SHA, actor=SYSTEM)
        assert catalog.release_image_fetch(release=good, actor=SYSTEM) == IMAGE
        good.refresh_from_db()
        assert good.image_verified_at is not None
        bad = catalog.release_create(component="bmc", version="4", image_url=url, sha256="cd" * 32, actor=SYSTEM)
        with pytest.raises(ValidationError, match=IMAGE_SHA):
            catalog.release_image_fetch(release=bad, actor=SYSTEM)
        bad.refresh_from_db()
        assert bad.image_verified_at is None
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.django_db(transaction=True)
def test_the_engine_refuses_to_send_an_image_that_changed_after_upload(media, users, drive):
    with running_simulator(bmcs=1, task_seconds=0, bmc_reset_seconds=0.1, seed=1) as sim:
        fleet = rollout_fleet.build(servers=1, bmc_url=lambda i: sim.bmc_url("bmc-0001"))
        ComponentSpec.objects.filter(component="gpu_vbios").update(update_method=UpdateMethod.MULTIPART_PUSH)
        release = catalog.release_create(component="gpu_vbios", version="96.00.A0.00.01", actor=SYSTEM,
                                         image_file=SimpleUploadedFile("vbios.bin", IMAGE))
        fleet.bundle = catalog.bundle_create(name="uploaded vbios", platform=fw_factories.platform(),
                                             releases=[release], actor=SYSTEM)
        # The stored file is replaced behind Fleet's back (a bad sync, a tampered share).
        path = media / release.image_file.name
        path.write_bytes(IMAGE.replace(b"A0", b"B1"))

        rollout = rollout_fleet.approved(fleet, users["operator"], users["approver"],
                                         strategy={"canary": False, "waves": [100]})
        rollout = svc.rollout_start(rollout=rollout, actor=users["operator"])

        def held(r):
            return RolloutTarget.objects.filter(rollout=r, last_error__startswith="held: the image").exists()

        drive(rollout, held)
        target = RolloutTarget.objects.get(rollout=rollout)
        assert target.state == TargetState.STAGING  # held, not failed and not sent
        assert "changed since it was catalogued" in target.last_error
        assert IMAGE_SHA[:16] in target.last_error
        assert sim.sim.stats.as_json()["update_requests"] == 0  # the BMC never received the bytes
