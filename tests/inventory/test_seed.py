"""seed_demo: a deterministic, realistic demo fleet that keeps every inventory invariant, audited."""

import io

import pytest
from django.core.management import CommandError, call_command
from django.db import transaction
from django.db.models import Count, F, Q

from fleet.models import AuditEvent, AuditSource
from inventory.lifecycle import ALLOWED
from inventory.models import (
    FirmwareComponent,
    FirmwareObservation,
    Gpu,
    GpuMove,
    GpuState,
    GpuStateChange,
    NvlinkDomain,
    Rack,
    Server,
    Site,
)
from tests import factories

S = GpuState
IN_SERVER = {S.IN_SERVICE, S.BURN_IN, S.DRAINED}


def seed(gpus: int = 200, seed: int = 7) -> None:
    call_command("seed_demo", gpus=gpus, seed=seed, stdout=io.StringIO())


def fleet_snapshot() -> dict:
    """Everything the seed decides, without ids (sequences differ between databases)."""
    return {
        "gpus": list(Gpu.objects.order_by("id").values_list(
            "serial", "serial_raw", "uuid", "uuid_raw", "identity_masked", "model__sku", "asset_tag", "warranty_end",
            "state", "state_changed_at", "server__hostname", "module_id", "pci_bus_id", "site__code", "rack__name",
            "vbios_version", "inforom_image", "driver_version")),
        "servers": list(Server.objects.order_by("id").values_list(
            "hostname", "serial", "bmc_address", "rack__name", "rack_unit", "platform__name", "nvlink_domain__name")),
        "sites": list(Site.objects.order_by("code").values_list("code", "timezone", "electricity_price_kwh", "pue")),
        "racks": list(Rack.objects.order_by("id").values_list("name", "position", "cooling", "power_budget_kw")),
        "states": list(GpuStateChange.objects.order_by("id").values_list(
            "gpu__serial", "from_state", "to_state", "reason", "at")),
        "firmware": list(FirmwareObservation.objects.order_by("id").values_list(
            "gpu__serial", "server__hostname", "component", "version", "first_seen", "last_seen")),
    }


def seeded_in_fresh_db(gpus: int, seed_value: int) -> dict:
    with transaction.atomic():
        seed(gpus, seed_value)
        snapshot = fleet_snapshot()
        transaction.set_rollback(True)  # back to an empty database for the next run
    assert not Gpu.objects.exists()
    return snapshot


@pytest.mark.django_db
def test_same_gpus_and_seed_give_the_same_fleet():
    first = seeded_in_fresh_db(200, 7)
    second = seeded_in_fresh_db(200, 7)
    assert len(first["gpus"]) == 200
    assert first == second
    other = seeded_in_fresh_db(200, 8)
    assert {g[0] for g in other["gpus"]} != {g[0] for g in first["gpus"]}


@pytest.mark.django_db
def test_state_spread_and_placement():
    seed(200, 7)
    by_state = dict(Gpu.objects.values_list("state").annotate(n=Count("id")).order_by())
    assert sum(by_state.values()) == 200
    assert 0.8 <= by_state[S.IN_SERVICE] / 200 <= 0.95
    for state in (S.BURN_IN, S.DRAINED, S.RMA, S.SPARE, S.ORDERED, S.RECEIVED, S.DECOMMISSIONING):
        assert by_state.get(state, 0) > 0, state
    placed_states = set(Gpu.objects.filter(server__isnull=False).values_list("state", flat=True))
    assert placed_states <= IN_SERVER
    assert not Gpu.objects.filter(server__isnull=True, state__in=IN_SERVER).exists()
    assert not Gpu.objects.filter(state=S.SPARE, server__isnull=False).exists()
    masked = Gpu.objects.filter(identity_masked=True)
    assert masked.exists() and not masked.filter(serial__isnull=False).exists()
    assert set(masked.values_list("serial_raw", flat=True)) == {"0000000000000"}
    # GPUs on order have no serial yet; everything else received has one unless masked
    assert not Gpu.objects.filter(state=S.ORDERED, serial__isnull=False).exists()
    assert not Gpu.objects.exclude(state=S.ORDERED).filter(serial__isnull=True, identity_masked=False).exists()
    # the three HGX generations, with the names nvidia-smi reports
    names = set(Gpu.objects.values_list("model__name", flat=True))
    assert names == {"NVIDIA H100 80GB HBM3", "NVIDIA H200", "NVIDIA B200"}
    assert len(set(Gpu.objects.exclude(driver_version="").values_list("driver_version", flat=True))) >= 2


