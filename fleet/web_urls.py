from django.urls import path

from fleet import views

urlpatterns = [
    path("audit/", views.audit_list, name="audit-list"),
    path("jobs/<int:pk>/", views.job_detail, name="job-detail"),
]
