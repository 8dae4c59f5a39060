"""The evidence chains (migration 0003): one hash chain per asset, anchored in the request's own chain.

Each server's events link only to that server's previous event; the request's chain carries the state moves and
anchors every server chain's head (when the server finishes, and all of them at validation). Tampering with one
server's chain, or cutting it short behind the append-only trigger, is found; writers on two servers do not wait
for each other and interleave without breaking either chain; requests of the older layout keep one chain."""

from __future__ import annotations

import threading

import pytest
from django.core.exceptions import ValidationError
from django.db import connection, connections, transaction

from decommission import services
from decommission.models import Asset, Certificate, ChainLayout, DecommissionRequest, EvidenceEvent
from decommission.selectors import public_keys
from decommission.services.evidence import event_append
from decommission.verify import verify_document
from tests.decommission.decom_factories import finish_all, found_for, server_with_gpus, walk

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _key_dir(settings, tmp_path):
    settings.DECOMMISSION_SIGNING_KEY_DIR = str(tmp_path / "keys")


def _behind_the_trigger(sql: str, params: list) -> None:
    """What a superuser could do: replica mode skips the append-only trigger (and foreign-key checks)."""
    with connection.cursor() as cursor:
        cursor.execute("SET session_replication_role = replica")
        cursor.execute(sql, params)
        cursor.execute("SET session_replication_role = origin")


def _chain(asset: Asset) -> list[EvidenceEvent]:
    return list(EvidenceEvent.objects.filter(asset=asset).order_by("seq"))


@pytest.mark.sqlite
def test_each_server_has_its_own_chain_anchored_in_the_request_chain(users):
    r = walk("validated", users=users, servers=[server_with_gpus(), server_with_gpus()])
    assert r.chain_layout == ChainLayout.PER_ASSET
    assets = list(r.assets.order_by("id"))
    for asset in assets:
        chain = _chain(asset)
        assert [e.seq for e in chain] == list(range(1, len(chain) + 1))
        assert chain[0].prev_hash == "0" * 64
        assert all(b.prev_hash == a.hash for a, b in zip(chain, chain[1:], strict=False))
        assert any(e.medium_id for e in chain), "the server's media events are on its chain"
    own = list(EvidenceEvent.objects.filter(request=r, asset__isnull=True).order_by("seq"))
    assert [e.seq for e in own] == list(range(1, len(own) + 1))
    finished = {a["asset"]: (a["seq"], a["hash"]) for e in own if e.step == "chain.anchor"
                for a in e.detail["anchors"]}
    assert set(finished) == {a.pk for a in assets}, "each server's head is anchored when it finishes"
    validation = next(e for e in own if e.step == "state.validate")
    heads = {a.pk: (_chain(a)[-1].seq, _chain(a)[-1].hash) for a in assets}
    assert {a["asset"]: (a["seq"], a["hash"]) for a in validation.detail["anchors"]} == heads
    check = services.chain_verify(request=r)
    assert check.ok and check.heads == heads and check.head == own[-1].hash


@pytest.mark.sqlite
def test_certificates_carry_their_servers_chain_and_the_request_head(users):
    r = walk("certified", users=users, servers=[server_with_gpus(), server_with_gpus()])
    keys = public_keys()
    for cert in Certificate.objects.filter(request=r).select_related("asset"):
        evidence = cert.document["certificate"]["evidence"]
        head = _chain(cert.asset)[-1]
        assert evidence["chain_head"] == head.hash and evidence["chain_seq"] == head.seq
        assert evidence["request_chain_head"]
        assert verify_document(cert.document, keys) == []
        if cert.kind == "medium":
            assert {e["asset"] for e in evidence["events"]} == {cert.asset_id}


def test_tampering_with_one_servers_chain_is_detected(users):
    r = walk("verifying", users=users, servers=[server_with_gpus(), server_with_gpus()])
    first, second = r.assets.order_by("id")
    victim = _chain(second)[3]
    _behind_the_trigger("UPDATE decommission_evidenceevent SET result = 'forged' WHERE id = %s", [victim.pk])
    check = services.chain_verify(request=r)
    assert not check.ok and check.chain == f"asset {second.pk}" and check.broken_at == victim.seq
    assert "altered" in check.reason
    with pytest.raises(ValidationError, match="chain is broken"):
        services.request_validate(request=r, actor=users["approver"])
    assert _chain(first), "the other server's chain was not touched"


def test_relinked_event_of_one_server_is_detected(users):
    """Rewriting an event and its own hash does not help: the next event links to the old hash."""
    r = walk("verifying", users=users, servers=[server_with_gpus()])
    chain = _chain(r.assets.get())
    _behind_the_trigger("UPDATE decommission_evidenceevent SET hash = %s WHERE id = %s", ["f" * 64, chain[2].pk])
    check = services.chain_verify(request=r)
    assert not check.ok and check.broken_at == chain[2].seq


def test_a_server_chain_cut_short_after_its_anchor_is_detected(users):
    r = walk("verifying", users=users, servers=[server_with_gpus(), server_with_gpus()])
    asset = r.assets.order_by("id").last()
    last = _chain(asset)[-1]
    _behind_the_trigger("DELETE FROM decommission_evidenceevent WHERE id = %s", [last.pk])
    check = services.chain_verify(request=r)
    assert not check.ok and "anchored" in check.reason and check.chain == f"asset {asset.pk}"


