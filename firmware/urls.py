"""HTML pages of the firmware app: the catalog, baselines and drift (``urls_catalog``), rollouts (``urls_rollouts``)."""

from firmware import urls_catalog, urls_rollouts

urlpatterns = [*urls_catalog.urlpatterns, *urls_rollouts.urlpatterns]
