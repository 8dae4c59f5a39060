"""nvme-cli output parsing: both status key shapes, a version we did not expect, in progress, failed, PRGD."""

import pytest

from decommission.parsers import ParseError, nvme_verdict, parse_id_ctrl, parse_sanitize_log
from tests.decommission.tool_outputs import id_ctrl, sanitize_log_new, sanitize_log_old


def test_old_status_key_success():
    s = parse_sanitize_log(sanitize_log_old())
    assert (s.device, s.sstat, s.sprog, s.global_erased) == ("nvme0", 1, 65535, True)
    assert nvme_verdict(s, purge_required=True)[0] == "done"


def test_new_status_key_with_prgd_and_unknown_field():
    s = parse_sanitize_log(sanitize_log_new(status=4, extra=True))
    assert s.sstat == 4 and s.prgd is True and s.notices == ["unknown field 'time_media_verification' ignored"]
    assert nvme_verdict(s, purge_required=True) == ("done", "SSTAT 4: completed successfully (no-deallocate); PRGD=1")


def test_in_progress_and_failed():
    assert nvme_verdict(parse_sanitize_log(sanitize_log_old(status=2, sprog=1200)), purge_required=True)[0] == \
        "running"
    assert nvme_verdict(parse_sanitize_log(sanitize_log_new(status=3)), purge_required=True)[0] == "failed"


def test_prgd_zero_is_not_a_purge():
    s = parse_sanitize_log(sanitize_log_new(prgd=0))
    assert nvme_verdict(s, purge_required=True)[0] == "failed"
    assert nvme_verdict(s, purge_required=False)[0] == "done"


@pytest.mark.parametrize("raw", ['{"sstat": 1, "sprog": 65535}', "not json", '{"nvme0": {"sprog": 1}}',
                                 '{"nvme0": {"sstat": {"status": "done"}}}'])
def test_invented_or_broken_shapes_are_refused(raw):
    with pytest.raises(ParseError):
        parse_sanitize_log(raw)


def test_id_ctrl_capabilities():
    info = parse_id_ctrl(id_ctrl("S6CKNA0T100001", sanicap=0x2, fna=0))
    assert info["serial"] == "S6CKNA0T100001" and not info["crypto_erase"] and info["block_erase"]
