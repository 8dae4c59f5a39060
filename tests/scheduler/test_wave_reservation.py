"""A wave's maintenance reservation (``drain.reservation``), against a real Slurm cluster and the BMC simulator:
the running wave reserves its nodes (MAINT) for its window, so the scheduler places no job there that would run
into it; Fleet's own reservation does not make its drain "someone else's"; the reservation is deleted once when
the wave ends (or the rollout is aborted), and the job that waited then runs."""

import datetime as dt

import pytest
from django.utils import timezone

from firmware.models import MaintenanceWindow, RolloutState, RolloutWave, WindowKind
from firmware.services import engine
from firmware.services import rollout as svc
from inventory.models import HoldState, ReservationState, SchedulerHold, SchedulerReservation
from tests.firmware.conftest import drive  # noqa: F401 - the fixture
from tests.scheduler import rollout_helpers as rh
from world.bmc.testing import running_simulator

pytestmark = pytest.mark.django_db(transaction=True)


def _reservation(slurm, name):
    """``scontrol show reservation`` of ``name`` as a dict ({} when the scheduler has none)."""
    out = slurm.run("scontrol", "show", "reservation", "-o", name, check=False).strip()
    if not out.startswith("ReservationName="):
        return {}
    return dict(field.split("=", 1) for field in out.split() if "=" in field)


def _sbatch_pending(slurm, node, minutes):
    out = slurm.run("sbatch", "--parsable", "-w", node, "-t", str(minutes), "-o", "/dev/null", "--wrap", "sleep 5")
    return int(out.strip().split(";")[0])


def test_a_wave_reserves_its_nodes_drains_them_as_fleets_and_deletes_the_reservation(users, drive, slurm):  # noqa: F811
    with running_simulator(bmcs=2, task_seconds=0.1, bmc_reset_seconds=0.1, seed=9) as sim:
        fleet = rh.fleet_on_nodes(sim, ["gpu01", "gpu02"])
        now = timezone.now()  # a change freeze keeps the targets from draining until the reservation is active
        freeze = MaintenanceWindow.objects.create(name="freeze", kind=WindowKind.FREEZE,
                                                  starts_at=now - dt.timedelta(minutes=5),
                                                  ends_at=now + dt.timedelta(hours=1))
        rollout = rh.start(fleet, users, drain={"reservation": True, "reservation_minutes": 30})
        drive(rollout, lambda r: SchedulerReservation.objects.filter(state=ReservationState.CREATED).exists())
        slurm.wait(lambda: [slurm.node_line(n)[0] for n in ("gpu01", "gpu02")] == ["maint", "maint"],
                   "the nodes in maintenance (slurmctld applies a reservation within seconds)")
        reservation = SchedulerReservation.objects.get()
        wave = RolloutWave.objects.get(pk=reservation.owner_id)
        assert reservation.name == f"fleet-r{rollout.pk}-w{wave.index}-1" and reservation.nodes == ["gpu01", "gpu02"]
        shown = _reservation(slurm, reservation.name)
        assert shown["Nodes"] == "gpu[01-02]" and "MAINT" in shown["Flags"] and shown["State"] == "ACTIVE"
        job = _sbatch_pending(slurm, "gpu01", 10)  # the scheduler places no job on the reserved nodes
        MaintenanceWindow.objects.filter(pk=freeze.pk).update(enabled=False)
        rollout = drive(rollout, lambda r: r.state in rh.DONE, timeout=60)
        assert slurm.job_state(job) == "PENDING"
        assert rh.activations(sim, "bmc-0001") > 0
    assert rollout.state == RolloutState.COMPLETED, rollout.pause_reason
    # Fleet's own reservation did not make the nodes someone else's: drained by Fleet, resumed once
    assert set(SchedulerHold.objects.values_list("state", flat=True)) == {HoldState.RELEASED}
    assert [rh.resumes(slurm, n) for n in ("gpu01", "gpu02")] == [1, 1]
    engine.rollout_tick()  # the tick after the wave ended (drive stops at completion) deletes it, once
    reservation.refresh_from_db()
    assert reservation.state == ReservationState.ENDED and _reservation(slurm, reservation.name) == {}
    slurm.wait(lambda: slurm.job_state(job) in ("RUNNING", "COMPLETING", "GONE"), "the waiting job ran")
    engine.rollout_tick()
    assert SchedulerReservation.objects.count() == 1  # not created again for a finished wave


def test_with_a_required_window_the_reservation_covers_the_window_ahead(users, drive, slurm):  # noqa: F811
    now = timezone.now().replace(microsecond=0)
    window = MaintenanceWindow.objects.create(name="tonight", kind=WindowKind.ALLOW,
                                              starts_at=now + dt.timedelta(minutes=20),
                                              ends_at=now + dt.timedelta(minutes=80))
    with running_simulator(bmcs=2, task_seconds=0.1, bmc_reset_seconds=0.1, seed=10) as sim:
        fleet = rh.fleet_on_nodes(sim, ["gpu03", "gpu04"])
        rollout = rh.start(fleet, users, require_window=True, window_ids=[window.pk], drain={"reservation": True})
        drive(rollout, lambda r: SchedulerReservation.objects.filter(state=ReservationState.CREATED).exists())
        reservation = SchedulerReservation.objects.get()
        assert (reservation.starts_at, reservation.ends_at) == (window.starts_at, window.ends_at)
        shown = _reservation(slurm, reservation.name)
        local = timezone.localtime(window.starts_at, dt.datetime.now().astimezone().tzinfo)
        assert shown["State"] == "INACTIVE" and shown["StartTime"] == f"{local:%Y-%m-%dT%H:%M:%S}"
        assert shown["Duration"] == "01:00:00"
        long_job = _sbatch_pending(slurm, "gpu03", 60)  # would run into the window: not started
        short_job = _sbatch_pending(slurm, "gpu04", 5)  # ends before it: runs
        slurm.wait(lambda: slurm.job_state(short_job) in ("RUNNING", "COMPLETING", "GONE"), "the short job ran")
        assert slurm.job_state(long_job) == "PENDING"
        assert not SchedulerHold.objects.exists()  # no drain before the window: the targets wait for it
        svc.rollout_abort(rollout=rollout, actor=users["operator"], reason="not tonight")
        engine.rollout_tick()
    reservation.refresh_from_db()
    assert reservation.state == ReservationState.ENDED and _reservation(slurm, reservation.name) == {}
    slurm.wait(lambda: slurm.job_state(long_job) in ("RUNNING", "COMPLETING", "GONE"), "the long job ran")
