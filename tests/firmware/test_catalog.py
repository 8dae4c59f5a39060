"""Catalog: version ordering, service validation, observations from the real Redfish sample files."""

import datetime as dt
import json

import pytest
from django.core.exceptions import ValidationError
from django.utils import timezone

from firmware.models import ComponentSpec, version_key
from firmware.services import catalog
from firmware.services.observations import firmware_inventory_record
from fleet.audit import SYSTEM
from inventory.models import FirmwareObservation
from tests import factories
from tests.firmware import fw_factories as fw
from tests.samples import SAMPLES

HAPPY = SAMPLES / "redfish/lambdalabs/firmware_inventory_happypath/redfish/v1/UpdateService/FirmwareInventory"


@pytest.mark.parametrize("versions", [
    ["96.00.89.00.01", "96.00.9A.00.01", "96.00.A5.00.01", "97.00.0D.00.00"],  # VBIOS hex groups
    ["550.90.07", "560.35", "560.35.03", "570.124.06"],  # 2- and 3-part driver versions
    ["1.9", "1.10", "2.0"],
    ["HGX-22.10-1-rc67", "HGX-22.10-1-rc80", "HGX-24.04-1-rc12"],
])
def test_version_ordering(versions):
    assert sorted(reversed(versions), key=version_key) == versions


def test_version_key_ignores_case():
    assert version_key("96.00.9a.00.01") == version_key("96.00.9A.00.01")
    assert version_key("25.06-A") == version_key("25.06-a")


@pytest.mark.django_db
def test_specs_follow_activation_matrix():
    assert catalog.component_specs_ensure(actor=SYSTEM) == 11
    assert catalog.component_specs_ensure(actor=SYSTEM) == 0
    act = dict(ComponentSpec.objects.values_list("component", "activation"))
    assert act["bmc"] == "bmc_reset" and act["sbios"] == "chassis_power_cycle"
    assert act["cpld"] == act["erot"] == "ac_power_cycle"
    assert act["gpu_vbios"] == act["nvswitch"] == "chassis_power_cycle" and act["psu"] == "none"
    assert ComponentSpec.objects.order_by("apply_order").first().component == "bmc"


@pytest.mark.django_db
def test_release_and_bundle_validation():
    catalog.component_specs_ensure(actor=SYSTEM)
    with pytest.raises(ValidationError) as err:
        catalog.release_create(component="driver", version="", sha256="x", actor=SYSTEM)
    assert {"component", "version", "image_url"} <= set(err.value.message_dict)
    a, b = fw.release("bmc", "1.0"), fw.release("bmc", "1.1")
    with pytest.raises(ValidationError, match="Two releases of Host BMC"):
        catalog.bundle_create(name="x", platform=fw.platform(), releases=[a, b], actor=SYSTEM)
    catalog.release_set_channel(release=a, channel="revoked", actor=SYSTEM, reason="bad")
    with pytest.raises(ValidationError, match="revoked"):
        catalog.bundle_create(name="y", platform=fw.platform(), releases=[a], actor=SYSTEM)
    with pytest.raises(ValidationError, match="Fixed once"):
        catalog.release_update(release=b, version="1.2", actor=SYSTEM)


@pytest.mark.django_db
def test_window_validation():
    with pytest.raises(ValidationError) as err:
        catalog.window_create(name="w", weekdays="8", start_time=dt.time(2), duration_minutes=0, actor=SYSTEM)
    assert {"weekdays", "duration_minutes"} <= set(err.value.message_dict)
    w = catalog.window_create(name="w", weekdays="4,2", start_time=dt.time(2), duration_minutes=60, actor=SYSTEM)
    assert w.weekdays == "2,4"


@pytest.mark.django_db
@pytest.mark.skipif(not HAPPY.exists(), reason="shared samples not present")
def test_record_real_sample():
    catalog.component_specs_ensure(actor=SYSTEM)
    server = factories.server()
    gpu1 = factories.gpu(server, slot=1)
    members = [json.loads(p.read_text()) for p in sorted(HAPPY.glob("*/index.json"))]
    result = firmware_inventory_record(server=server, members=members, seen_at=timezone.now(), actor=SYSTEM)
    seen = dict(FirmwareObservation.objects.filter(server=server).values_list("component", "version"))
    assert seen == {"bmc": "01.04.11", "hmc": "HGX-22.10-1-rc67", "sbios": "BIOS Date: 10/28/2025 Ver 2.7a",
                    "erot": "00.02.0182.0000_n00"}
    gpu1.refresh_from_db()
    assert gpu1.vbios_version == "96.00.A5.00.01"
    assert not result.unmatched_gpu_items
    # Seen again: no new rows.
    firmware_inventory_record(server=server, members=members, seen_at=timezone.now(), actor=SYSTEM)
    assert FirmwareObservation.objects.filter(server=server).count() == 4
