"""The PDF rendering of a certificate (fpdf2): the NIST SP 800-88 Appendix G fields for people to read, with the
certificate id and the SHA-256 of the signed JSON file on top. The signed JSON is the record; the PDF is never
verified or accepted on its own (``verify_certificate`` reads the JSON)."""

from __future__ import annotations

from typing import Any

from fpdf import FPDF

from decommission.canonical import sha256_hex
from decommission.files import certificate_filename, certificate_json
from decommission.models import Certificate

RECORD_NOTICE = ("The signed JSON file is the record. This PDF is a rendering of it for people: verify the JSON "
                 "file (verify_certificate, or the certificate page), never this PDF.")
LABEL_WIDTH = 58


def _latin1(value: Any) -> str:
    """The PDF core fonts speak Latin-1; anything else shows as '?' (ids and hashes are ASCII)."""
    return str(value if value not in (None, "") else "-").encode("latin-1", "replace").decode("latin-1")


class _Page(FPDF):
    def footer(self) -> None:
        self.set_y(-12)
        self.set_font("Helvetica", "", 7)
        self.cell(0, 5, _latin1(f"{RECORD_NOTICE}  Page {self.page_no()}"), align="C")


def _heading(pdf: FPDF, text: str) -> None:
    pdf.ln(2)
    pdf.set_font("Helvetica", "B", 11)
    pdf.cell(0, 7, _latin1(text), new_x="LMARGIN", new_y="NEXT", border="B")
    pdf.ln(1)


def _row(pdf: FPDF, label: str, value: Any, *, mono: bool = False) -> None:
    pdf.set_font("Helvetica", "B", 8.5)
    pdf.cell(LABEL_WIDTH, 5, _latin1(label))
    pdf.set_font("Courier" if mono else "Helvetica", "", 8.5)
    pdf.multi_cell(0, 5, _latin1(value), new_x="LMARGIN", new_y="NEXT")


def _rows(pdf: FPDF, block: dict[str, Any], fields: list[tuple[str, str]]) -> None:
    for key, label in fields:
        _row(pdf, label, block.get(key))


PERSON = [("name", "Name"), ("title", "Title"), ("organization", "Organization"), ("location", "Location"),
          ("phone", "Phone / contact"), ("date", "Date"), ("signature", "Signature")]
MEDIA = [("manufacturer", "Manufacturer"), ("model", "Model"), ("serial", "Serial number"),
         ("property_number", "Property number"), ("media_type", "Media type"), ("source", "Source (asset)"),
         ("pre_sanitization_confidentiality", "Pre-sanitization confidentiality"),
         ("data_backed_up", "Data backed up"), ("backup_location", "Backup location")]
SANITIZATION = [("method_type", "Method type"), ("method_used", "Method used (technique)"),
                ("method_details", "Method details"), ("tool", "Tool used"), ("tool_version", "Tool version"),
                ("verification_method", "Verification method"),
                ("post_sanitization_confidentiality", "Post-sanitization confidentiality"),
                ("required_level", "Required level"), ("request_level", "Request level"),
                ("minimum_level", "Policy minimum level"), ("downgrade_exception", "Downgrade exception"),
                ("completed_at", "Completed at"), ("notes", "Notes")]


