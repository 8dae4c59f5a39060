"""The demo seed: one closed, certified request with valid certificates and one in progress; idempotent."""

import pytest
from django.contrib.auth import get_user_model

from decommission.demo import decommission_demo_seed
from decommission.models import Certificate, DecommissionRequest
from decommission.selectors import public_keys
from decommission.verify import verify_document
from fleet.roles import user_set_role
from tests.decommission.decom_factories import server_with_gpus

pytestmark = pytest.mark.django_db


def test_demo_seed(settings, tmp_path):
    settings.DECOMMISSION_SIGNING_KEY_DIR = str(tmp_path)
    for role in ("operator", "approver"):
        user_set_role(get_user_model().objects.create_user(username=role), role)
    for _ in range(4):
        server_with_gpus()
    ids = decommission_demo_seed(simulator_url="http://127.0.0.1:8100")
    closed = DecommissionRequest.objects.get(pk=ids["closed"])
    assert closed.state == "closed"
    keys = public_keys()
    assert all(verify_document(c.document, keys) == [] for c in Certificate.objects.filter(request=closed))
    assert DecommissionRequest.objects.get(pk=ids["in_progress"]).state == "drained"
    assert decommission_demo_seed(simulator_url="http://127.0.0.1:8100") == {}
