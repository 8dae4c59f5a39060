"""The world's dcgm-exporter simulator reads its GPU list without Django: from a file, or from Fleet's REST API
over real HTTP (a live server and a viewer's token)."""

from __future__ import annotations

import pytest

from fleet.audit import SYSTEM
from fleet.tokens import token_create
from tests import factories
from world.dcgm_exporter import gpus_from_api, gpus_from_file, write_gpus_file


def test_gpu_list_from_fleets_rest_api_follows_every_page(live_server, make_user, transactional_db):
    rack = factories.rack(factories.site("wx"), name="wx-r01")
    servers = [factories.server(rack, hostname=f"wx-n{n}") for n in range(3)]
    placed = [factories.gpu(server) for server in servers for _ in range(2)]
    factories.gpu(None)  # not placed: not served
    _, key = token_create(user=make_user("viewer"), name="exporter", actor=SYSTEM)
    got = gpus_from_api(live_server.url, token=key, page_size=4)  # 2 pages
    assert sorted(got) == sorted((g.uuid, g.server.hostname, g.pci_bus_id, g.model.name) for g in placed)


def test_gpu_list_file_round_trip_and_a_bad_line_named(tmp_path):
    path = tmp_path / "gpus.csv"
    gpus = [("GPU-0000000a-1111-2222-3333-444455556666", "n1", "00000000:18:00.0", "NVIDIA H100 80GB HBM3")]
    write_gpus_file(path, gpus)
    assert gpus_from_file(path) == gpus
    path.write_text("# uuid,hostname,pci_bus_id,model\nGPU-1,n1,00000000:18:00.0\n")
    with pytest.raises(ValueError, match="line 2"):
        gpus_from_file(path)