def certificate_pdf(cert: Certificate) -> bytes:
    """The PDF for ``cert``: id and the SHA-256 of its signed JSON file (the bytes every download serves) first,
    then its human-readable fields. Deterministic for a certificate (its creation date is the issue time)."""
    body = cert.document["certificate"]
    signature = cert.document.get("signature", {})
    file_sha256 = sha256_hex(certificate_json(cert))
    bundle = body.get("kind") == "bundle"
    pdf = _Page(format="A4")
    pdf.set_margins(12, 12, 12)
    pdf.set_auto_page_break(auto=True, margin=16)
    pdf.set_creation_date(cert.issued_at)
    pdf.set_title(_latin1(f"Certificate {cert.id}"))
    pdf.set_author(_latin1(body.get("performer", {}).get("organization", "Fleet")))
    pdf.set_creator("Fleet decommission")
    pdf.add_page()
    pdf.set_font("Helvetica", "B", 16)
    title = "Server certificate bundle" if bundle else "Certificate of Sanitization"
    pdf.cell(0, 9, _latin1(title), new_x="LMARGIN", new_y="NEXT")
    pdf.set_font("Helvetica", "", 9)
    pdf.cell(0, 5, _latin1(body.get("standard") or "NIST SP 800-88"), new_x="LMARGIN", new_y="NEXT")
    pdf.ln(2)
    pdf.set_fill_color(238, 238, 238)
    pdf.set_font("Helvetica", "B", 10)
    pdf.cell(0, 6, "Certificate ID", new_x="LMARGIN", new_y="NEXT", fill=True)
    pdf.set_font("Courier", "B", 11)
    pdf.cell(0, 6, _latin1(cert.id), new_x="LMARGIN", new_y="NEXT", fill=True)
    pdf.set_font("Helvetica", "B", 10)
    pdf.cell(0, 6, _latin1(f"SHA-256 of the signed JSON file ({certificate_filename(cert)})"),
             new_x="LMARGIN", new_y="NEXT", fill=True)
    pdf.set_font("Courier", "B", 9.5)
    pdf.cell(0, 6, file_sha256, new_x="LMARGIN", new_y="NEXT", fill=True)
    pdf.set_font("Helvetica", "B", 9)
    pdf.multi_cell(0, 5, _latin1(RECORD_NOTICE), new_x="LMARGIN", new_y="NEXT", fill=True)
    pdf.ln(1)
    _row(pdf, "SHA-256 of the signed body", cert.sha256, mono=True)
    _row(pdf, "Request", body.get("request"))
    _row(pdf, "Issued at", body.get("issued_at"))
    if bundle:
        _row(pdf, "Asset", body.get("asset"))
        _heading(pdf, "Media certificates")
        for item in body.get("media_certificates", []):
            _row(pdf, f"{item.get('media_type')} {item.get('serial')}",
                 f"{item.get('certificate_id')}\nsha256 {item.get('sha256')}", mono=True)
    else:
        _heading(pdf, "Media information")
        _rows(pdf, body.get("media", {}), MEDIA)
        _heading(pdf, "Sanitization")
        _rows(pdf, body.get("sanitization", {}), SANITIZATION)
    _heading(pdf, "Destination")
    _rows(pdf, body.get("destination", {}), [("type", "Type"), ("details", "Details")])
    _heading(pdf, "Person performing sanitization")
    _rows(pdf, body.get("performer", {}), PERSON)
    _heading(pdf, "Person validating sanitization")
    _rows(pdf, body.get("validator", {}), PERSON)
    evidence = body.get("evidence", {})
    _heading(pdf, "Evidence and signature")
    _row(pdf, "Evidence chain", evidence.get("chain", "request"))
    _row(pdf, "Chain head", evidence.get("chain_head"), mono=True)
    if evidence.get("request_chain_head"):
        _row(pdf, "Request chain head", evidence.get("request_chain_head"), mono=True)
    if not bundle:
        _row(pdf, "Evidence events carried", len(evidence.get("events", [])))
    _row(pdf, "Signature", f"{signature.get('algorithm')}, key {signature.get('key_id')}")
    if body.get("attestation"):
        _heading(pdf, "Attestation")
        pdf.set_font("Helvetica", "", 8.5)
        pdf.multi_cell(0, 5, _latin1(body["attestation"]), new_x="LMARGIN", new_y="NEXT")
    return bytes(pdf.output())


def certificate_pdf_filename(cert: Certificate) -> str:
    return certificate_filename(cert).removesuffix(".json") + ".pdf"
