"""HTTP endpoint of the mutating admission webhook (core: gateways/admission_webhook.py).

Called by the Kubernetes API server, not by users: no session, no CSRF token. The
chart's MutatingWebhookConfiguration sends only Job creates carrying the queue label
(objectSelector) and serves it over TLS (platform/README.md)."""

from __future__ import annotations

import json

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST

from scheduler_bridge.gateways.admission_webhook import BadAdmissionReview, review_response


@csrf_exempt
@require_POST
def suspend_queue_jobs(request: HttpRequest) -> HttpResponse:
    try:
        review = json.loads(request.body or b"null")
        return JsonResponse(review_response(review))
    except (ValueError, BadAdmissionReview) as error:
        return JsonResponse({"detail": f"not an AdmissionReview v1: {error}"}, status=400)
