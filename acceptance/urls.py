"""HTML pages of the acceptance app."""

from django.urls import path

from acceptance import views

urlpatterns = [
    path("acceptance/", views.home, name="acceptance-home"),
    path("acceptance/runs/<int:pk>/", views.run_detail, name="acceptance-run"),
    path("acceptance/deliveries/<int:pk>/", views.delivery_progress, name="acceptance-delivery"),
    path("acceptance/deliveries/<int:pk>/action/", views.delivery_action, name="acceptance-delivery-action"),
    path("acceptance/racks/<int:pk>/", views.rack_progress, name="acceptance-rack"),
    path("acceptance/racks/<int:pk>/action/", views.rack_action, name="acceptance-rack-action"),
    path("acceptance/servers/<int:pk>/upload/", views.server_upload, name="acceptance-server-upload"),
    path("acceptance/infant-mortality/", views.infant_mortality, name="acceptance-infant-mortality"),
]
