"""Every write of the decommission app (re-exported so callers import ``decommission.services``)."""

from decommission.services.certificates import (
    certificate_check,
    public_keys_document,
    signing_key_current,
    signing_key_rotate,
)
from decommission.services.certify import request_certify
from decommission.services.custody import custody_record, processor_create, request_close
from decommission.services.evidence import chain_verify, event_append
from decommission.services.holds import asset_resume
from decommission.services.media import request_record_inventory
from decommission.services.workflow import (
    request_approve,
    request_cancel,
    request_create,
    request_dispose,
    request_downgrade,
    request_drain,
    request_escalate,
    request_hold,
    request_inventory_start,
    request_record_destruction,
    request_release,
    request_release_hold,
    request_start_sanitizing,
    request_validate,
)

__all__ = ["asset_resume", "certificate_check", "chain_verify", "custody_record", "event_append", "processor_create",
           "public_keys_document", "request_approve", "request_cancel", "request_certify",
           "request_close", "request_create", "request_dispose", "request_downgrade", "request_drain",
           "request_escalate", "request_hold", "request_inventory_start", "request_record_destruction", "request_record_inventory",
           "request_release", "request_release_hold", "request_start_sanitizing", "request_validate",
           "signing_key_current", "signing_key_rotate"]
