"""HTML pages of the procurement app."""

urlpatterns = []
