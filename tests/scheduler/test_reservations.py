"""Fleet's maintenance reservations against a real cluster (inventory.scheduler.reservations): what the scheduler
refused stays recorded with its error and is sent by the next call; a window that passed, or a reservation ended
before it was created, sends nothing."""

import datetime as dt
import os
import shutil

import pytest
from django.utils import timezone

from inventory import scheduler
from inventory.models import ReservationState
from inventory.scheduler import reservations

pytestmark = pytest.mark.django_db(transaction=True)


def _reservation(name, nodes, start, end):
    return reservations.reservation_request(name=name, owner="test", owner_id=1, nodes=nodes, start=start, end=end)


def _slurm_has(slurm, name):
    return name in slurm.run("scontrol", "show", "reservation", check=False)


def test_refused_requests_stay_recorded_with_the_error_and_are_sent_again(slurm, tmp_path, monkeypatch):
    now = timezone.now()
    ok = _reservation("fleet-test-ok", ["gpu01"], now, now + dt.timedelta(hours=1))
    unknown = _reservation("fleet-test-unknown", ["nosuchnode"], now, now + dt.timedelta(hours=1))
    passed = _reservation("fleet-test-passed", ["gpu02"], now - dt.timedelta(hours=2), now - dt.timedelta(hours=1))
    assert reservations.reservations_send([ok, unknown, passed]) == 1
    for r in (ok, unknown, passed):
        r.refresh_from_db()
    assert ok.state == ReservationState.CREATED and ok.created_at is not None and ok.note == ""
    assert unknown.state == ReservationState.REQUESTED and unknown.note.startswith("not created yet: ")
    assert passed.state == ReservationState.ENDED and "window passed" in passed.note
    assert _slurm_has(slurm, "fleet-test-ok") and not _slurm_has(slurm, "fleet-test-passed")
    assert reservations.reservations_send([ok, passed]) == 0  # nothing requested any more: nothing sent

    # The delete fails (an scontrol on PATH that refuses it): ending, with the error, deleted by the next call.
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    wrapper = bin_dir / "scontrol"
    wrapper.write_text(f'#!/bin/sh\n[ "$1" = delete ] && {{ echo "slurm_delete: refused" >&2; exit 1; }}\n'
                       f'exec "{shutil.which("scontrol")}" "$@"\n')
    wrapper.chmod(0o755)
    path = os.environ["PATH"]
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{path}")
    scheduler.forget()  # the backend copies the environment when it is made
    assert reservations.reservations_end([ok, unknown]) == 1  # the one never created ends without a request
    ok.refresh_from_db()
    unknown.refresh_from_db()
    assert ok.state == ReservationState.ENDING and ok.note.startswith("not deleted yet: ") and "refused" in ok.note
    assert unknown.state == ReservationState.ENDED and unknown.note == "ended before it was created"
    assert _slurm_has(slurm, "fleet-test-ok")

    monkeypatch.setenv("PATH", path)
    scheduler.forget()
    assert reservations.reservations_end([ok]) == 1
    ok.refresh_from_db()
    assert ok.state == ReservationState.ENDED and ok.note == "deleted" and ok.ended_at is not None
    assert not _slurm_has(slurm, "fleet-test-ok")
