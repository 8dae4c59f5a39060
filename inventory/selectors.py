"""Every read a page or endpoint needs, ready to render: joins, deterministic order, filters."""

from __future__ import annotations

from collections.abc import Sequence

from django.db.models import Count, OuterRef, QuerySet, Subquery
from django.db.models.functions import Coalesce

from fleet.kept import KeptRead
from inventory.models import (
    FirmwareObservation,
    Gpu,
    GpuModel,
    GpuMove,
    GpuState,
    GpuStateChange,
    Hall,
    NvlinkDomain,
    PowerFeed,
    Rack,
    Row,
    SchedulerHold,
    SchedulerNode,
    Server,
    ServerPlatform,
    Site,
    gpu_identity,
)

GPU_LIST_RELATED = ("model", "server", "site", "rack")


def gpu_list() -> QuerySet[Gpu]:
    return Gpu.objects.select_related(*GPU_LIST_RELATED).order_by("id")


_GPU_ROWS: dict[tuple[str, ...], QuerySet[Gpu]] = {}


def gpu_rows(columns: tuple[str, ...]) -> QuerySet[Gpu]:
    """:func:`gpu_list` as ``.values(*columns)`` rows. The values query (4 joins, every column resolved: ~0.5 ms
    of CPU) is built once per process and copied for each request; the copy is never evaluated in place."""
    base = _GPU_ROWS.get(columns)
    if base is None:
        base = _GPU_ROWS[columns] = Gpu.objects.order_by("id").values(*columns)
    return base.all()


# What the GPU list page's table shows. Read with ``.values()``: no model instances, and the template
# resolves dict keys first (~3 ms less per page of 50, bench/README.md).
GPU_TABLE_COLUMNS = ("id", "serial", "uuid", "identity_masked", "model__name", "state", "server_id",
                     "server__hostname", "module_id", "pci_bus_id", "site_id", "site__code", "rack_id", "rack__name",
                     "vbios_version", "driver_version")


def gpu_table_rows() -> QuerySet[Gpu]:
    """:func:`gpu_list` as rows of :data:`GPU_TABLE_COLUMNS` (filter them as the GPU list)."""
    return gpu_rows(GPU_TABLE_COLUMNS)


def gpu_table_label(*, rows: list[dict]) -> list[dict]:
    """Add what the table shows but the columns don't hold: the identity and the state's label."""
    labels = dict(GpuState.choices)
    for row in rows:
        row["identity"] = gpu_identity(serial=row["serial"], uuid=row["uuid"], hostname=row["server__hostname"],
                                       pci_bus_id=row["pci_bus_id"], pk=row["id"])
        row["state_label"] = labels[row["state"]]
    return rows


GPU_DETAIL_RELATED = ("model", "server__nvlink_domain", "site", "row__hall", "rack")
_gpu_detail: dict[tuple[str, ...], KeptRead[Gpu]] = {}  # per set of panels' relations


def gpu_detail(*, pk: int, related: Sequence[str] = ()) -> Gpu:
    """A GPU with what its page and the heatmap's side panel show of its place: model, server (hostname,
    NVLink domain), site, hall and row, rack; and the ``related`` rows the caller's panels read
    (``inventory.panels.panel_related``). Read on every view of those pages: the statement is kept (fleet.kept).
    Raises ``Gpu.DoesNotExist``."""
    key = tuple(related)
    read = _gpu_detail.get(key)
    if read is None:
        read = _gpu_detail[key] = KeptRead(lambda gpu_id: Gpu.objects.select_related(*GPU_DETAIL_RELATED, *key)
                                           .filter(pk=gpu_id))
    rows = read(pk)
    if not rows:
        raise Gpu.DoesNotExist(f"No GPU {pk}.")
    return rows[0]


# The GPU page's own lists, read on every view of it: their statements are kept (fleet.kept).
HISTORY_SHOWN = 100
_state_history = KeptRead(lambda gpu_id: GpuStateChange.objects.filter(gpu_id=gpu_id).order_by("-at", "-id")
                          [:HISTORY_SHOWN])
_moves = KeptRead(lambda gpu_id: GpuMove.objects.filter(gpu_id=gpu_id).select_related("from_server", "to_server")
                  .order_by("-at", "-id")[:HISTORY_SHOWN])
_firmware = KeptRead(lambda gpu_id: FirmwareObservation.objects.filter(gpu_id=gpu_id).order_by(
    "component", "-last_seen", "-id"))


def gpu_state_history(*, gpu: Gpu) -> list[GpuStateChange]:
    """The GPU's latest state changes, newest first."""
    return _state_history(gpu.pk)


def gpu_moves(*, gpu: Gpu) -> list[GpuMove]:
    """The GPU's latest moves, newest first, with the servers it left and went to."""
    return _moves(gpu.pk)


def gpu_firmware(*, gpu: Gpu) -> list[FirmwareObservation]:
    """Every firmware version observed on the GPU, by component, the latest first."""
    return _firmware(gpu.pk)


def server_list() -> QuerySet[Server]:
    return Server.objects.select_related("platform", "rack", "site", "nvlink_domain", "scheduler_state").order_by("id")


def server_detail(*, pk: int) -> Server:
    return Server.objects.select_related("platform", "rack__row__hall", "site", "nvlink_domain",
                                         "scheduler_state").get(pk=pk)


