"""HTML pages of the decommission app."""

from django.urls import path

from decommission import views

app_name = "decommission"

urlpatterns = [
    path("decommission/", views.request_list, name="request-list"),
    path("decommission/new/", views.request_new, name="request-new"),
    path("decommission/<int:pk>/", views.request_detail, name="request-detail"),
    path("decommission/<int:pk>/action/<str:name>/", views.request_action, name="request-action"),
    path("decommission/<int:pk>/assets/<int:asset_pk>/agent-token/", views.agent_token_new, name="agent-token"),
    path("decommission/agent/script/source/", views.agent_script_source, name="agent-script-source"),
    path("decommission/<int:pk>/custody/", views.custody_add, name="custody-add"),
    path("decommission/<int:pk>/certificates/", views.certificate_list, name="certificate-list"),
    path("decommission/certificates/<uuid:cert_id>/download/", views.certificate_download,
         name="certificate-download"),
    path("decommission/certificates/<uuid:cert_id>/pdf/", views.certificate_pdf_download, name="certificate-pdf"),
    path("decommission/certificates/<uuid:cert_id>/verify/", views.certificate_check, name="certificate-verify"),
    path("decommission/agent/script/", views.agent_script_view, name="agent-script"),
]
