"""Fields of what a chat says: encrypted at rest and redacted before storing, when asked.

``LLMCHAT["ENCRYPTION_KEYS"]`` (Fernet keys, through ``cryptography``'s ``MultiFernet``:
the first encrypts, every one decrypts) turns on encryption of the values of these fields
(``Message.content``, ``thinking_text`` and ``raw``, ``ToolCall.arguments``,
``Feedback.comment``, ``IdempotencyKey.response_body``: the last with ``redacted=False``,
it shows values already redacted when stored). The column
types stay as they were (the fields deconstruct as plain ``TextField`` / ``JSONField``, no
migration): a ciphertext is the text :data:`MARKER` + a Fernet token, stored in the text
column or as a JSON string in the JSON column. A value without the marker reads as it is,
so rows written before encryption was turned on (or after it was turned off) still read;
``manage.py llmchat_rotate_keys`` rewrites every row with the first key.

Every read decrypts: the ORM through the fields' ``from_db_value``, and the statements
that read these columns as plain rows (the transcript a run sends, compiled queries'
``rows()``) through :func:`django_llmchat.db.prepared.plain_rows`, which calls the same
:meth:`~ProtectedTextField.plain_column` of each field: a ciphertext never reaches the
model, a page or an export. Without keys a stored ciphertext is an ``ImproperlyConfigured``
naming the column, never sent on.

The cost: the database sees ciphertext, so it can neither search nor filter on these
columns (``content__icontains`` finds nothing, an exact match only on ``""``); JSON key
lookups on ``raw`` or ``arguments`` read ``NULL``. Empty values (``""``, ``{}``, ``[]``,
``None``) are stored as they are.

``LLMCHAT["REDACT_STORED"]`` runs ``LLMCHAT["REDACT"]`` over these values in
``pre_save`` (``save()`` and ``bulk_create()``; not ``bulk_update()`` or
``QuerySet.update()``, which store values as given).
"""

from __future__ import annotations

import json
import re
from functools import lru_cache
from typing import Any

from django.core.exceptions import ImproperlyConfigured
from django.db import models

from ..providers.redact import _setting as _redact_setting
from ..providers.redact import redact_values, stored_redactor

MARKER = "llmchat-fernet:"
"""What a stored ciphertext starts with."""

_TOKEN = re.compile(r"gAAAAA[A-Za-z0-9_=-]+")
"""A Fernet token (version byte 0x80, URL-safe base64)."""
_QUOTED = '"' + MARKER


def _setting(name: str) -> Any:
    return _redact_setting(name)


def configured_keys() -> tuple[str | bytes, ...]:
    keys = _setting("ENCRYPTION_KEYS") or ()
    if isinstance(keys, str | bytes):  # one key given as a string
        keys = (keys,)
    return tuple(keys)


@lru_cache(maxsize=8)
def _fernet(keys: tuple[str | bytes, ...]):
    try:
        from cryptography.fernet import Fernet, MultiFernet
    except ImportError:  # pragma: no cover - the [encryption] extra is not installed
        raise ImproperlyConfigured(
            "LLMCHAT['ENCRYPTION_KEYS'] needs the cryptography package: "
            "pip install 'django-llmchat[encryption]'"
        ) from None
    fernets = []
    for index, key in enumerate(keys):
        try:
            fernets.append(Fernet(key))
        except (TypeError, ValueError):
            # never the key itself: errors end up in logs
            raise ImproperlyConfigured(
                f"LLMCHAT['ENCRYPTION_KEYS'][{index}] is not a Fernet key (32 url-safe "
                "base64-encoded bytes: Fernet.generate_key())"
            ) from None
    return MultiFernet(fernets)


def fernet():
    """The ``MultiFernet`` of the configured keys, or ``None`` when there are none."""
    keys = configured_keys()
    return _fernet(keys) if keys else None


def is_ciphertext(value: Any) -> bool:
    return (
        isinstance(value, str)
        and value.startswith(MARKER)
        and _TOKEN.fullmatch(value, len(MARKER)) is not None
    )


def encrypt(text: str) -> str:
    """``text`` as stored: ciphertext with the first key, or ``text`` without keys."""
    f = fernet()
    if f is None or not text:
        return text
    return MARKER + f.encrypt(text.encode("utf-8")).decode("ascii")


def decrypt(value: str, where: str = "a stored value") -> str:
    """The plain text of a stored value (a value that is not ciphertext is returned)."""
    if not is_ciphertext(value):
        return value
    from cryptography.fernet import InvalidToken

    f = fernet()
    if f is None:
        raise ImproperlyConfigured(
            f"{where} is encrypted but LLMCHAT['ENCRYPTION_KEYS'] is empty: configure the "
            "key it was encrypted with"
        )
    try:
        return f.decrypt(value[len(MARKER) :].encode("ascii")).decode("utf-8")
    except InvalidToken:
        raise ImproperlyConfigured(
            f"{where} cannot be decrypted with any key of LLMCHAT['ENCRYPTION_KEYS'] (a key "
            "removed too early?)"
        ) from None


