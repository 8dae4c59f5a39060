from django.apps import AppConfig


class DecommissionConfig(AppConfig):
    name = "decommission"