def test_an_event_moved_to_another_servers_chain_is_detected(users):
    r = walk("verifying", users=users, servers=[server_with_gpus(), server_with_gpus()])
    first, second = r.assets.order_by("id")
    moved = _chain(second)[-1]
    _behind_the_trigger("UPDATE decommission_evidenceevent SET asset_id = %s, seq = %s WHERE id = %s",
                        [first.pk, _chain(first)[-1].seq + 1, moved.pk])
    assert not services.chain_verify(request=r).ok


def test_older_requests_keep_one_request_chain(users):
    """A request created before migration 0003 (layout 1) keeps appending to, and verifying, one chain."""
    r = walk("requested", users=users, servers=[server_with_gpus()])
    DecommissionRequest.objects.filter(pk=r.pk).update(chain_layout=ChainLayout.REQUEST)
    r.refresh_from_db()
    services.request_approve(request=r, actor=users["approver"])
    services.request_drain(request=r, actor=users["operator"])
    services.request_record_inventory(request=r, found=found_for(r), actor=users["operator"])
    services.request_start_sanitizing(request=r, actor=users["operator"])
    finish_all(r, users["operator"])
    events = list(EvidenceEvent.objects.filter(request=r).order_by("seq"))
    assert [e.seq for e in events] == list(range(1, len(events) + 1)), "one sequence across servers and request"
    assert not any(e.step == "chain.anchor" for e in events)
    services.request_validate(request=r, actor=users["approver"])
    check = services.chain_verify(request=r)
    assert check.ok and check.heads == {}
    services.request_certify(request=r, actor=users["operator"])
    cert = Certificate.objects.filter(request=r, kind="medium").first()
    assert cert.document["certificate"]["evidence"]["chain_head"] == check.head, "the one chain's head"
    assert "request_chain_head" not in cert.document["certificate"]["evidence"]
    assert verify_document(cert.document, public_keys()) == []
    assert services.chain_verify(request=r).ok


@pytest.mark.django_db(transaction=True)
def test_a_writer_on_one_server_does_not_wait_for_another_servers_writer(users):
    """Server A's writer holds its chain (transaction open); server B's writer appends and commits meanwhile,
    with a 2-second lock timeout: it would fail if the two shared a lock or a chain head."""
    r = walk("inventoried", users=users, servers=[server_with_gpus(), server_with_gpus()])
    a, b = r.assets.order_by("id")
    holding, b_done = threading.Event(), threading.Event()
    errors: list[BaseException] = []

    def writer_a() -> None:
        try:
            with transaction.atomic():
                event_append(request=r, asset=a, step="test.a", result="held", actor=None)
                holding.set()
                assert b_done.wait(10), "B did not finish while A held its chain"
        except BaseException as exc:  # noqa: BLE001 - reported by the main thread
            errors.append(exc)
            holding.set()
        finally:
            connections.close_all()

    def writer_b() -> None:
        try:
            assert holding.wait(10)
            with transaction.atomic():
                with connection.cursor() as cursor:
                    cursor.execute("SET LOCAL lock_timeout = '2s'")
                event_append(request=r, asset=b, step="test.b", result="written", actor=None)
            b_done.set()
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=writer_a), threading.Thread(target=writer_b)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert not errors, errors
    assert EvidenceEvent.objects.filter(asset=a, step="test.a").exists()
    assert EvidenceEvent.objects.filter(asset=b, step="test.b").exists()
    assert services.chain_verify(request=r).ok


@pytest.mark.django_db(transaction=True)
def test_interleaved_writes_from_two_servers_keep_both_chains_valid(users):
    """Two writers per server, four threads, each appending one event per transaction: the events of the two
    servers interleave in time (checked), each chain stays gap-free and valid, and so does the request's."""
    r = walk("inventoried", users=users, servers=[server_with_gpus(), server_with_gpus()])
    assets = list(r.assets.order_by("id"))
    before = {a.pk: len(_chain(a)) for a in assets}
    start = threading.Barrier(4)
    errors: list[BaseException] = []
    rounds = 15

    def writer(asset: Asset, n: int) -> None:
        try:
            start.wait(10)
            for i in range(rounds):
                with transaction.atomic():
                    event_append(request=r, asset=asset, step=f"test.w{n}", result=str(i), actor=None,
                                 output=f"output {n}/{i}")
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=writer, args=(a, n)) for n, a in enumerate(assets * 2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors, errors
    written = list(EvidenceEvent.objects.filter(request=r, step__startswith="test.w").order_by("id")
                   .values_list("asset_id", flat=True))
    switches = sum(1 for x, y in zip(written, written[1:], strict=False) if x != y)
    assert switches >= 3, f"the writers did not interleave ({switches} switches)"
    for asset in assets:
        chain = _chain(asset)
        assert len(chain) == before[asset.pk] + 2 * rounds
        assert [e.seq for e in chain] == list(range(1, len(chain) + 1))
    assert services.chain_verify(request=r).ok
