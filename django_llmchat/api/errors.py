"""Every refusal of the API is JSON: ``{"detail": <message>, "code": <code>}`` (invalid
input keeps DRF's ``{"<field>": ["<reason>", ...]}``, also for an
:class:`~django_llmchat.errors.InputError` of :mod:`django_llmchat.inputs`), except on the
routes the AI SDK's transport calls (``POST ui/chat``, ``GET ui/chat/{id}/stream``): it
shows a refusal's body as the error's message, so they answer the same refusal as plain
text (:func:`as_text`) unless the client asks for JSON.

Besides the views' own errors this covers what Django or DRF refuse before a view runs:
a path no route matches (``chats/abc/``) is a JSON 404, a body over
``DATA_UPLOAD_MAX_MEMORY_SIZE`` a JSON 413, too many form fields or files a JSON 400, an
unknown method a JSON 405, and a budget over its limit a JSON 429 with ``Retry-After``.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

from django.conf import settings as django_settings
from django.core.exceptions import RequestDataTooBig, TooManyFieldsSent, TooManyFilesSent
from django.http import HttpResponse, HttpResponsePermanentRedirect, JsonResponse
from django.urls import Resolver404, resolve
from django.utils import timezone
from django.views.decorators.csrf import csrf_exempt
from rest_framework import status
from rest_framework.exceptions import APIException, ParseError, ValidationError
from rest_framework.views import exception_handler as drf_exception_handler

from ..errors import BudgetExceededError, InputError

__all__ = [
    "PayloadTooLarge",
    "api_exception_handler",
    "as_text",
    "invalid",
    "not_found",
    "text_refusal",
    "wants_json",
]


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


def as_text(data: Any) -> str:
    """A refusal's JSON as the sentences a person reads: its ``detail``; for invalid
    input one line per field, ``<field>: <reason>; <reason>`` (nested fields dotted)."""
    if isinstance(data, dict) and isinstance(data.get("detail"), str):
        return data["detail"]
    lines: list[str] = []

    def walk(value: Any, path: str) -> None:
        if isinstance(value, dict):
            for key, item in value.items():
                name = "" if key == "non_field_errors" else str(key)
                walk(item, f"{path}.{name}" if path and name else path or name)
        elif isinstance(value, list) and all(not isinstance(v, (dict, list)) for v in value):
            reasons = "; ".join(str(v) for v in value)
            lines.append(f"{path}: {reasons}" if path else reasons)
        elif isinstance(value, list):
            for index, item in enumerate(value):
                walk(item, f"{path}.{index}" if path else str(index))
        else:
            lines.append(f"{path}: {value}" if path else str(value))

    walk(data, "")
    return "\n".join(lines) or "The request was refused."


def wants_json(request) -> bool:
    """Whether the client's ``Accept`` names ``application/json`` itself (``*/*``, or no
    header, does not)."""
    for item in request.headers.get("Accept", "").split(","):
        media, *params = (part.strip() for part in item.split(";"))
        if media.lower() != "application/json":
            continue
        quality = next((p[2:] for p in params if p.lower().startswith("q=")), "1")
        try:
            if float(quality) > 0:
                return True
        except ValueError:
            return True
    return False


def text_refusal(request, response: HttpResponse) -> HttpResponse:
    """A JSON refusal (a status of 400 and up) as ``text/plain``, its status and headers
    kept, for a client that did not ask for JSON; any other answer as it is."""
    if response.status_code < 400 or getattr(response, "streaming", False):
        return response
    if wants_json(request):
        return response
    data = getattr(response, "data", None)
    if data is None:
        try:
            data = json.loads(response.content)
        except ValueError:
            return response
    text = HttpResponse(
        as_text(data), status=response.status_code, content_type="text/plain; charset=utf-8"
    )
    for name, value in response.items():
        if name.lower() not in ("content-type", "content-length"):
            text[name] = value
    return text


# the routes the AI SDK's transport calls, as the catch-all route sees them
_TRANSPORT_PATH = re.compile(r"ui/chat/.*/stream", re.DOTALL)


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
    response = JsonResponse({"detail": "Not found.", "code": "not_found"}, status=404)
    if _TRANSPORT_PATH.fullmatch(path):  # a reconnect with an id no chat can have
        return text_refusal(request, response)
    return response


class Conflict(APIException):
    """409: the chat is busy (a run works, or waits for a decision)."""

    status_code = status.HTTP_409_CONFLICT
    default_detail = "The chat is busy."
    default_code = "conflict"