def rotate(value: Any) -> Any:
    """A stored value re-encrypted with the first key (plain text is encrypted)."""
    f = fernet()
    if f is None or not value or not isinstance(value, str):
        return value
    if is_ciphertext(value):
        return MARKER + f.rotate(value[len(MARKER) :].encode("ascii")).decode("ascii")
    return encrypt(value)


# -- redaction before storing ------------------------------------------------------------


def _chat_of(instance: Any) -> Any:
    # the chat the row belongs to (messages and tool calls both have one), when it is
    # loaded: no query for a hook's argument
    field = getattr(getattr(type(instance), "chat", None), "field", None)
    if field is not None and field.is_cached(instance):
        return instance.chat
    return None


def stored_field_name(field: models.Field, instance: Any) -> str:
    """The ``field`` a stored value is redacted as (see ``providers.redact.FIELDS``)."""
    from ..providers.redact import ROLE_FIELDS

    redact_as = getattr(field, "redact_as", None)
    if redact_as == "role":
        role = getattr(instance, "role", "")
        return ROLE_FIELDS.get(role, role or "user")
    return redact_as or field.name


class _ProtectedMixin:
    redact_as: str | None = None
    redacted: bool = True
    stored_as: str = ""
    """The plain field migrations record (the encryption is no part of the schema)."""
    stored_prefixes: tuple[str, ...] = (MARKER,)
    """What a ciphertext of the column starts with as the database returns it."""

    def __init__(
        self, *args: Any, redact_as: str | None = None, redacted: bool = True, **kwargs: Any
    ):
        self.redact_as = redact_as
        self.redacted = redacted
        super().__init__(*args, **kwargs)

    def plain_column(self, value: Any) -> Any:
        """``value`` as the database returns the column, decrypted: the same form (text
        for a text column, JSON text for a JSON column), a plain value as it is."""
        raise NotImplementedError

    def _where(self) -> str:
        return f"a stored {self.model.__name__}.{self.name}"

    def deconstruct(self):
        name, _path, args, kwargs = super().deconstruct()
        return name, self.stored_as, args, kwargs

    def _redacted(self, instance: Any, value: Any) -> Any:
        redact = stored_redactor() if value and self.redacted else None
        if redact is None:
            return value
        field, chat = stored_field_name(self, instance), _chat_of(instance)
        if field == "raw":
            # only the vendor's body: reasoning items replay verbatim, ids stay ids
            if not isinstance(value, dict) or not value.get("response"):
                return value
            return {**value, "response": redact_values(redact, value["response"], field, chat)}
        return redact_values(redact, value, field, chat)

    def pre_save(self, model_instance: Any, add: bool) -> Any:
        value = super().pre_save(model_instance, add)
        redacted = self._redacted(model_instance, value)
        if redacted is not value:
            setattr(model_instance, self.attname, redacted)
        return redacted


class ProtectedTextField(_ProtectedMixin, models.TextField):
    """A ``TextField`` stored encrypted with ``LLMCHAT["ENCRYPTION_KEYS"]``."""

    stored_as = "django.db.models.TextField"

    def plain_column(self, value: Any) -> Any:
        return decrypt(value, self._where()) if isinstance(value, str) else value

    def from_db_value(self, value: Any, expression: Any, connection: Any) -> Any:
        return self.plain_column(value)

    def get_prep_value(self, value: Any) -> Any:
        value = super().get_prep_value(value)
        return encrypt(value) if isinstance(value, str) else value


class ProtectedJSONField(_ProtectedMixin, models.JSONField):
    """A ``JSONField`` whose value is stored as an encrypted JSON string."""

    stored_as = "django.db.models.JSONField"
    # a JSON string as text (most backends), or the string itself (a backend that decodes)
    stored_prefixes = ('"' + MARKER, MARKER)

    def plain_column(self, value: Any) -> Any:
        if isinstance(value, str):
            if value.startswith(_QUOTED):
                inner = json.loads(value)
                if is_ciphertext(inner):
                    return decrypt(inner, self._where())
            elif is_ciphertext(value):
                return decrypt(value, self._where())
        return value

    def from_db_value(self, value: Any, expression: Any, connection: Any) -> Any:
        return super().from_db_value(self.plain_column(value), expression, connection)

    def get_prep_value(self, value: Any) -> Any:
        if value is None or value == {} or value == [] or fernet() is None:
            return super().get_prep_value(value)
        if hasattr(value, "resolve_expression"):
            return super().get_prep_value(value)
        text = json.dumps(value, cls=self.encoder, ensure_ascii=False, separators=(",", ":"))
        return encrypt(text)
