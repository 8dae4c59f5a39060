"""The PDF rendering of a certificate: a valid PDF whose text carries the certificate id, the SHA-256 of the signed
JSON file (the bytes the JSON download serves), the line saying the JSON is the record, and the Appendix G
fields; served on the certificate page and in the API (``/certificates/{id}/pdf/``) with the JSON download's
permissions; an unknown id is a JSON 404 under /api/; the OpenAPI schema documents it."""

from __future__ import annotations

import hashlib
import io
import uuid

import pytest
from pypdf import PdfReader

from decommission.models import Certificate
from decommission.pdf import certificate_pdf
from tests.decommission.decom_factories import walk

pytestmark = pytest.mark.django_db
BASE = "/api/v1/decommission"


@pytest.fixture(autouse=True)
def _keys(settings, tmp_path):
    settings.DECOMMISSION_SIGNING_KEY_DIR = str(tmp_path / "keys")


@pytest.fixture
def certified(users):
    return walk("certified", users=users)


def _text(pdf: bytes) -> str:
    assert pdf.startswith(b"%PDF-"), pdf[:20]
    reader = PdfReader(io.BytesIO(pdf))
    return "\n".join(page.extract_text() for page in reader.pages)


def _flat(text: str) -> str:
    """Extracted text without line breaks or spaces (a long value may wrap)."""
    return "".join(text.split())


def test_the_pdf_carries_the_id_the_json_files_hash_and_says_the_json_is_the_record(certified, api):
    cert = Certificate.objects.filter(request=certified, kind="medium", medium__media_type="nvme").first()
    json_file = api("viewer").get(f"{BASE}/certificates/{cert.pk}/download/").content
    text = _text(certificate_pdf(cert))
    flat = _flat(text)
    assert str(cert.id) in flat
    assert hashlib.sha256(json_file).hexdigest() in flat, "the SHA-256 of the signed JSON file as downloaded"
    assert "The signed JSON file is the record" in text
    body = cert.document["certificate"]
    for value in (body["media"]["serial"], body["media"]["manufacturer"], body["sanitization"]["method_type"],
                  body["sanitization"]["tool_version"], body["performer"]["name"], body["validator"]["name"],
                  body["destination"]["type"]):
        assert _flat(value) in flat, value
    for label in ("Media information", "Method type", "Tool version", "Verification method",
                  "Person performing sanitization", "Person validating sanitization", "Destination"):
        assert label in text, label


def test_a_bundle_pdf_lists_its_media_certificates(certified):
    bundle = Certificate.objects.get(request=certified, kind="bundle")
    flat = _flat(_text(certificate_pdf(bundle)))
    assert str(bundle.id) in flat
    for item in bundle.document["certificate"]["media_certificates"]:
        assert item["certificate_id"] in flat


def test_api_pdf_beside_the_json_download_with_its_permissions(certified, api, make_user):
    cert = Certificate.objects.filter(request=certified, kind="medium").first()
    url, json_url = f"{BASE}/certificates/{cert.pk}/pdf/", f"{BASE}/certificates/{cert.pk}/download/"
    response = api("viewer").get(url)
    assert response.status_code == 200 and response["Content-Type"] == "application/pdf"
    assert response["Content-Disposition"].endswith('.pdf"') and str(cert.id) in response["Content-Disposition"]
    assert str(cert.id) in _flat(_text(response.content))
    assert api("viewer").get(url, HTTP_ACCEPT="application/pdf").status_code == 200
    anonymous = api(None)
    assert anonymous.get(url).status_code == anonymous.get(json_url).status_code in (401, 403)
    norole = api(None)
    norole.force_authenticate(user=make_user(None))
    assert norole.get(url).status_code == norole.get(json_url).status_code == 403


def test_api_pdf_of_an_unknown_certificate_is_a_json_404(api):
    response = api("viewer").get(f"{BASE}/certificates/{uuid.uuid4()}/pdf/", HTTP_ACCEPT="application/pdf")
    assert response.status_code == 404
    assert response["Content-Type"].startswith("application/json")
    assert response.json()["code"] == "not_found"


def test_certificate_page_links_and_serves_the_pdf(certified, client, users):
    cert = Certificate.objects.filter(request=certified).first()
    client.force_login(users["viewer"])
    page = client.get(f"/decommission/{certified.pk}/certificates/")
    assert f"/decommission/certificates/{cert.pk}/pdf/".encode() in page.content
    response = client.get(f"/decommission/certificates/{cert.pk}/pdf/")
    assert response.status_code == 200 and response["Content-Type"] == "application/pdf"
    assert str(cert.id) in _flat(_text(response.content))
    client.logout()
    anonymous = client.get(f"/decommission/certificates/{cert.pk}/pdf/")
    assert anonymous.status_code == client.get(f"/decommission/certificates/{cert.pk}/download/").status_code
    assert anonymous.status_code in (302, 403)


def test_openapi_documents_the_pdf_endpoint(api):
    schema = api("viewer").get("/api/schema/?format=json")
    if schema.status_code == 404:
        pytest.skip("schema served elsewhere")
    operation = schema.json()["paths"]["/api/v1/decommission/certificates/{id}/pdf/"]["get"]
    assert "application/pdf" in operation["responses"]["200"]["content"]
    assert "404" in operation["responses"]
