"""Certificates: completeness, signature, tamper evidence (altered field, removed field, altered or removed event,
broken chain, unknown key), key rotation, the append-only tables, the CLI export / verify / public key."""

from __future__ import annotations

import copy
import json

import pytest
from django.core.management import call_command
from django.db import IntegrityError, InternalError, connection, transaction

from decommission import services
from decommission.models import Certificate, EvidenceEvent
from decommission.selectors import public_keys
from decommission.verify import REQUIRED_MEDIUM, missing_fields, verify_document
from inventory.models import Gpu, GpuState
from tests.decommission.decom_factories import walk

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _key_dir(settings, tmp_path):
    settings.DECOMMISSION_SIGNING_KEY_DIR = str(tmp_path / "keys")


@pytest.fixture
def certified(users):
    return walk("certified", users=users)


def _medium_doc(request):
    cert = Certificate.objects.filter(request=request, kind="medium", medium__media_type="nvme").first()
    return cert, copy.deepcopy(cert.document)


def test_one_certificate_per_medium_plus_a_bundle_per_server_all_complete(certified):
    media = certified.media.count()
    assert Certificate.objects.filter(request=certified, kind="medium").count() == media
    assert Certificate.objects.filter(request=certified, kind="bundle").count() == 1
    keys = public_keys()
    for cert in Certificate.objects.filter(request=certified):
        assert verify_document(cert.document, keys) == []
        assert missing_fields(cert.document["certificate"]) == []
    _cert, doc = _medium_doc(certified)
    body = doc["certificate"]
    assert body["sanitization"]["method_type"] == "Purge" and body["media"]["serial"].startswith("NVME-")
    assert body["performer"]["name"] == "operator-user" and body["validator"]["name"] == "approver-user"
    assert body["evidence"]["events"], "the medium's evidence events travel with its certificate"


def test_gpu_media_say_what_was_done_to_them(certified):
    inforom = Certificate.objects.get(request=certified, medium__media_type="gpu_inforom",
                                      medium__serial__endswith="InfoROM", medium__gpu__isnull=False,
                                      medium__gpu=Gpu.objects.filter(server__isnull=False).first())
    assert "not altered" in inforom.document["certificate"]["sanitization"]["method_used"]
    hbm = Certificate.objects.filter(request=certified, medium__media_type="gpu_hbm").first()
    assert "Volatile" in hbm.document["certificate"]["sanitization"]["method_used"]
    assert {g.state for g in Gpu.objects.filter(server__in=certified.assets.values("server"))} == {
        GpuState.SANITIZED}


@pytest.mark.parametrize("tamper", [
    lambda b: b["media"].__setitem__("serial", "OTHER"),
    lambda b: b["sanitization"].__setitem__("method_type", "Clear"),
    lambda b: b.__setitem__("issued_at", b["issued_at"].replace("20", "19", 1)),
    lambda b: b["media"].pop("model"),
    lambda b: b["evidence"]["events"][0].__setitem__("result", "sanitized "),
    lambda b: b["evidence"]["events"].pop(0),
])
def test_any_change_to_a_signed_certificate_fails(certified, tamper):
    _cert, doc = _medium_doc(certified)
    tamper(doc["certificate"])
    problems = verify_document(doc, public_keys())
    assert problems and "signature does not match" in problems[0]


def test_reordered_keys_still_verify(certified):
    _cert, doc = _medium_doc(certified)
    reordered = json.loads(json.dumps(doc["certificate"], sort_keys=False)[::1])
    doc["certificate"] = dict(reversed(list(reordered.items())))
    assert verify_document(doc, public_keys()) == []


def test_a_broken_event_chain_fails_even_when_resigned(certified):
    """Someone with a key re-signs a certificate whose event was altered: the event hash no longer matches."""
    from decommission.services.certificates import sign, signing_key_current

    _cert, doc = _medium_doc(certified)
    doc["certificate"]["evidence"]["events"][0]["result"] = "forged"
    key, private = signing_key_current()
    resigned = sign(doc["certificate"], key=key, private=private)
    problems = verify_document(resigned, public_keys())
    assert any("broken chain" in p for p in problems)


def test_a_removed_required_field_fails_even_when_resigned(certified):
    from decommission.services.certificates import sign, signing_key_current

    _cert, doc = _medium_doc(certified)
    del doc["certificate"]["validator"]["name"]
    key, private = signing_key_current()
    problems = verify_document(sign(doc["certificate"], key=key, private=private), public_keys())
    assert "required field missing or empty: validator.name" in problems


