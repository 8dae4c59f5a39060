from django.urls import path

from inventory import views

urlpatterns = [
    path("", views.dashboard, name="dashboard"),
    path("gpus/", views.gpu_list, name="gpu-list"),
    path("gpus/export.csv", views.gpu_export, name="gpu-export"),
    path("gpus/bulk-transition/", views.gpu_bulk_transition, name="gpu-bulk-transition"),
    path("gpus/<int:pk>/", views.gpu_detail, name="gpu-detail"),
    path("gpus/<int:pk>/transition/", views.gpu_transition, name="gpu-transition"),
    path("servers/", views.server_list, name="server-list"),
    path("servers/place/", views.server_place_bulk, name="server-place-bulk"),
    path("servers/<int:pk>/", views.server_detail, name="server-detail"),
    path("servers/<int:pk>/place/", views.server_place, name="server-place"),
    path("racks/<int:pk>/", views.rack_detail, name="rack-detail"),
    path("rows/<int:pk>/", views.row_detail, name="row-detail"),
    path("places/suggest/<slug:kind>/", views.place_suggest, name="place-suggest"),
    path("sites/", views.site_list, name="site-list"),
    path("sites/<slug:code>/", views.site_detail, name="site-detail"),
    path("import/", views.import_upload, name="import-upload"),
    path("import/<int:pk>/", views.import_preview, name="import-preview"),
]
