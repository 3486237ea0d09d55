"""Every refusal of the API is JSON: ``{"detail": <message>, "code": <code>}`` (invalid
input keeps DRF's ``{"<field>": ["<reason>", ...]}``, also for an
:class:`~django_llmchat.errors.InputError` of :mod:`django_llmchat.inputs`).

Besides the views' own errors this covers what Django or DRF refuse before a view runs:
a path no route matches (``chats/abc/``) is a JSON 404, a body over
``DATA_UPLOAD_MAX_MEMORY_SIZE`` a JSON 413, too many form fields or files a JSON 400, an
unknown method a JSON 405, and a budget over its limit a JSON 429 with ``Retry-After``.
"""

from __future__ import annotations

import math

from django.conf import settings as django_settings
from django.core.exceptions import RequestDataTooBig, TooManyFieldsSent, TooManyFilesSent
from django.http import HttpResponsePermanentRedirect, JsonResponse
from django.urls import Resolver404, resolve
from django.utils import timezone
from django.views.decorators.csrf import csrf_exempt
from rest_framework import status
from rest_framework.exceptions import APIException, ParseError, ValidationError
from rest_framework.views import exception_handler as drf_exception_handler

from ..errors import BudgetExceededError, InputError

__all__ = ["PayloadTooLarge", "api_exception_handler", "invalid", "not_found"]


class PayloadTooLarge(APIException):
    status_code = status.HTTP_413_REQUEST_ENTITY_TOO_LARGE
    default_detail = "The request body is too large."
    default_code = "payload_too_large"


def _translate(exc: BaseException) -> BaseException:
    """Django's refusals while reading a body, as DRF exceptions."""
    if isinstance(exc, RequestDataTooBig):
        limit = django_settings.DATA_UPLOAD_MAX_MEMORY_SIZE
        return PayloadTooLarge(f"The request body is too large (at most {limit} bytes).")
    if isinstance(exc, TooManyFieldsSent):
        return ParseError("The form has too many fields.", code="too_many_fields")
    if isinstance(exc, TooManyFilesSent):
        return ParseError("The form has too many files.", code="too_many_files")
    return exc


def budget_response(exc: BudgetExceededError) -> JsonResponse:
    """429 for a limit over its hard value: which limit, when it resets, ``Retry-After``."""
    body = {"detail": exc.message, "code": "budget_exceeded", **exc.to_dict()}
    response = JsonResponse(body, status=status.HTTP_429_TOO_MANY_REQUESTS)
    if exc.resets_at is not None:
        wait = (exc.resets_at - timezone.now()).total_seconds()
        response["Retry-After"] = str(max(1, math.ceil(wait)))
    return response


def invalid(exc: InputError, *, nested: bool = True) -> ValidationError:
    """An input refused by :mod:`django_llmchat.inputs` as DRF's 400: ``{field:
    [reason, ...]}``; without ``nested``, the reasons alone (raised in a serializer's
    ``validate_<field>``, which names the field)."""
    return ValidationError(exc.to_dict() if nested else list(exc.reasons))


def api_exception_handler(exc, context):
    """DRF's handler, plus: refused input (``InputError``), Django's body refusals,
    budgets, and a ``code`` beside every ``detail``."""
    if isinstance(exc, BudgetExceededError):
        return budget_response(exc)
    if isinstance(exc, InputError):
        exc = invalid(exc)
    exc = _translate(exc)
    response = drf_exception_handler(exc, context)
    if response is None:
        return None
    data = response.data
    if isinstance(data, dict) and set(data) == {"detail"}:
        code = getattr(data["detail"], "code", None) or getattr(exc, "default_code", "error")
        response.data = {"detail": data["detail"], "code": code}
    return response


@csrf_exempt  # it changes nothing: a refused CSRF check would answer Django's HTML 403
def not_found(request, path: str = ""):
    """The last route of the API: any path no other route matches is a JSON 404. With
    ``APPEND_SLASH``, a GET of a route without its slash is redirected there, as Django's
    ``CommonMiddleware`` would (it cannot, the catch-all matching everything)."""
    if getattr(django_settings, "APPEND_SLASH", False) and not request.path_info.endswith("/"):
        try:
            match = resolve(request.path_info + "/")
        except Resolver404:
            match = None
        if match is not None and match.func is not not_found:
            if request.method in ("GET", "HEAD"):
                target = request.get_full_path(force_append_slash=True)
                return HttpResponsePermanentRedirect(target)
            return JsonResponse(
                {
                    "detail": f"Not found. The route ends with a slash: {request.path}/",
                    "code": "not_found",
                },
                status=404,
            )
    return JsonResponse({"detail": "Not found.", "code": "not_found"}, status=404)


class Conflict(APIException):
    """409: the chat is busy (a run works, or waits for a decision)."""

    status_code = status.HTTP_409_CONFLICT
    default_detail = "The chat is busy."
    default_code = "conflict"
