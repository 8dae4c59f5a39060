from django.urls import path

from fleet import views

urlpatterns = [
    path("audit/", views.audit_list, name="audit-list"),
    path("approvals/", views.approvals, name="approvals"),
    path("jobs/<int:pk>/", views.job_detail, name="job-detail"),
]
