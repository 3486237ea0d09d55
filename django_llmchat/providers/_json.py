"""JSON for the wire: orjson when installed (several times faster on the many small
documents a stream carries, and on the request bodies), the standard library otherwise.

orjson is strict where vendors are sometimes not (``NaN``, lone surrogate escapes): a
document it refuses is decoded again with the standard library, whose error is the one
raised when both refuse. A request body orjson cannot encode (an integer beyond 64 bits,
a type only a custom encoder knows) is encoded by the standard library.
"""

from __future__ import annotations

import json
from typing import Any

try:
    import orjson
except ImportError:  # pragma: no cover - orjson is a dependency, but stay usable without
    orjson = None


def _std_dumps(value: Any) -> bytes:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


if orjson is not None:
    _orjson_loads = orjson.loads
    _orjson_dumps = orjson.dumps
    _orjson_error = orjson.JSONDecodeError
    _NON_STR_KEYS = orjson.OPT_NON_STR_KEYS

    def loads(data: str | bytes) -> Any:
        try:
            return _orjson_loads(data)
        except _orjson_error:
            return json.loads(data)

    def dumps(value: Any) -> bytes:
        """Compact UTF-8 JSON, as ``json.dumps(value, ensure_ascii=False,
        separators=(",", ":"))`` gives it."""
        try:
            return _orjson_dumps(value, option=_NON_STR_KEYS)
        except TypeError:
            return _std_dumps(value)

else:  # pragma: no cover
    loads = json.loads
    dumps = _std_dumps

__all__ = ["dumps", "loads"]
