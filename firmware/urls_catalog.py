from django.urls import path

from firmware.views import catalog

urlpatterns = [
    path("firmware/", catalog.firmware_home, name="firmware-home"),
]
