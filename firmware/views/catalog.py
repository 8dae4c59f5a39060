from django.http import HttpResponse

from fleet.views import role_required


@role_required("viewer")
def firmware_home(request) -> HttpResponse:
    return HttpResponse("Firmware: not built yet")
