from django.http import HttpRequest, HttpResponse


def home(request: HttpRequest) -> HttpResponse:
    return HttpResponse("Hello from Django", content_type="text/plain")


def status(request: HttpRequest) -> HttpResponse:
    return HttpResponse("the host's own /api route", content_type="text/plain")