def test_unknown_key_fails(certified):
    _cert, doc = _medium_doc(certified)
    doc["signature"]["key_id"] = "someone-else"
    assert verify_document(doc, public_keys()) == ["unknown signing key 'someone-else'"]


def test_rotated_key_still_verifies_old_certificates(certified, users):
    cert, doc = _medium_doc(certified)
    old_key = doc["signature"]["key_id"]
    services.signing_key_rotate(actor=users["admin"])
    second = walk("certified", users=users)
    _c2, doc2 = _medium_doc(second)
    assert doc2["signature"]["key_id"] != old_key
    keys = public_keys()
    assert verify_document(doc, keys) == [] and verify_document(doc2, keys) == []


def test_required_field_list_covers_appendix_g_blocks():
    blocks = {p.split(".")[0] for p in REQUIRED_MEDIUM}
    assert {"performer", "validator", "media", "sanitization", "destination", "attestation"} <= blocks


@pytest.mark.django_db(transaction=True)
def test_database_refuses_update_and_delete_of_evidence_and_certificates(users, settings, tmp_path):
    settings.DECOMMISSION_SIGNING_KEY_DIR = str(tmp_path / "k2")
    r = walk("certified", users=users)
    event = EvidenceEvent.objects.filter(request=r).first()
    for statement in (f"UPDATE decommission_evidenceevent SET result = 'x' WHERE id = {event.pk}",
                      f"DELETE FROM decommission_evidenceevent WHERE id = {event.pk}",
                      "UPDATE decommission_certificate SET key_id = 'x'",
                      "DELETE FROM decommission_certificate"):
        with pytest.raises((IntegrityError, InternalError), match="append-only"), transaction.atomic(), \
                connection.cursor() as cursor:
            cursor.execute(statement)
    assert EvidenceEvent.objects.filter(pk=event.pk, result=event.result).exists()


def test_chain_verify_finds_an_event_altered_behind_the_trigger(users):
    r = walk("verifying", users=users)
    event = EvidenceEvent.objects.filter(request=r).order_by("seq")[3]
    with connection.cursor() as cursor:  # a superuser bypasses the trigger (replica mode skips user triggers)
        cursor.execute("SET session_replication_role = replica")
        cursor.execute("UPDATE decommission_evidenceevent SET result = 'forged' WHERE id = %s", [event.pk])
        cursor.execute("SET session_replication_role = origin")
    check = services.chain_verify(request=r)
    assert not check.ok and check.broken_at == event.seq
    from django.core.exceptions import ValidationError

    with pytest.raises(ValidationError, match="chain is broken"):
        services.request_validate(request=r, actor=users["approver"])


def test_cli_export_verify_and_public_key(certified, tmp_path, capsys):
    out = tmp_path / "out"
    call_command("export_certificates", "--request", str(certified.pk), "--dir", str(out))
    files = sorted(out.glob("*.json"))
    assert len(files) == Certificate.objects.filter(request=certified).count()
    capsys.readouterr()
    call_command("certificate_public_key")
    keys_file = tmp_path / "keys.json"
    keys_file.write_text(capsys.readouterr().out)
    call_command("verify_certificate", str(files[0]), "--key", str(keys_file))
    assert "VALID" in capsys.readouterr().out
    doc = json.loads(files[0].read_text())
    doc["certificate"]["request"] = "DR-999"
    files[0].write_text(json.dumps(doc))
    with pytest.raises(SystemExit) as exit_info:
        call_command("verify_certificate", str(files[0]), "--key", str(keys_file))
    assert exit_info.value.code == 1
    assert "signature does not match" in capsys.readouterr().err


def test_cli_export_names_an_unknown_request(tmp_path):
    from django.core.management.base import CommandError

    with pytest.raises(CommandError, match="no such decommission request"):
        call_command("export_certificates", "--request", "424242", "--dir", str(tmp_path))


def test_disposal_refuses_a_gpu_whose_certificate_no_longer_verifies(users):
    from django.core.exceptions import ValidationError

    r = walk("in_transit", users=users)
    cert = Certificate.objects.filter(request=r, medium__media_type="gpu_hbm").first()
    with connection.cursor() as cursor:  # altered behind the trigger (superuser, replica mode)
        cursor.execute("SET session_replication_role = replica")
        cursor.execute("UPDATE decommission_certificate SET document = jsonb_set(document, "
                       "'{certificate,media,serial}', '\"FORGED\"') WHERE id = %s", [cert.pk])
        cursor.execute("SET session_replication_role = origin")
    with pytest.raises(ValidationError, match="is not valid"):
        services.request_dispose(request=r, outcome="resold", actor=users["operator"])
    r.refresh_from_db()
    assert r.state == "in_transit"
