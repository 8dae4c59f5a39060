"""Procurement: vendors, orders, deliveries, assets (:mod:`.orders`); failures and RMA cases (:mod:`.rma`);
spares pools, lead times, forecasts and refresh inputs (:mod:`.planning`). Import from ``procurement.models``."""

from procurement.models.orders import (
    Delivery,
    GpuAsset,
    OrderLine,
    OrderStatus,
    PurchaseOrder,
    ServerAsset,
    Vendor,
)
from procurement.models.planning import (
    DemandPoint,
    Forecast,
    ForecastRun,
    LeadTime,
    ModelEconomics,
    ScopeKind,
    SparesPool,
)
from procurement.models.rma import Cause, EvidenceKind, Failure, RmaCase, RmaStatus

__all__ = [
    "Cause", "Delivery", "DemandPoint", "EvidenceKind", "Failure", "Forecast", "ForecastRun", "GpuAsset",
    "LeadTime", "ModelEconomics", "OrderLine", "OrderStatus", "PurchaseOrder", "RmaCase", "RmaStatus",
    "ScopeKind", "ServerAsset", "SparesPool", "Vendor",
]
