from django.urls import path

from firmware import views

urlpatterns = [
    path("firmware/", views.firmware_home, name="firmware-home"),
]
