from django.http import HttpResponse

from fleet.views import role_required


@role_required("viewer")
def heatmap(request) -> HttpResponse:
    return HttpResponse("Heatmap: not built yet")


@role_required("viewer")
def health_list(request) -> HttpResponse:
    return HttpResponse("Health: not built yet")


@role_required("viewer")
def source_list(request) -> HttpResponse:
    return HttpResponse("Ingest sources: not built yet")
