"""Importing GPUs from files (service layer): :func:`gpus_import` / :func:`gpus_import_many` are the entry
points; :mod:`inventory.imports.run` holds one run (check, load, match, plan), :mod:`~inventory.imports.write` its
write phase and :mod:`~inventory.imports.records` its data (result, plan, limits).

The UI's upload page (preview with ``dry_run=True``, then confirm), ``POST /api/v1/imports/`` and the
``import_gpus`` command call it. Parsing is :mod:`inventory.importers`; this module decides what the
parsed GPUs mean for the inventory and writes it, in bulk, in one transaction, with audit events.

Rules:
- Whole file or nothing: any error (parse, value, conflict) and nothing is written.
- Matching: real serial, else real UUID, else asset tag, else the slot (server hostname + PCI bus id)
  when the GPU in that slot does not carry a different real serial/UUID. Masked values never match,
  so two boards that report the same mask stay two GPUs.
- Placement: the file's hostname (CSV ``hostname`` column) or ``server_hint`` places GPUs. A server
  Fleet doesn't know is created unplaced (no rack; listed in ``servers_created``). Without a server
  (nvidia-smi XML without ``--server``, an empty Fleet CSV hostname) the import places nothing: new
  GPUs are created unplaced and existing ones keep their placement.
- New GPUs start ``received`` (so the burn-in gate applies), or in the state the importing person picks
  (``new_state``, one of :data:`IMPORT_NEW_STATES`, written in each new GPU's state row and audit event);
  never straight into service unless picked. A Fleet CSV row may name the state. The state of an existing GPU is never changed by an import: a Fleet CSV row
  naming another state is an error (use a transition).
- A known GPU reported in another server or slot is moved (``GpuMove`` + ``move`` audit event); a GPU
  occupying a slot the file gives to another GPU, and absent from the file, is moved out first (``remove``).
- Firmware: one ``FirmwareObservation`` per (GPU, component, version); seeing it again only moves
  ``last_seen``. ``Gpu.vbios_version``/``inforom_image``/``driver_version`` follow the version just seen.
- Idempotent: importing the same file again changes no inventory row and writes no audit event.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.serializers.json import DjangoJSONEncoder
from django.db import DataError, IntegrityError, transaction

from fleet.audit import Actor
from inventory import importers
from inventory.importers.base import FORMATS, GpuRecord, ImportError_, ParseResult
from inventory.imports.records import HOSTNAME, PARSE_THREADS, ImportFile, ImportResult, capped
from inventory.imports.run import Import
from inventory.models import GpuState, ImportRun

# States an import may create GPUs in: received by default; never retired or in repair.
IMPORT_NEW_STATES = (GpuState.RECEIVED, GpuState.BURN_IN, GpuState.SPARE, GpuState.IN_SERVICE)

__all__ = ["IMPORT_NEW_STATES", "ImportError_", "ImportFile", "ImportResult", "gpus_import", "gpus_import_many", "import_run_confirm",
           "import_run_confirm_refusal", "import_run_preview"]

def gpus_import(*, content: bytes, filename: str, fmt: str = "auto", server_hint: str = "", actor: Actor | None,
                dry_run: bool = False, new_state: str = GpuState.RECEIVED) -> ImportResult:
    """Import the GPUs in ``content``: all of it, or (with any error) nothing.

    ``fmt``: ``auto``, ``nvidia-smi-xml``, ``nvidia-smi-csv`` or ``csv`` (Fleet's). ``server_hint``: the
    hostname of the server the file came from (nvidia-smi output doesn't name it). ``dry_run`` computes
    exactly what would happen (``rows``, counters, errors) and rolls it back.
    """
    return gpus_import_many(files=[ImportFile(filename, content, server_hint)], fmt=fmt, actor=actor,
                            dry_run=dry_run, new_state=new_state)


def gpus_import_many(*, files: Sequence[ImportFile], fmt: str = "auto", actor: Actor | None,
                     dry_run: bool = False, new_state: str = GpuState.RECEIVED) -> ImportResult:
    """Import several files (typically one ``nvidia-smi -q -x`` per host, each with its server) as one:
    all of them, or (with any error in any file) nothing. Errors name the file they are in.

    One transaction and one set of queries for the whole batch: 250 per-host files import several
    times faster together than one by one (bench/README.md).
    """
    result = ImportResult(fmt=fmt, new_state=str(new_state))
    limit = settings.FLEET_IMPORT_MAX_BYTES
    if fmt != "auto" and fmt not in FORMATS:
        result.errors.append(ImportError_(files[0].filename if files else "-", None, "format",
                                          f"unknown format {fmt!r} (one of auto, {', '.join(FORMATS)})"))
        return result
    if new_state not in IMPORT_NEW_STATES:
        result.errors.append(ImportError_(files[0].filename if files else "-", None, "new_state",
                                          f"new GPUs cannot start in {new_state!r} (one of "
                                          f"{', '.join(IMPORT_NEW_STATES)})"))
        return result
    records: list[GpuRecord] = []
    formats: set[str] = set()
    refusals: dict[int, ImportError_] = {}
    for index, file in enumerate(files):
        hint = file.server_hint.strip().lower()
        if len(file.content) > limit:
            refusals[index] = ImportError_(file.filename, None, "file", f"{len(file.content):,} bytes is larger "
                                           f"than the import limit of {limit:,} bytes")
        elif hint and not HOSTNAME.match(hint):
            refusals[index] = ImportError_(file.filename, None, "server", f"{file.server_hint!r} is not a hostname")
    parsed_files = iter(_parse_all([f for i, f in enumerate(files) if i not in refusals], fmt))
    for index, file in enumerate(files):
        if index in refusals:
            result.errors.append(refusals[index])
            continue
        hint = file.server_hint.strip().lower()
        parsed = next(parsed_files)
        formats.add(parsed.fmt)
        result.errors.extend(parsed.errors)
        result.notices.extend(parsed.notices)
        for record in parsed.records:
            record.hostname = record.hostname or hint or None
            record.source, record.fmt = file.filename, parsed.fmt
        records.extend(parsed.records)
    result.fmt = "+".join(sorted(formats)) or fmt
    if result.errors or not files:
        result.errors = capped(result.errors)
        return result
    name = files[0].filename if len(files) == 1 else f"{len(files)} files ({files[0].filename}, ...)"
    try:
        with transaction.atomic():
            Import(records=records, filename=name, fmt=result.fmt, hint=None, actor=actor, result=result,
                   lock=not dry_run, new_state=new_state).run()
            if dry_run or result.errors:
                transaction.set_rollback(True)
    except (IntegrityError, DataError) as exc:
        result.errors.append(ImportError_(name, None, "database", f"the database refused the import, so nothing "
                                          f"was written (a concurrent change? try again): {exc}".strip()[:500]))
    result.errors = capped(result.errors)
    result.applied = not dry_run and not result.errors
    return result


def _parse_all(files: Sequence[ImportFile], fmt: str) -> list[ParseResult]:
    """Parse ``files`` (in order). Several files are parsed by :data:`PARSE_THREADS` threads: lxml lets go of the
    GIL while libxml2 builds a tree, most of an XML file's parse, so per-host files parse side by side on the
    machine's cores (parsers never touch the database)."""
    def parse(file: ImportFile) -> ParseResult:
        return importers.parse(file.content, filename=file.filename, fmt=fmt)

    if len(files) < 2 or PARSE_THREADS < 2:
        return [parse(file) for file in files]
    with ThreadPoolExecutor(max_workers=min(PARSE_THREADS, len(files)), thread_name_prefix="import-parse") as pool:
        return list(pool.map(parse, files))


# Rows kept in an upload's stored preview (the counts cover every row; the page lists this many).
PREVIEW_ROWS = 2000


def _summary(result: ImportResult) -> dict[str, Any]:
    """An ImportResult as JSON for ``ImportRun.summary``: counts, errors, and the first rows."""
    summary = result.as_dict()
    summary["row_count"] = len(summary["rows"])
    summary["rows"] = summary["rows"][:PREVIEW_ROWS]
    return json.loads(json.dumps(summary, cls=DjangoJSONEncoder))


def import_run_preview(*, content: bytes, filename: str, fmt: str, server_hint: str, actor: Actor | None,
                       new_state: str = GpuState.RECEIVED) -> ImportRun:
    """Keep an upload and what importing it would do (a dry run), until someone confirms it. The state new
    GPUs start in is kept with the preview (``summary["new_state"]``) and applied on confirmation."""
    run = ImportRun.objects.create(filename=filename[:255], fmt=fmt, server_hint=server_hint.strip(),
                                   content=content, created_by=actor if getattr(actor, "pk", None) else None)
    run.summary = _summary(gpus_import(content=content, filename=run.filename, fmt=fmt,
                                       server_hint=run.server_hint, actor=actor, dry_run=True,
                                       new_state=new_state))
    run.save(update_fields=["summary"])
    return run


def import_run_confirm_refusal(run: ImportRun) -> ValidationError | None:
    """Why ``run`` cannot be confirmed, or None when it can: the confirm service and the preview page ask this."""
    if run.status != ImportRun.Status.PREVIEW:
        return ValidationError("This import was already confirmed.", code="confirmed")
    if run.summary.get("errors"):
        return ValidationError("The preview found errors: fix the file and upload it again.", code="invalid")
    return None


@transaction.atomic
def import_run_confirm(*, run_id: int, actor: Actor | None) -> ImportRun:
    """Apply a previewed upload, once. The row lock makes a second confirm wait, then find it applied.

    Raises ``ValidationError`` when it was already confirmed or its preview found errors.
    """
    run = ImportRun.objects.select_for_update().get(pk=run_id)
    if (refusal := import_run_confirm_refusal(run)) is not None:
        raise refusal
    run.summary = _summary(gpus_import(content=bytes(run.content), filename=run.filename, fmt=run.fmt,
                                       server_hint=run.server_hint, actor=actor, dry_run=False,
                                       new_state=run.summary.get("new_state", GpuState.RECEIVED)))
    run.status = ImportRun.Status.APPLIED if run.summary["applied"] else ImportRun.Status.FAILED
    run.save(update_fields=["summary", "status"])
    return run

