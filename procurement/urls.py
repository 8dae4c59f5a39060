"""HTML pages of the procurement app."""

from django.urls import path

from procurement.views import orders, planning, rma

urlpatterns = [
    path("procurement/", orders.home, name="procurement-home"),
    path("procurement/orders/new/", orders.order_new, name="procurement-order-new"),
    path("procurement/orders/<int:pk>/", orders.order_detail, name="procurement-order"),
    path("procurement/orders/<int:pk>/approve/", orders.order_approve, name="procurement-order-approve"),
    path("procurement/orders/<int:pk>/reject/", orders.order_reject, name="procurement-order-reject"),
    path("procurement/orders/<int:pk>/receive/", orders.order_receive, name="procurement-order-receive"),
    path("procurement/rma/", rma.rma_list, name="procurement-rma-list"),
    path("procurement/rma/new/<int:gpu_id>/", rma.rma_new, name="procurement-rma-new"),
    path("procurement/rma/<int:pk>/", rma.rma_detail, name="procurement-rma"),
    path("procurement/rma/<int:pk>/<str:step>/", rma.rma_step, name="procurement-rma-step"),
    path("procurement/forecast/", planning.forecast, name="procurement-forecast"),
    path("procurement/forecast/recompute/", planning.forecast_recompute, name="procurement-forecast-recompute"),
    path("procurement/forecast/backtest/", planning.backtest, name="procurement-backtest-page"),
    path("procurement/forecast/<int:pk>/", planning.forecast_scope, name="procurement-forecast-scope"),
    path("procurement/pools/new/", planning.pool_new, name="procurement-pool-new"),
    path("procurement/warranty/", planning.warranty, name="procurement-warranty"),
    path("procurement/refresh/", planning.refresh, name="procurement-refresh"),
]