def server_gpus(*, server: Server) -> QuerySet[Gpu]:
    """GPUs by slot."""
    return Gpu.objects.filter(server=server).select_related("model").order_by("module_id", "pci_bus_id", "id")


def rack_servers(*, rack: Rack) -> QuerySet[Server]:
    """Servers by rack unit, top of the rack first, with their GPU count."""
    return (Server.objects.filter(rack=rack).select_related("platform", "scheduler_state")
            .annotate(gpu_count=Count("gpus"))
            .order_by("-rack_unit", "id"))


def row_racks(*, row: Row) -> QuerySet[Rack]:
    return (Rack.objects.filter(row=row).annotate(server_count=Count("servers", distinct=True))
            .order_by("position", "id"))


def site_overview(*, site: Site) -> dict[str, object]:
    gpus = Gpu.objects.filter(site=site)
    return {
        "halls": site.halls.order_by("name").prefetch_related("rows"),
        "gpus_by_state": dict(gpus.values_list("state").annotate(n=Count("id")).order_by()),
        "gpus_by_model": list(gpus.values("model__name").annotate(n=Count("id")).order_by("-n")),
        "rack_count": Rack.objects.filter(site=site).count(),
        "server_count": Server.objects.filter(site=site).count(),
    }


def dashboard_counts() -> dict[str, object]:
    """Fleet-wide counts by state, site and model (GROUP BY on indexed columns: ~30 ms at 100k)."""
    by_state = dict(Gpu.objects.values_list("state").annotate(n=Count("id")).order_by())
    return {
        "by_state": [(s.value, s.label, by_state.get(s.value, 0)) for s in GpuState],
        "by_site": list(Gpu.objects.values("site__code").annotate(n=Count("id")).order_by("site__code")),
        "by_model": list(Gpu.objects.values("model__name").annotate(n=Count("id")).order_by("-n")),
        "total": sum(by_state.values()),
    }


def gpus_needing_attention() -> dict[str, QuerySet]:
    """GPUs an operator should look at: masked identities, RMA, drained; servers without a rack position."""
    return {
        "masked": gpu_list().filter(identity_masked=True),
        "rma": gpu_list().filter(state=GpuState.RMA),
        "drained": gpu_list().filter(state=GpuState.DRAINED),
        "unplaced_servers": Server.objects.filter(rack__isnull=True).order_by("id"),
        "scheduler_nodes": scheduler_nodes_needing_attention(),
    }


def scheduler_nodes_needing_attention() -> QuerySet[SchedulerNode]:
    """Nodes the scheduler has down, drained or reserved for a reason that is not Fleet's (someone else's work:
    Fleet never resumes them), from the last refresh. None without a scheduler (no query)."""
    from inventory.scheduler import configured

    if configured() is None:
        return SchedulerNode.objects.none()
    return SchedulerNode.objects.filter(drained_by="other").select_related("server").order_by("id")


def server_scheduler_holds(*, server: Server) -> QuerySet[SchedulerHold]:
    """Fleet's drains of the server's node, newest first (open ones and the last ended ones)."""
    return SchedulerHold.objects.filter(server=server).order_by("-id")


# --- operator UI ---------------------------------------------------------------------------------------

def gpu_model_skus() -> dict[str, str]:
    """GPU model name -> SKU (the GPU list filters models by SKU; counts group by name)."""
    return dict(GpuModel.objects.values_list("name", "sku"))


def rack_detail(*, pk: int) -> Rack:
    return Rack.objects.select_related("row__hall", "site").get(pk=pk)


def row_detail(*, pk: int) -> Row:
    return Row.objects.select_related("hall", "site").get(pk=pk)


def site_list() -> QuerySet[Site]:
    """Sites with their rack, server and GPU counts (one correlated count per column, on indexed site ids)."""

    def count(model: type[Rack] | type[Server] | type[Gpu]) -> Coalesce:
        per_site = model.objects.filter(site=OuterRef("pk")).order_by().values("site").annotate(n=Count("id"))
        return Coalesce(Subquery(per_site.values("n")), 0)

    return Site.objects.annotate(rack_count=count(Rack), server_count=count(Server), gpu_count=count(Gpu),
                                 hall_count=Count("halls")).order_by("code")


# --- REST API lists: every related object the representation shows is joined (one query per page) -----

def hall_list() -> QuerySet[Hall]:
    return Hall.objects.select_related("site").order_by("id")


def row_list() -> QuerySet[Row]:
    return Row.objects.select_related("hall", "site").order_by("id")


def rack_list() -> QuerySet[Rack]:
    """Racks with their row and site; power feed ids in one prefetch query per page."""
    return Rack.objects.select_related("row", "site").prefetch_related("power_feeds").order_by("id")


def power_feed_list() -> QuerySet[PowerFeed]:
    return PowerFeed.objects.select_related("site").order_by("id")


def nvlink_domain_list() -> QuerySet[NvlinkDomain]:
    return NvlinkDomain.objects.select_related("site").order_by("id")


def platform_list() -> QuerySet[ServerPlatform]:
    return ServerPlatform.objects.select_related("gpu_model").order_by("id")


def gpu_move_list() -> QuerySet[GpuMove]:
    return GpuMove.objects.select_related("from_server", "to_server").order_by("-id")