@pytest.mark.django_db
def test_invariants_hold():
    seed(200, 7)
    gpus = Gpu.objects.all()
    serials = [s for s in gpus.values_list("serial", flat=True) if s]
    uuids = [u for u in gpus.values_list("uuid", flat=True) if u]
    assert len(serials) == len(set(serials)) and all(len(s) == 13 and s.isdigit() for s in serials)
    assert len(uuids) == len(set(uuids)) and all(u.startswith("GPU-") and len(u) == 40 for u in uuids)
    # denormalised placement: a GPU is where its server is; a server is where its rack is
    placed = gpus.filter(server__isnull=False)
    assert placed.count() == Server.objects.count() * 8
    assert not placed.filter(~Q(site=F("server__site")) | ~Q(row=F("server__row")) | ~Q(rack=F("server__rack")))
    assert not gpus.filter(server__isnull=True).filter(
        Q(site__isnull=False) | Q(rack__isnull=False) | Q(module_id__isnull=False) | ~Q(pci_bus_id=""))
    assert not Server.objects.filter(~Q(site=F("rack__site")) | ~Q(row=F("rack__row")))
    slots = Server.objects.annotate(n=Count("gpus"), modules=Count("gpus__module_id", distinct=True),
                                    buses=Count("gpus__pci_bus_id", distinct=True))
    assert set(slots.values_list("n", "modules", "buses")) == {(8, 8, 8)}
    assert set(placed.values_list("module_id", flat=True)) == set(range(1, 9))
    assert "00000000:18:00.0" in set(placed.values_list("pci_bus_id", flat=True))
    assert NvlinkDomain.objects.count() == Server.objects.count()
    # history: every GPU has a legal chain of states ending in its current state
    last: dict[int, str] = {}
    for gpu_id, before, after in GpuStateChange.objects.order_by("gpu_id", "at", "id").values_list(
            "gpu_id", "from_state", "to_state"):
        assert before == last.get(gpu_id, ""), (gpu_id, before, after)
        assert before == "" or after in ALLOWED[before]
        last[gpu_id] = after
    assert last == dict(gpus.values_list("id", "state"))
    # every placed GPU was installed; every pulled (RMA) GPU was removed
    assert set(GpuMove.objects.filter(to_server__isnull=False).values_list("gpu_id", flat=True)) >= set(
        placed.values_list("id", flat=True))
    # the denormalised firmware columns are versions actually observed
    for gpu in placed.only("id", "vbios_version", "driver_version")[:50]:
        seen = set(FirmwareObservation.objects.filter(gpu=gpu).values_list("component", "version"))
        assert (FirmwareComponent.GPU_VBIOS, gpu.vbios_version) in seen
        assert (FirmwareComponent.DRIVER, gpu.driver_version) in seen
    assert FirmwareObservation.objects.filter(server__isnull=False).count() == Server.objects.count() * 3


@pytest.mark.django_db
def test_every_gpu_is_audited_as_created_by_the_seeder():
    seed(200, 7)
    created = AuditEvent.objects.filter(action="create", content_type__model="gpu")
    assert created.count() == 200
    assert set(created.values_list("actor_name", "source").distinct()) == {("seed_demo", AuditSource.CLI)}
    assert set(created.values_list("object_id", flat=True)) == {str(pk) for pk in Gpu.objects.values_list("id", flat=True)}
    gpu = Gpu.objects.exclude(serial__isnull=True).first()
    event = created.get(object_id=str(gpu.pk))
    assert event.object_repr == gpu.serial and event.changes["serial"] == [None, gpu.serial]
    assert AuditEvent.objects.filter(action="create", content_type__model="server").count() == Server.objects.count()
    summary = AuditEvent.objects.get(action="import")
    assert "200 GPUs" in summary.message


@pytest.mark.sqlite
@pytest.mark.django_db
def test_small_seed_works_and_refuses_a_non_empty_inventory():
    seed(40, 3)
    assert Gpu.objects.count() == 40
    assert Server.objects.exists() and AuditEvent.objects.filter(action="create", content_type__model="gpu").count() == 40
    with pytest.raises(CommandError, match="not empty"):
        seed(40, 3)
    assert Gpu.objects.count() == 40


@pytest.mark.django_db
def test_refuses_an_inventory_that_has_any_gpu():
    factories.gpu()
    with pytest.raises(CommandError, match=r"not empty \(1 GPUs"):
        seed(20, 1)
    assert Gpu.objects.count() == 1


@pytest.mark.django_db
def test_the_demo_fleet_exported_and_imported_back_changes_nothing():
    """The seed keeps identities the way imports do, so re-importing the demo's own CSV is a no-op.
    (GPUs still on order have no serial, UUID, asset tag or slot: Fleet CSV cannot name them yet.)"""
    import csv

    from inventory.importers import gpu_csv_rows
    from inventory.imports import gpus_import
    from inventory.selectors import gpu_list

    seed()
    out = io.StringIO()
    named = gpu_list().filter(Q(serial__isnull=False) | Q(uuid__isnull=False) | Q(asset_tag__isnull=False)
                              | Q(server__isnull=False) & ~Q(pci_bus_id=""))
    csv.writer(out).writerows(gpu_csv_rows(named))
    events = AuditEvent.objects.count()
    result = gpus_import(content=out.getvalue().encode(), filename="demo.csv", fmt="csv", actor=None)
    assert result.errors == [] and (result.created, result.updated, result.moved) == (0, 0, 0)
    assert result.unchanged == named.count() > 190 and AuditEvent.objects.count() == events
