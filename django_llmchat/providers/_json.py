"""JSON decoding for the stream parsers: orjson when installed (several times faster on
the many small documents a stream carries), the standard library otherwise.

orjson is strict where vendors are sometimes not (``NaN``, lone surrogate escapes): a
document it refuses is decoded again with the standard library, whose error is the one
raised when both refuse.
"""

from __future__ import annotations

import json
from typing import Any

try:
    import orjson
except ImportError:  # pragma: no cover - orjson is a dependency, but stay usable without
    orjson = None


if orjson is not None:
    _orjson_loads = orjson.loads
    _orjson_error = orjson.JSONDecodeError

    def loads(data: str | bytes) -> Any:
        try:
            return _orjson_loads(data)
        except _orjson_error:
            return json.loads(data)

else:  # pragma: no cover
    loads = json.loads

__all__ = ["loads"]
