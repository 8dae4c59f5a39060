"""Demo data for ``make run`` (``bootstrap --demo-gpus``): vendors, a few orders and deliveries (one waiting for
approval, one partly delivered), spares on the shelf, open RMA cases, two years of failure history in which one
manufacturing lot goes bad, a spares pool, refresh inputs, a planners' demand curve, and a forecast.

The history is synthetic with a known truth (``procurement.forecasting.synthetic``): the seeded fleet's placed
GPUs are the current occupants of its slots (in service since their slot's last replacement), and the boards that
failed before them are imported as history (failed, then removed)."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from typing import Any

from django.utils import timezone

from fleet.audit import Actor
from inventory import services as inventory_services
from inventory.models import Gpu, GpuModel, GpuState, Site
from procurement.forecasting import synthetic
from procurement.models import (
    DemandPoint,
    GpuAsset,
    LeadTime,
    ModelEconomics,
    OrderStatus,
    PurchaseOrder,
    SparesPool,
    Vendor,
)
from procurement.services import orders, rma
from procurement.services.forecast import forecast_compute
from procurement.services.history import history_import
from procurement.services.sync import history_sync

EPOCH = dt.date(1970, 1, 1)
PERFORMANCE = {"H100": (Decimal("1.00"), "MLPerf Training v4.1 baseline"),
               "H200": (Decimal("1.20"), "memory-bound jobs 1.0-1.4x H100"),
               "B200": (Decimal("2.10"), "MLPerf Training v4.1: 2.0x GPT-3, 2.2x Llama-2-70B LoRA per GPU"),
               "A100": (Decimal("0.45"), "about half an H100 on dense BF16")}


def _iso(day: int) -> str:
    return (EPOCH + dt.timedelta(days=int(day))).isoformat()


def _history(*, today: dt.date, actor: Actor) -> dict[str, int]:
    placed = list(Gpu.objects.filter(state=GpuState.IN_SERVICE, site__isnull=False, asset__isnull=True)
                  .select_related("site", "model").order_by("id"))
    if not placed:
        return {"history": 0}
    start = today - dt.timedelta(days=730)
    rows = synthetic.generate("bad_batch", gpus=len(placed), sites=1, months=24, start=start, seed=11,
                              bad_from=12, bad_months=12)
    lots = [f"LOT-{b}" for b in rows.batches]
    current = rows.failed < 0
    for i in range(len(rows)):
        if current[i]:
            gpu = placed[rows.slot[i]]
            GpuAsset.objects.create(gpu=gpu, model=gpu.model, site=gpu.site, batch=lots[rows.batch[i]],
                                    in_service_on=min(EPOCH + dt.timedelta(days=int(rows.start[i])), today),
                                    warranty_end=gpu.warranty_end)
    lines = ["serial,model,site,in_service_at,failed_at,removed_at,cause,batch"]
    for i in range(len(rows)):
        if current[i] or rows.failed[i] >= (today - EPOCH).days:
            continue
        gpu = placed[rows.slot[i]]
        removed = min(int(rows.removed[i]), (today - EPOCH).days - 1)
        lines.append(f"HIST{i:06d},{gpu.model.name},{gpu.site.code},{_iso(rows.start[i])},{_iso(rows.failed[i])},"
                     f"{_iso(removed)},{synthetic.CAUSES[rows.cause[i]]},{lots[rows.batch[i]]}")
    result = history_import(text="\n".join(lines) + "\n", actor=actor)
    return {"history": result.created}


def procurement_demo_seed(*, actor: Actor) -> dict[str, Any]:
    today = timezone.localdate()
    sites = list(Site.objects.order_by("code"))
    models = list(GpuModel.objects.filter(gpus__isnull=False).distinct().order_by("name"))
    if not sites or not models:
        return {}
    vendors = [Vendor.objects.get_or_create(name=n, defaults={"rma_contact": c})[0] for n, c in
               (("Supermicro", "rma@supermicro.example"), ("Dell", "support@dell.example"),
                ("NVIDIA", "enterprise-support@nvidia.example"))]
    out = _history(today=today, actor=actor)
    model = models[0]
    site = sites[0]
    first = orders.order_create(vendor=vendors[0], reference="PO-DEMO-001", ordered_on=today - dt.timedelta(days=200),
                                promised_on=today - dt.timedelta(days=150), actor=actor,
                                lines=[{"gpu_model": model, "quantity": 16, "unit_price": Decimal("30000")}])
    orders.delivery_receive(order_line=first.lines.get(), site=site, received_on=today - dt.timedelta(days=140),
                            rows=orders.receipt_rows(serials="\n".join(f"DEMO1{n:05d}" for n in range(16)))[0],
                            actor=actor, note="late by ten days")
    second = orders.order_create(vendor=vendors[1], reference="PO-DEMO-002", ordered_on=today - dt.timedelta(days=60),
                                 promised_on=today + dt.timedelta(days=30), actor=actor,
                                 lines=[{"gpu_model": model, "quantity": 64, "unit_price": Decimal("31500")}])
    if second.status == OrderStatus.AWAITING_APPROVAL:
        orders.order_approve(order=second, actor=actor)
    orders.delivery_receive(order_line=second.lines.get(), site=sites[-1], received_on=today - dt.timedelta(days=5),
                            rows=orders.receipt_rows(serials="\n".join(f"DEMO2{n:05d}" for n in range(24)))[0],
                            actor=actor, note="partial: 24 of 64")
    orders.order_create(vendor=vendors[2], reference="PO-DEMO-003", ordered_on=today, actor=actor,
                        promised_on=today + dt.timedelta(days=270), note="next generation, needs approval",
                        lines=[{"gpu_model": models[-1], "quantity": 512, "unit_price": Decimal("37500")}])
    received = list(Gpu.objects.filter(serial__startswith="DEMO1").order_by("serial"))
    for gpu in received[:10]:
        inventory_services.gpu_transition(gpu=gpu, to_state=GpuState.SPARE, actor=actor, reason="to the shelf")
    cases = []
    for gpu, cause, xid in ((received[10], "hbm", 64), (received[11], "off_bus", 79), (received[12], "nvlink", 74)):
        cases.append(rma.rma_open(gpu=gpu, cause=cause, opened_on=today - dt.timedelta(days=20), xid=xid,
                                  evidence_kind="xid", evidence=f"XID {xid} during burn-in", actor=actor))
    rma.rma_ship(case=cases[1], shipped_on=today - dt.timedelta(days=18), carrier="UPS", tracking="1Z999AA10123456784",
                 vendor_case="SR-40211", actor=actor)
    rma.rma_ship(case=cases[2], shipped_on=today - dt.timedelta(days=19), carrier="DHL", tracking="JD014600006281",
                 vendor_case="SR-40177", actor=actor)
    rma.rma_replace(case=cases[2], serial="DEMO-RPL-0001", received_on=today - dt.timedelta(days=6), actor=actor)
    rma.rma_close(case=cases[2], closed_on=today - dt.timedelta(days=5), actor=actor)
    pool = SparesPool.objects.create(name="EU", target_fill_rate=Decimal("0.950"))
    pool.sites.set(sites[: max(len(sites) // 2, 1)])
    LeadTime.objects.get_or_create(gpu_model=model, vendor=None, defaults={"days": 90})
    for m in models:
        key = next((k for k in PERFORMANCE if k in m.name), None)
        perf, note = PERFORMANCE.get(key or "", (Decimal("1.00"), "not measured"))
        ModelEconomics.objects.get_or_create(gpu_model=m, defaults={"relative_performance": perf,
                                                                    "performance_note": note})
    installed = Gpu.objects.filter(state=GpuState.IN_SERVICE).count()
    for k in range(18):
        month = dt.date(today.year + (today.month - 1 + k) // 12, (today.month - 1 + k) % 12 + 1, 1)
        DemandPoint.objects.get_or_create(month=month, defaults={"gpus": int(installed * (1 + 0.02 * k))})
    out |= history_sync(actor=actor)
    for gpu_asset in GpuAsset.objects.filter(site__isnull=True).order_by("id"):
        gpu_asset.site = sites[gpu_asset.pk % len(sites)]  # spares on the shelf belong to a site
        gpu_asset.save(update_fields=["site"])
    out |= {"orders": PurchaseOrder.objects.count(), "rma_cases": len(cases)}
    run = forecast_compute(actor=actor)
    return out | {"forecasts": run.forecasts.count(), "alerts": run.forecasts.exclude(alert="").count()}
