"""HTML pages of the decommission app."""

urlpatterns = []
