"""Every telemetry write: ingest (scrape, push, file), ingest sources, the demo backfill. One module per concern,
re-exported here (``from telemetry import services`` keeps working). The demo backfill lives in
:mod:`telemetry.demo`.

``telemetry_ingest`` is the one entry point of the three ingest paths (beat scrape, ``POST
/api/v1/telemetry/...``, ``manage.py ingest_telemetry``): parse, map identities, write in one transaction
(:mod:`telemetry.store`), then record the outcome on the source. Telemetry batches are data, not
changes of record, so they are not audited; changes to ingest sources are.

- ``identities``: UUID and (host, PCI bus id) to gpu id, cached per process;
- ``ingest``: parse, map, write, and record each outcome on its source;
- ``merge``: ``telemetry_merge``, the inbox into the tables (PostgreSQL);
- ``sources``: ingest source create, update, delete (audited);
- ``scrape``: claim due scrape sources, fetch them concurrently, ingest.
"""

from telemetry.services.identities import identity_cache_clear, map_identities
from telemetry.services.ingest import (
    FORMATS,
    INT4_MAX,
    TOO_OLD,
    UNKNOWN_EXAMPLES,
    UNKNOWN_GPU,
    IngestItem,
    IngestResult,
    SourceRecord,
    sample_rows,
    source_record,
    sources_record,
    telemetry_ingest,
    telemetry_ingest_many,
    telemetry_write,
    xid_lines_write,
)
from telemetry.services.merge import telemetry_merge
from telemetry.services.scrape import SCRAPE_GROUP, scrape_claim, source_scrape, sources_scrape
from telemetry.services.sources import (
    SOURCE_FIELDS,
    ingest_source_create,
    ingest_source_delete,
    ingest_source_for,
    ingest_source_update,
)

__all__ = [
    "FORMATS", "INT4_MAX", "SCRAPE_GROUP", "SOURCE_FIELDS", "TOO_OLD", "UNKNOWN_EXAMPLES",
    "UNKNOWN_GPU", "IngestItem", "IngestResult", "SourceRecord", "identity_cache_clear", "ingest_source_create",
    "ingest_source_delete", "ingest_source_for", "ingest_source_update", "map_identities", "sample_rows",
    "scrape_claim", "source_record", "source_scrape", "sources_record", "sources_scrape",
    "telemetry_ingest", "telemetry_ingest_many", "telemetry_merge", "telemetry_write", "xid_lines_write",
]
