"""Request parsers: DRF's JSON and multipart parsers, strict about the charset, the
nesting and the size of a body."""

from __future__ import annotations

import io

from django.conf import settings as django_settings
from django.core.exceptions import RequestDataTooBig
from rest_framework.exceptions import ParseError, UnsupportedMediaType
from rest_framework.parsers import JSONParser, MultiPartParser

__all__ = ["StrictJSONParser", "StrictMultiPartParser"]

_UTF8 = ("utf-8", "utf8")


def _require_utf8(parser_context: dict | None) -> None:
    """A body whose ``Content-Type`` declares a charset other than UTF-8 is a 415 naming
    it: JSON is UTF-8 (RFC 8259), and Django would decode form fields in a charset it
    knows (``latin-1``) and ignore one it does not (``bogus``)."""
    request = (parser_context or {}).get("request")
    charset = request.content_params.get("charset") if request is not None else None
    if charset is not None and charset.lower() not in _UTF8:
        raise UnsupportedMediaType(
            request.content_type,
            detail=f"Unsupported charset {charset[:40]!r} in request: send the body as "
            "UTF-8 (charset=utf-8, or no charset).",
        )


class StrictJSONParser(JSONParser):
    """DRF's JSON parser, plus: a charset other than UTF-8 is a 415; absurd nesting is a
    400, not a 500; a body over ``DATA_UPLOAD_MAX_MEMORY_SIZE`` is a 413."""

    def parse(self, stream, media_type=None, parser_context=None):
        _require_utf8(parser_context)
        limit = django_settings.DATA_UPLOAD_MAX_MEMORY_SIZE
        if limit is not None and stream is not None:
            request = (parser_context or {}).get("request")
            length = request.META.get("CONTENT_LENGTH") if request is not None else None
            try:
                too_big = int(length or 0) > limit
            except ValueError:
                too_big = False
            body = stream.read(limit + 1)
            if too_big or len(body) > limit:
                raise RequestDataTooBig("request body over DATA_UPLOAD_MAX_MEMORY_SIZE")
            stream = io.BytesIO(body)
        try:
            return super().parse(stream, media_type, parser_context)
        except LookupError:
            raise ParseError("JSON parse error - unknown charset") from None
        except RecursionError:
            raise ParseError("JSON parse error - nested too deeply") from None


class StrictMultiPartParser(MultiPartParser):
    """DRF's multipart parser, plus: a charset other than UTF-8 is a 415."""

    def parse(self, stream, media_type=None, parser_context=None):
        _require_utf8(parser_context)
        return super().parse(stream, media_type, parser_context)
