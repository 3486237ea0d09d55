"""SQL compiled once per database, for the few statements on the reply hot path, and
the one module of the package that uses Django internals (``tests/test_django_internals.py``
checks each one on every supported Django version, and that no other module names one).

Building and compiling a Django query costs far more than running it (on a small
machine ~0.4 ms against ~0.05 ms for a one-row INSERT on SQLite). The classes here build
their query once per database with placeholder arguments, keep the SQL, and afterwards
only swap the real arguments into the parameter list:

- :class:`PreparedQuery`: a SELECT, rows returned as tuples (integer and aware datetime
  arguments), as the database returns them (``rows()``, the encrypted columns decrypted
  all the same) or as ``values_list()`` gives them (``values()``: each column through its
  field's converters, the encrypted ones decrypted);
- :class:`PreparedIn`: a SELECT filtered on a list of ids, compiled once per length of
  the list;
- :class:`PreparedInsert`: ``obj.save()`` of a new row, the same columns and values
  (fields' ``pre_save`` and ``get_db_prep_save``), primary key set from ``RETURNING``;
- :class:`PreparedUpdate`: ``Model.objects.filter(pk=pk).update(**constant_values)``;
- :func:`execute`: how each of them runs its SQL (on SQLite, straight on the sqlite3
  connection when nothing watches the statements);
- :func:`new_instance`: ``Model(**values)`` for the hot path's new rows, from a copy of a
  blank instance instead of Django's field-by-field constructor.

The SQL is Django's own, so table names, quoting and backend differences stay Django's
business. Where the shortcut cannot give exactly what the ORM gives (``pre_save`` or
``post_save`` receivers, a backend without ``INSERT ... RETURNING``, a field with its own
placeholder or an expression as value), the ORM does the work instead.

Besides the compiled SQL, the model-state helpers the rest of the package uses in place of
private attributes: :func:`is_new` and :func:`database_of` (``Model._state``),
:func:`mark_saved` (a row written without ``save()``) and :func:`known_relations` (rows
just written, as a prefetch cache: ``QuerySet._result_cache``, ``_prefetch_done``), and
:func:`annotation_names` (``Query.annotation_select``).
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import threading
import weakref
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from decimal import Decimal
from operator import attrgetter, itemgetter
from typing import Any

from django.db import NotSupportedError, connections, router
from django.db.backends.base.operations import BaseDatabaseOperations
from django.db.models import (
    AutoField,
    BigAutoField,
    BigIntegerField,
    BooleanField,
    CharField,
    DateTimeField,
    DecimalField,
    Field,
    IntegerField,
    JSONField,
    Model,
    PositiveBigIntegerField,
    PositiveIntegerField,
    PositiveSmallIntegerField,
    QuerySet,
    SmallAutoField,
    SmallIntegerField,
    TextField,
    signals,
)
from django.db.models.base import ModelState
from django.db.models.fields.related_descriptors import ForeignKeyDeferredAttribute
from django.db.models.query_utils import DeferredAttribute
from django.db.models.sql import InsertQuery, UpdateQuery

from ..providers._json import loads

try:
    import orjson as _orjson
except ImportError:  # pragma: no cover - a dependency; the standard library otherwise
    _orjson = None
_NON_STR_KEYS = getattr(_orjson, "OPT_NON_STR_KEYS", 0)

__all__ = [
    "Arg",
    "INT_ARG",
    "annotation_names",
    "DeferredAttribute",  # the base of a field's descriptor_class (Django's own default)
    "PreparedIn",
    "PreparedInsert",
    "PreparedQuery",
    "PreparedUpdate",
    "RowsJustWritten",
    "database_of",
    "execute",
    "forget_rows",
    "is_new",
    "json_value",
    "known_relations",
    "known_rows",
    "mark_saved",
    "mark_unsaved",
    "new_instance",
    "plain_rows",
    "protected_columns",
    "row_values",
]

# Placeholders that cannot collide with real arguments.
INT_ARG = -7_381_923_481_113


class PreparedQuery:
    """``PreparedQuery(lambda chat_id: Message.objects.filter(chat_id=chat_id)...)``, then
    ``query.rows(chat.pk)``: the queryset's rows as tuples, as the database returns them
    (an encrypted field's column decrypted: :func:`plain_rows`);
    with a ``values_list()`` queryset, ``query.values(chat.pk)``: its rows as it gives
    them."""

    def __init__(self, build: Callable[..., QuerySet], placeholders: Sequence[Any] = (INT_ARG,)):
        self.build = build
        self.placeholders = tuple(placeholders)
        self._compiled: dict[str, tuple[str, list[Any], list[tuple[int, int, Any]]]] = {}
        self._selected: dict[str, list[tuple[int, Any]]] = {}
        self._plain: dict[str, tuple] = {}  # the encrypted columns, for rows()
        self._converters: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
        self._lock = threading.Lock()

    def _as_sql(self, using: str) -> tuple[str, Sequence[Any]]:
        """The SQL and parameters Django compiles for the query built with placeholders
        (and, for :meth:`values`, the selected columns that have converters)."""
        compiler = self.build(*self.placeholders).query.get_compiler(using)
        compiled = compiler.as_sql()
        selected = [expression for expression, _, _ in compiler.select[: compiler.col_count]]
        self._selected[using] = [
            (index, expression)
            for index, (_, expression) in compiler.get_converters(selected).items()
        ]
        self._plain[using] = protected_columns(
            [getattr(expression, "target", None) for expression in selected]
        )
        return compiled

    def _compile(self, using: str) -> tuple[str, list[Any], list[tuple[int, int, Any]]]:
        found = self._compiled.get(using)
        if found is None:
            with self._lock:
                sql, params = self._as_sql(using)
                # a backend may wrap values (psycopg's Int4 for an integer column) or
                # adapt them (SQLite's text for a datetime)
                forms = [(self._adapt(p, using), n) for n, p in enumerate(self.placeholders)]
                slots = [
                    (index, n)
                    for index, value in enumerate(params)
                    for form, n in forms
                    if value is form
                    or (isinstance(value, type(form)) and not isinstance(value, bool))
                    and value == form
                ]
                if len({arg for _, arg in slots}) != len(self.placeholders):
                    raise ValueError("a placeholder did not reach the compiled parameters")
                # per slot, the compiled parameter's type where it is an integer type (a
                # backend's own, as psycopg's Int4): an argument of another type is made
                # one; else None
                slots = [
                    (index, n, kind if issubclass(kind := type(params[index]), int) else None)
                    for index, n in slots
                ]
                found = self._compiled[using] = (sql, list(params), slots)
        return found

    def _bound(self, args: Sequence[Any], using: str) -> tuple[str, list[Any]]:
        """The compiled SQL with ``args`` in the placeholders' places."""
        sql, params, slots = self._compile(using)
        params = list(params)
        for index, arg, wrapper in slots:
            value = args[arg]
            if isinstance(value, datetime):
                value = self._adapt(value, using)
            if wrapper is not None and value is not None and wrapper is not type(value):
                value = wrapper(value)
            params[index] = value
        return sql, params

    @staticmethod
    def _adapt(value: Any, using: str) -> Any:
        """A datetime argument as the backend's ``DateTimeField`` takes it (aware datetimes
        only, as stored with ``USE_TZ``)."""
        if isinstance(value, datetime):
            return connections[using].ops.adapt_datetimefield_value(value)
        return value

    def model(self) -> type:
        if not hasattr(self, "_model"):
            self._model = self.build(*self.placeholders).model
        return self._model

    def rows(self, *args: Any, using: str | None = None) -> list[tuple]:
        using = using or router.db_for_read(self.model())
        rows = self._stored(args, using)  # compiled: the encrypted columns are known
        return plain_rows(rows, self._plain[using])

    def _stored(self, args: Sequence[Any], using: str) -> list[tuple]:
        """The rows as the database holds them (ciphertext and all)."""
        sql, params = self._bound(args, using)
        return execute(connections[using], sql, params, _FETCHALL)

    def values(self, *args: Any, using: str | None = None) -> list[tuple]:
        """The rows of the ``values_list()`` queryset as it gives them: each column
        through the converters Django applies (its backend's, its field's
        ``from_db_value``). An argument of another type than its placeholder (a UUID for
        an integer), or an integer past 64 bits (which the ORM knows matches no row), runs
        the queryset itself, compiled for that call."""
        if not all(map(_fits, args, self.placeholders)):
            return list(self.build(*args).using(using) if using else self.build(*args))
        using = using or router.db_for_read(self.model())
        rows = self._stored(args, using)  # the fields' converters decrypt
        converters = self._converters_for(using)
        if not converters or not rows:
            return rows
        connection = connections[using]
        converted = []
        for row in rows:
            row = list(row)
            for index, convs, expression in converters:
                value = row[index]
                for converter in convs:
                    value = converter(value, expression, connection)
                row[index] = value
            converted.append(tuple(row))
        return converted

    def _converters_for(self, using: str) -> list[tuple[int, list, Any]]:
        """Per converted column of this database's connection (the one of this thread):
        ``(index, converters, expression)``, as the compiler's ``get_converters`` gives
        them."""
        connection = connections[using]
        found = self._converters.get(connection)
        if found is None:
            self._compile(using)
            found = [
                (
                    index,
                    connection.ops.get_db_converters(expression)
                    + expression.get_db_converters(connection),
                    expression,
                )
                for index, expression in self._selected[using]
            ]
            self._converters[connection] = found
        return found


# -- encrypted columns of rows read without the ORM ------------------------------------


def protected_columns(fields: Sequence[Any]) -> tuple[tuple[int, tuple[str, ...], Any], ...]:
    """Of the fields of a statement's columns (``None`` for a column that is no field),
    the encrypted ones (:mod:`django_llmchat.models.protected`) as :func:`plain_rows`
    takes them: ``(index, prefixes, plain)``."""
    return tuple(
        (index, field.stored_prefixes, field.plain_column)
        for index, field in enumerate(fields)
        if hasattr(field, "plain_column")
    )


def plain_rows(rows: list, columns: tuple[tuple[int, tuple[str, ...], Any], ...]) -> list:
    """``rows`` (tuples as a cursor returns them) with the values of ``columns``
    (:func:`protected_columns`) decrypted, each as its field's
    ``plain_column`` gives it (the form the database returns).
    A value that is no ciphertext costs one ``startswith``; rows without one are the same
    tuples."""
    if not columns or not rows:
        return rows
    out = rows
    for n, row in enumerate(rows):
        changed = None
        for index, prefixes, plain in columns:
            value = row[index]
            if value.__class__ is str and value.startswith(prefixes):
                if changed is None:
                    changed = list(row)
                changed[index] = plain(value)
        if changed is not None:
            if out is rows:
                out = list(rows)
            out[n] = tuple(changed)
    return out


def _fits(arg: Any, placeholder: Any) -> bool:
    """Whether ``arg`` can take ``placeholder``'s place in the compiled parameters."""
    if arg is None:
        return True
    if type(arg) is not type(placeholder):
        return False
    return not isinstance(arg, int) or -(2**63) <= arg < 2**63


class PreparedIn:
    """``PreparedIn(lambda ids: Usage.objects.filter(message_id__in=ids).values_list(...))``,
    then ``query.values(ids)``: the rows of the queryset built for ``ids`` (integers) as
    ``values_list()`` gives them, its SQL compiled once per number of ids (up to
    ``lengths`` of them; longer lists, and empty ones, go through the ORM)."""

    def __init__(self, build: Callable[[Sequence[Any]], QuerySet], lengths: int = 256):
        self.build = build
        self.lengths = lengths
        self._queries: dict[int, PreparedQuery] = {}

    def _query(self, length: int) -> PreparedQuery:
        query = self._queries.get(length)
        if query is None:
            placeholders = [INT_ARG - n for n in range(length)]  # distinct: one slot each
            query = self._queries.setdefault(
                length, PreparedQuery(lambda *ids: self.build(ids), placeholders)
            )
        return query

    def values(self, ids: Sequence[int], using: str | None = None) -> list[tuple]:
        if not ids or len(ids) > self.lengths:
            queryset = self.build(ids)
            return list(queryset.using(using) if using else queryset)
        return self._query(len(ids)).values(*ids, using=using)


class PreparedInsert:
    """``PreparedInsert(Message).save(message)``: what ``message.save()`` does for a new row
    (one INSERT, primary key set), without compiling the INSERT each time."""

    def __init__(self, model: type[Model]):
        self.model = model
        meta = model._meta
        self.fields = [
            f for f in meta.local_concrete_fields if not f.generated and f is not meta.auto_field
        ]
        self.returning = meta.db_returning_fields
        self._compiled: dict[str, tuple[str, list[tuple]] | None] = {}
        self._layouts: dict[str, tuple] = {}  # insert()'s, per database (_layout)
        self._plans: dict[str, tuple] = {}  # row()'s, per database
        self._lock = threading.Lock()

    def _plan(self, connection) -> list[tuple]:
        """Per field: ``(field, reads_attribute, unchanged_types, null_param, prepare)``.

        ``reads_attribute``: ``pre_save`` only reads the attribute. ``unchanged_types``:
        value types ``get_db_prep_save`` returns as they are on this backend (text always;
        integers and booleans where the backend does not adapt them). ``null_param``: what
        ``get_db_prep_save(None)`` gives, computed once. ``prepare``: ``None``, or for a
        field whose preparation is Django's own (:func:`_direct_preparation`),
        ``prepare(value)``: the backend's adaptation of a value that needs nothing else
        first, else :data:`_UNKNOWN` (``get_db_prep_save`` then)."""
        ops = type(connection.ops)
        plain_ints = (
            ops.adapt_integerfield_value is BaseDatabaseOperations.adapt_integerfield_value
            and ops.validate_autopk_value is BaseDatabaseOperations.validate_autopk_value
        )
        plan = []
        for f in self.fields:
            target = f.target_field if f.is_relation else f
            kind = type(target)
            if kind in (CharField, TextField) and not f.is_relation:
                unchanged: tuple[type, ...] = (str,)
            elif plain_ints and kind in _INTEGER_FIELDS:
                unchanged = (int,)
            elif kind is BooleanField and not f.is_relation:
                unchanged = (bool,)
            else:
                unchanged = ()
            try:
                null_param = f.get_db_prep_save(None, connection)
            except Exception:  # a field that refuses None computes it each time (and fails)
                null_param = _UNKNOWN
            plan.append(
                (
                    f,
                    type(f).pre_save is Field.pre_save,
                    unchanged,
                    null_param,
                    _direct_preparation(f, connection),
                )
            )
        return plan

    def _compile(self, using: str) -> tuple[str, list[tuple]] | None:
        """The INSERT for database ``using`` and its plan, or ``None`` where only the ORM
        will do."""
        try:
            return self._compiled[using]
        except KeyError:
            pass
        with self._lock:
            connection = connections[using]
            found = None
            plain = not any(hasattr(f, "get_placeholder") for f in self.fields)
            if plain and connection.features.can_return_columns_from_insert:
                query = InsertQuery(self.model)
                query.insert_values(self.fields, [self.model()])
                compiler = query.get_compiler(using)
                compiler.returning_fields = self.returning
                [(sql, _params)] = compiler.as_sql()
                # not with backend-specific RETURNING parameters (Oracle)
                if not getattr(compiler, "returning_params", ()) and sql.count("%s") == len(
                    self.fields
                ):
                    found = (sql, self._plan(connection))
                    self._layouts[using] = self._layout(found[1])
            self._compiled[using] = found
        return found

    @staticmethod
    def _layout(plan: list[tuple]) -> tuple[list[tuple], list[tuple], Callable[[list], list]]:
        """How :meth:`insert` reads the plan's fields: ``(rest, groups, order)``.

        ``groups``: the fields whose ``pre_save`` only reads the attribute, no relation,
        ``None`` stored as ``NULL``, by the value types they take unchanged: ``(read,
        types, entries)``, ``read(obj)`` their values in one call, passed as they are
        when each is of ``types`` (``None`` included). ``rest``: the others, one by one,
        first (as :meth:`row` does them). ``order(values)``: the values, the rest's then
        the groups', in the INSERT's column order."""
        by_types: dict[tuple, list[tuple[int, tuple]]] = {}
        rest = []
        for index, entry in enumerate(plan):
            field, reads, unchanged, null_param, _ = entry
            if reads and unchanged and not field.is_relation and null_param is None:
                by_types.setdefault(unchanged, []).append((index, entry))
            else:
                rest.append((index, entry))
        groups = [
            (
                attrgetter(*(entry[0].attname for _, entry in members)),
                frozenset((*unchanged, type(None))),
                [entry for _, entry in members],
            )
            for unchanged, members in by_types.items()
        ]
        positions = [index for index, _ in rest] + [
            index for members in by_types.values() for index, _ in members
        ]
        if positions == sorted(positions):
            return [entry for _, entry in rest], groups, list
        where = [0] * len(positions)
        for at, index in enumerate(positions):
            where[index] = at
        take = itemgetter(*where)
        return [entry for _, entry in rest], groups, lambda values: list(take(values))

    def save(self, obj: Model, using: str | None = None) -> None:
        if not self.insert(obj, using):
            obj.save(using=using)

    def insert(self, obj: Model, using: str | None = None) -> bool:
        """What :meth:`save` does, without the fallback: ``False`` (nothing written) where
        only the ORM will do (a save receiver, an expression value, a backend without
        ``RETURNING``, a related object not saved yet), so the caller saves."""
        model = self.model
        if type(obj) is not model or obj.pk is not None:
            raise ValueError(f"PreparedInsert({model.__name__}) saves new {model.__name__} rows")
        using = using or router.db_for_write(model, instance=obj)
        compiled = self._compile(using)
        if (
            compiled is None
            or _listened(signals.pre_save, model)
            or _listened(signals.post_save, model)
        ):
            return False
        sql = compiled[0]
        rest, groups, order = self._layouts[using]
        connection = connections[using]
        values = []
        for entry in rest:
            field, reads_attribute, unchanged, _, prepare = entry
            value = getattr(obj, field.attname) if reads_attribute else field.pre_save(obj, True)
            if type(value) in unchanged:
                values.append(value)
            elif prepare is not None and (prepared := prepare(value)) is not _UNKNOWN:
                values.append(prepared)
            else:  # None (a relation's), an expression, a value to prepare
                value = _param(entry, value, obj, connection)
                if value is _UNKNOWN:
                    return False
                values.append(value)
        for read, types, entries in groups:
            got = read(obj)
            if len(entries) == 1:
                got = (got,)
            if types.issuperset(map(type, got)):
                values.extend(got)
                continue
            for entry, value in zip(entries, got, strict=True):
                value = _param(entry, value, obj, connection)
                if value is _UNKNOWN:
                    return False
                values.append(value)
        row = execute(connection, sql, order(values), _FETCHONE)
        for field, value in zip(self.returning, row, strict=True):
            for converter in field.get_db_converters(connection):
                value = converter(value, None, connection)
            setattr(obj, field.attname, value)
        mark_saved(obj, using)
        return True

    def row(self, obj: Model, using: str) -> str:
        """``obj``'s new row as a JSON object of its column values, prepared as
        :meth:`save` prepares them (each field's ``pre_save``, then ``get_db_prep_save``:
        an encrypted field's ciphertext, a redacted text; a JSON field's value as JSON),
        for a database function to insert (``jsonb_populate_record``). The primary key is
        left out: the function takes it from the table's sequence.

        Written by orjson where it is installed (a JSON field with an encoder of its own:
        as that encoder writes it, inserted whole), else by the standard library; a row
        orjson refuses (an integer past 64 bits, a type only a custom encoder knows) is
        written by the standard library, as ever."""
        connection = connections[using]
        found = self._plans.get(using)
        if found is None:
            found = self._plans[using] = self._row_plan(connection)
        plan, groups, rest = found
        if _orjson is not None:
            text = self._orjson_row(obj, groups, rest, connection)
            if text is not None:
                return text
        return self._json_row(obj, plan, connection)

    def _row_plan(self, connection: Any) -> tuple[list[tuple], list[tuple], list[tuple]]:
        """Per field ``(field, reads_attribute, unchanged_types, column, is_json,
        no_encoder)``; and for the orjson row, the fields whose value is read as it is
        grouped by the types they take unchanged (``(columns, read, types)``: ``read(obj)``
        their values in one call), the rest apart."""
        plan = [
            (
                f,
                reads,
                # an integer's JSON is its digits, whatever the backend wraps it in
                (int,) if _integer_column(f) else unchanged,
                f.column,
                isinstance(f, JSONField),
                # orjson writes the prepared value, as json.dumps without an encoder does
                isinstance(f, JSONField) and f.encoder is None,
            )
            for f, reads, unchanged, _, _ in self._plan(connection)
        ]
        by_types: dict[tuple, list[tuple]] = {}
        rest = []
        for entry in plan:
            field, reads, unchanged, _column, is_json, _ = entry
            if reads and unchanged and not is_json:
                by_types.setdefault(unchanged, []).append(entry)
            else:
                rest.append(entry)
        groups = [
            (
                tuple(column for _, _, _, column, _, _ in entries),
                attrgetter(*(field.attname for field, *_ in entries)),
                frozenset((*unchanged, type(None))),
                entries,
            )
            for unchanged, entries in by_types.items()
        ]
        return plan, groups, rest

    @staticmethod
    def _orjson_row(
        obj: Model, groups: list[tuple], rest: list[tuple], connection: Any
    ) -> str | None:
        values: dict[str, Any] = {}
        # the fields a pre_save or a preparation writes, first (as a save does them)
        for field, reads_attribute, unchanged, column, is_json, no_encoder in rest:
            value = getattr(obj, field.attname) if reads_attribute else field.pre_save(obj, True)
            if value is None or type(value) in unchanged:
                values[column] = value
            elif is_json:  # the prepared value (an encrypted one: its ciphertext, a string)
                value = field.get_prep_value(value)
                values[column] = (
                    value
                    if no_encoder
                    else _orjson.Fragment(json.dumps(value, cls=field.encoder, ensure_ascii=False))
                )
            else:
                values[column] = field.get_db_prep_save(value, connection)
        # the others read as they are, when each is of a type it takes unchanged
        for columns, read, types, entries in groups:
            got = read(obj)
            if len(columns) == 1:
                got = (got,)
            if types.issuperset(map(type, got)):
                values.update(zip(columns, got, strict=True))
                continue
            for (field, _, unchanged, column, _, _), value in zip(entries, got, strict=True):
                if value is None or type(value) in unchanged:
                    values[column] = value
                else:
                    values[column] = field.get_db_prep_save(value, connection)
        try:
            return _orjson.dumps(values, default=_json_default, option=_NON_STR_KEYS).decode()
        except TypeError:
            return None

    @staticmethod
    def _json_row(obj: Model, plan: list[tuple], connection: Any) -> str:
        values: dict[str, Any] = {}
        nested = []  # a JSON field's value, as its own encoder writes it
        for field, reads_attribute, unchanged, column, is_json, _ in plan:
            value = getattr(obj, field.attname) if reads_attribute else field.pre_save(obj, True)
            if value is None:
                values[column] = None
            elif is_json:  # the value itself (an encrypted one: its ciphertext, a JSON string)
                value = json.dumps(
                    field.get_prep_value(value), cls=field.encoder, ensure_ascii=False
                )
                nested.append(json.dumps(column) + ":" + value)
            elif type(value) in unchanged:
                values[column] = value
            else:
                values[column] = field.get_db_prep_save(value, connection)
        text = json.dumps(values, ensure_ascii=False, default=_json_default)
        if not nested:
            return text
        return text[:-1] + ("," if values else "") + ",".join(nested) + "}"


def _param(entry: tuple, value: Any, obj: Model, connection: Any) -> Any:
    """The parameter of field ``entry`` (of :meth:`PreparedInsert._plan`) for ``value``,
    as ``get_db_prep_save`` gives it; :data:`_UNKNOWN` where only the ORM will do (an
    expression, a related object not saved yet)."""
    field, _, unchanged, null_param, prepare = entry
    if value is None and null_param is not _UNKNOWN:
        if field.is_relation and field.get_cached_value(obj, None) is not None:
            return _UNKNOWN  # a related object not saved yet: the ORM says so
        return null_param
    if type(value) in unchanged:
        return value
    if prepare is not None and (prepared := prepare(value)) is not _UNKNOWN:
        return prepared
    if hasattr(value, "resolve_expression"):
        return _UNKNOWN
    return field.get_db_prep_save(value, connection)


def _direct_preparation(field: Field, connection: Any) -> Callable[[Any], Any] | None:
    """For a field whose class prepares values as Django's ``DateTimeField``,
    ``JSONField`` or ``DecimalField`` does (none of the preparation methods its own),
    ``prepare(value)``: ``get_db_prep_save(value)`` where that is the backend's adaptation
    alone (an aware datetime; a dict or a list; a finite Decimal), else
    :data:`_UNKNOWN`."""
    kind = type(field)
    if all(
        getattr(kind, name) is getattr(DateTimeField, name)
        for name in ("get_db_prep_save", "get_db_prep_value", "get_prep_value", "to_python")
    ):
        ops = connection.ops
        adapt = ops.adapt_datetimefield_value
        if getattr(type(ops), "adapt_datetimefield_value", None) is _SQLITE_ADAPT_DATETIME:
            # SQLite's own adaptation: the naive time in the connection's zone, as text.
            # The connection's zone is UTC when USE_TZ is on and its TIME_ZONE is unset
            # (None when USE_TZ is off); a UTC value's text is then its own, no zone.
            owner = ops.connection

            def prepare(value: Any) -> Any:
                if type(value) is datetime and value.tzinfo is UTC and owner.timezone is UTC:
                    return str(value.replace(tzinfo=None))
                if type(value) is datetime and value.utcoffset() is not None:
                    return adapt(value)
                return _UNKNOWN

            return prepare

        def prepare(value: Any) -> Any:
            # a naive one is warned about and made aware first, when USE_TZ
            if type(value) is datetime and value.utcoffset() is not None:
                return adapt(value)
            return _UNKNOWN

        return prepare
    if all(
        getattr(kind, name) is getattr(JSONField, name)
        for name in ("get_db_prep_save", "get_db_prep_value", "get_prep_value")
    ):
        adapt_json, encoder = connection.ops.adapt_json_value, field.encoder

        def prepare(value: Any) -> Any:
            return adapt_json(value, encoder) if type(value) in (dict, list) else _UNKNOWN

        return prepare
    if all(
        getattr(kind, name) is getattr(DecimalField, name)
        for name in ("get_db_prep_save", "get_db_prep_value", "get_prep_value", "to_python")
    ):
        adapt_decimal = connection.ops.adapt_decimalfield_value
        digits, places = field.max_digits, field.decimal_places

        def prepare(value: Any) -> Any:
            # a finite Decimal is its own to_python()
            if type(value) is Decimal and value.is_finite():
                return adapt_decimal(value, digits, places)
            return _UNKNOWN

        return prepare
    return None


def _sqlite_adapt_datetime() -> Any:
    try:
        from django.db.backends.sqlite3.operations import DatabaseOperations
    except ImportError:  # pragma: no cover - a Python built without sqlite3
        return None
    return DatabaseOperations.adapt_datetimefield_value


_SQLITE_ADAPT_DATETIME = _sqlite_adapt_datetime()


def _listened(signal: signals.ModelSignal, sender: type[Model]) -> bool:
    """``signal.has_listeners(sender)``, without asking when nothing is connected to the
    signal at all."""
    return bool(signal.receivers) and signal.has_listeners(sender)


def _integer_column(field: Field) -> bool:
    """Whether ``field``'s column holds an integer (a foreign key: its target's)."""
    return type(field.target_field if field.is_relation else field) in _INTEGER_FIELDS


def _json_default(value: Any) -> Any:
    """What ``json`` does not write itself, as :func:`_json_scalar` writes it."""
    return _json_scalar(value)


def _json_scalar(value: Any) -> Any:
    """A prepared column value as JSON takes it (the column's text form)."""
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, bytes | bytearray | memoryview):
        return "\\x" + bytes(value).hex()
    if value is None or isinstance(value, str | int | float | bool):
        return value
    return str(value)  # a Decimal, a UUID


def row_values(obj: Model) -> dict[str, Any]:
    """``obj``'s columns as they are, primary key included (JSON-ready: the text form of
    a date or a decimal): a row a database function writes over its stored one
    (``jsonb_populate_record``)."""
    return {
        field.column: _json_scalar(getattr(obj, field.attname))
        for field in obj._meta.concrete_fields
    }


_UNKNOWN = object()
_INTEGER_FIELDS = (
    AutoField,
    BigAutoField,
    SmallAutoField,
    IntegerField,
    BigIntegerField,
    SmallIntegerField,
    PositiveIntegerField,
    PositiveBigIntegerField,
    PositiveSmallIntegerField,
)


_INSERTS: dict[type, PreparedInsert] = {}  # insert_new's, per model


def insert_new(obj: Model, args: tuple, kwargs: dict) -> bool:
    """Whether a model's ``save(*args, **kwargs)`` of a new row was done here, by its
    compiled INSERT (:meth:`PreparedInsert.insert`): not with other arguments than
    ``using``/``force_insert``, a primary key given, a parent model (multi-table
    inheritance), or where ``insert()`` leaves it to the ORM; then the caller saves."""
    if args or set(kwargs) - {"force_insert", "using"} or obj.pk is not None:
        return False
    model = type(obj)
    if model._meta.parents:
        return False
    inserter = _INSERTS.get(model)
    if inserter is None:
        inserter = _INSERTS.setdefault(model, PreparedInsert(model))
    return inserter.insert(obj, kwargs.get("using"))


class Arg:
    """A value of a :class:`PreparedUpdate` given to each ``run()`` (by keyword) instead
    of fixed: ``Arg(int)`` for integers and foreign keys, ``Arg(str)`` for text,
    ``Arg(Decimal)`` for decimals (``None`` passes for each)."""

    _count = 0

    def __init__(self, kind: type = int):
        if kind not in (int, str, Decimal):
            raise ValueError("Arg takes int, str or Decimal values")
        Arg._count += 1
        n = Arg._count
        # a value no real argument has, recognisable in the compiled parameters
        if kind is int:
            self.placeholder: Any = INT_ARG - n
        elif kind is str:
            self.placeholder = f"\x00llmchat-arg-{n}"
        else:
            self.placeholder = Decimal(INT_ARG - n) / 1000


class PreparedUpdate(PreparedQuery):
    """``PreparedUpdate(Chat, status="idle", updated_at=Now()).run(pk)``: the UPDATE of
    ``Chat.objects.filter(pk=pk).update(status="idle", updated_at=Now())``, compiled once
    per database. Values are fixed, or :class:`Arg` markers given to ``run()`` by
    keyword; ``where`` (a callable of the ``run()`` positional arguments returning a
    queryset, ``placeholders`` their stand-ins) replaces the filter on the primary key.

    ``returning``: columns of the updated row that :meth:`returned` reads back, as the
    ``UPDATE`` left them (``RETURNING``: SQLite 3.35 and later, PostgreSQL;
    :func:`returns_updated_rows` says whether a database can)."""

    def __init__(
        self,
        model: type[Model],
        *,
        where: Callable[..., QuerySet] | None = None,
        placeholders: Sequence[Any] = (INT_ARG,),
        returning: Sequence[str] = (),
        **values: Any,
    ):
        self.returning = tuple(returning)
        self.arg_names = [name for name, value in values.items() if isinstance(value, Arg)]
        self._arg_set = frozenset(self.arg_names)
        self.where_count = len(placeholders)
        super().__init__(
            where or (lambda pk: model._base_manager.filter(pk=pk)),
            (*placeholders, *(values[name].placeholder for name in self.arg_names)),
        )
        self.values = {
            name: value.placeholder if isinstance(value, Arg) else value
            for name, value in values.items()
        }
        self._model = model

    def _as_sql(self, using: str) -> tuple[str, Sequence[Any]]:
        query = self.build(*self.placeholders[: self.where_count]).query.chain(UpdateQuery)
        query.add_update_values(self.values)
        if query.related_updates:
            raise ValueError("PreparedUpdate updates the model's own table only")
        sql, params = query.get_compiler(using).as_sql()
        if self.returning:
            connection = connections[using]
            if not returns_updated_rows(connection):
                raise NotSupportedError(
                    f"{connection.display_name} {connection.vendor!r} cannot return the rows "
                    "an UPDATE changed"
                )
            quote = connection.ops.quote_name
            columns = [self._model._meta.get_field(name).column for name in self.returning]
            sql += " RETURNING " + ", ".join(quote(column) for column in columns)
        return sql, params

    def run(self, *where: Any, using: str | None = None, **args: Any) -> int:
        """Run the UPDATE for row ``pk`` (or the ``where`` arguments); returns the number
        of rows updated."""
        return self._execute("run", where, args, using, _ROWCOUNT)

    def returned(self, *where: Any, using: str | None = None, **args: Any) -> tuple | None:
        """Run the UPDATE (as :meth:`run`); the ``returning`` columns of the row it
        updated, as the database gives them, or ``None`` when it updated none."""
        if not self.returning:
            raise TypeError("returned() needs the columns to return (returning=...)")
        return self._execute("returned", where, args, using, _FETCHONE)

    def _execute(self, verb: str, where: tuple, args: dict, using: str | None, result) -> Any:
        if len(where) != self.where_count or args.keys() != self._arg_set:
            raise TypeError(
                f"{verb}() takes {self.where_count} positional arguments and the keywords "
                f"{', '.join(self.arg_names) or '(none)'}"
            )
        using = using or router.db_for_write(self.model())
        sql, params = self._bound((*where, *(args[name] for name in self.arg_names)), using)
        return execute(connections[using], sql, params, result)


def returns_updated_rows(connection: Any) -> bool:
    """Whether ``connection``'s database gives back the rows an ``UPDATE`` changed
    (``UPDATE ... RETURNING``): PostgreSQL, SQLite from 3.35."""
    return connection.vendor in ("postgresql", "sqlite") and bool(
        connection.features.can_return_columns_from_insert
    )


# -- running a compiled statement ------------------------------------------------------


def _fetchall(cursor: Any) -> list[tuple]:
    return cursor.fetchall()


def _fetchone(cursor: Any) -> tuple | None:
    return cursor.fetchone()


def _rowcount(cursor: Any) -> int:
    return cursor.rowcount


_FETCHALL, _FETCHONE, _ROWCOUNT = _fetchall, _fetchone, _rowcount
_QMARK = re.compile(r"(?<!%)%s")
_QMARK_SQL: dict[str, str] = {}  # Django's "%s" SQL as sqlite3 takes it ("?")


def execute(connection: Any, sql: str, params: Sequence[Any], result: Callable[[Any], Any]) -> Any:
    """Run ``sql`` (Django's form: ``%s`` placeholders) with ``params`` on ``connection``
    and return ``result(cursor)`` (its rows, one row, its row count).

    - SQLite, when nothing watches the connection's statements: straight on the sqlite3
      connection Django opened, its ``%s`` turned into ``?`` once per SQL text: what
      Django's cursor does, without building a cursor wrapper and converting the query on
      each run (a third to a half of a small statement's time). The statement runs
      through Django's cursor instead when something would see it there: an
      ``execute_wrapper``, logged queries (``DEBUG``, ``assertNumQueries``), a connection
      not open yet or due its health check.
    - PostgreSQL with psycopg 3 and Django's own client-binding cursor (the default):
      through Django's cursor wrapper as ever (its execute wrappers, logged queries,
      anything hooked on ``CursorWrapper`` see the statement), on a psycopg cursor that
      binds the values on the server: the SQL goes as ``$1, $2...`` with the values
      beside it, where the client-binding cursor quotes every value into the text the
      server then lexes again (a few per cent of a reply's CPU with the run functions'
      JSON rows). Never as a named prepared statement, so PgBouncer's transaction mode
      takes it. Not when the connection's cursors are another class than Django's (an
      instrumentation's, or ``server_side_binding``'s own), nor when its timestamps read
      in another zone than Django's: Django's cursor then.

    Everything Django's cursor adds is kept: its errors (``django.db.IntegrityError`` and
    the rest, with ``errors_occurred`` set as Django sets it), the refusal of a statement
    in a broken transaction or from an event loop's thread."""
    raw = connection.connection
    if (
        raw is not None
        and connection.vendor == "sqlite"
        and not connection.execute_wrappers
        and not connection.queries_logged
        and (connection.health_check_done or not connection.health_check_enabled)
        and not _in_event_loop()
    ):
        query = _QMARK_SQL.get(sql)
        if query is None:
            query = _QMARK_SQL.setdefault(sql, _QMARK.sub("?", sql).replace("%%", "%"))
        connection.validate_no_broken_transaction()
        with connection.wrap_database_errors:
            cursor = raw.cursor()
            try:
                cursor.execute(query, params)
                return result(cursor)
            finally:
                cursor.close()
    with _cursor(connection, raw) as cursor:
        cursor.execute(sql, params)
        return result(cursor)


def _cursor(connection: Any, raw: Any) -> Any:
    """Django's cursor of ``connection`` (``connection.cursor()``), on PostgreSQL a wrapper
    of the same kind around a server-binding psycopg cursor where :func:`execute` says."""
    if (
        raw is None
        or connection.vendor != "postgresql"
        or not (connection.health_check_done or not connection.health_check_enabled)
        or _in_event_loop()
    ):
        return connection.cursor()
    unprepared = _unprepared_cursor_class(raw, connection)
    if unprepared is None:
        return connection.cursor()
    connection.validate_thread_sharing()
    cursor = unprepared(raw)
    if connection.queries_logged:
        return connection.make_debug_cursor(cursor)
    return connection.make_cursor(cursor)


_UNPREPARED: list = []  # the class, once made: psycopg is imported only on PostgreSQL


def _unprepared_cursor_class(raw: Any, connection: Any) -> type | None:
    """A cursor class binding on the server that never prepares a named statement, where
    ``raw`` is a psycopg 3 connection making Django's client-binding cursors and reading
    timestamps in Django's time zone; else ``None``."""
    try:
        import psycopg
        from django.db.backends.postgresql import base as postgresql
    except ImportError:  # psycopg 2: Django's cursor
        return None
    if type(raw) is not psycopg.Connection or raw.cursor_factory is not postgresql.Cursor:
        return None
    loader = raw.adapters.get_loader(_TIMESTAMPTZ_OID, psycopg.pq.Format.TEXT)
    if getattr(loader, "timezone", None) != connection.timezone:
        return None
    if not _UNPREPARED:

        class UnpreparedCursor(postgresql.ServerBindingCursor):
            """Django's server-binding cursor, each statement unnamed (``prepare=False``)."""

            def execute(self, query, params=None, *, prepare=None, binary=None):
                return super().execute(query, params, prepare=False, binary=binary)

        _UNPREPARED.append(UnpreparedCursor)
    return _UNPREPARED[0]


_TIMESTAMPTZ_OID = 1184  # PostgreSQL's timestamptz type


def _in_event_loop() -> bool:
    """Whether this thread runs an event loop (where Django's cursor refuses to run)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return not os.environ.get("DJANGO_ALLOW_ASYNC_UNSAFE")


def annotation_names(queryset: QuerySet) -> list[str]:
    """The names of ``queryset``'s annotations, in the order it selects them
    (``Query.annotation_select``): the columns ``values_list(*names)`` gives."""
    return list(queryset.query.annotation_select)


# -- new instances ------------------------------------------------------------------------


class _Blank:
    """What :func:`new_instance` copies for a model: a blank instance's attributes (its
    fields' non-callable defaults), the fields whose default is made per instance
    (``(attname, get_default, setter)``: a callable default, or a field whose descriptor
    does more than store the value, set through it as the constructor does), and the
    keyword names it takes (the concrete fields' names and attnames, less those its
    ``__init__`` rewrites)."""

    __slots__ = ("attributes", "made", "names")

    def __init__(self, attributes: dict, made: list, names: frozenset):
        self.attributes, self.made, self.names = attributes, made, names


_BLANKS: dict[type, _Blank | None] = {}
_PLAIN_DESCRIPTORS = (DeferredAttribute, ForeignKeyDeferredAttribute)


def _blank(model: type[Model]) -> _Blank | None:
    """The blank of ``model``, or ``None`` where only its constructor will do: an
    ``__init__`` of its own that does not say which keywords it rewrites (a function
    attribute ``rewrites``, a tuple of names)."""
    init = model.__init__
    rewrites = () if init is Model.__init__ else getattr(init, "rewrites", None)
    if rewrites is None or model._meta.abstract:
        return None
    fields = model._meta.concrete_fields
    blank = model()
    made = []
    for field in fields:
        plain = type(getattr(model, field.attname, None)) in _PLAIN_DESCRIPTORS
        # a default made per instance: a callable one, a database default (an expression
        # Django makes anew), a descriptor's
        made_anew = field.has_default() and callable(field.default)
        if not plain or made_anew or field.has_db_default():
            made.append((field.attname, field.get_default, None if plain else setattr))
    skipped = {name for name, _, _ in made} | {"_state"}
    attributes = {name: value for name, value in vars(blank).items() if name not in skipped}
    names = {field.name for field in fields} | {field.attname for field in fields}
    return _Blank(attributes, made, frozenset(names - set(rewrites)))


def new_instance(model: type[Model], **values: Any) -> Model:
    """``model(**values)``, the same instance, for the rows a reply writes: a copy of a
    blank instance's attributes (the fields' defaults; a callable default called anew, a
    field with a descriptor of its own set through it), then each value set as the
    constructor sets it (a related object through its descriptor). ``model(**values)``
    itself where a copy could differ: ``pre_init`` or ``post_init`` receivers, an
    ``__init__`` of the model's own, a keyword that is not a concrete field's name or
    attname (a property, a typo: the constructor says so)."""
    blank = _BLANKS.get(model, _UNKNOWN)
    if blank is None or _listened(signals.pre_init, model) or _listened(signals.post_init, model):
        return model(**values)
    if blank is _UNKNOWN:
        blank = _BLANKS.setdefault(model, _blank(model))
        if blank is None:
            return model(**values)
    if not blank.names.issuperset(values):
        return model(**values)
    obj = model.__new__(model)
    attributes = obj.__dict__
    attributes.update(blank.attributes)
    obj._state = ModelState()
    for name, default, setter in blank.made:
        if setter is None:
            attributes[name] = default()
        else:
            setter(obj, name, default())
    for name, value in values.items():
        setattr(obj, name, value)
    return obj


def is_new(obj: Model) -> bool:
    """Whether ``obj`` is not yet saved: its next ``save()`` is an INSERT."""
    return obj._state.adding


def database_of(obj: Model) -> str | None:
    """The database alias ``obj`` was read from or saved to (``None`` before either)."""
    return obj._state.db


def mark_saved(obj: Model, using: str) -> None:
    """Mark ``obj`` as a row of database ``using``, as loading or saving it would: for a row
    written (or read) without the ORM building the instance."""
    obj._state.adding = False
    obj._state.db = using


def mark_unsaved(obj: Model) -> None:
    """Mark ``obj`` as a row not written after all (its INSERT rolled back): its primary
    key cleared, its next save an INSERT."""
    obj.pk = None
    obj._state.adding = True
    obj._state.db = None


class RowsJustWritten(dict):
    """A prefetch cache holding rows just written: each relation becomes the queryset
    ``prefetch_related`` would have stored the first time Django asks for it, so a reply
    that is never inspected costs no queryset at all."""

    def __init__(self, instance: Any, relations: dict[str, list]):
        super().__init__(relations)
        self.instance = instance

    def __getitem__(self, name: str) -> Any:
        rows = super().__getitem__(name)
        if not isinstance(rows, list):
            return rows
        super().__delitem__(name)  # so the manager builds its own filtered queryset
        queryset = getattr(self.instance, name).get_queryset()
        queryset._result_cache = rows
        queryset._prefetch_done = True
        super().__setitem__(name, queryset)
        return queryset

    def get(self, name: str, default: Any = None) -> Any:
        return self[name] if name in self else default

    def __reduce__(self):  # pickled and copied as the plain dict of querysets it stands for
        return dict, ({name: self[name] for name in list(self)},)


def known_relations(instance: Any, **relations: list) -> None:
    """Fill ``instance``'s prefetch cache with rows just written, as
    ``prefetch_related`` would: ``message.usages.all()`` (and its ``len()``, ``count()``)
    reads no row again, while ``.filter()`` and the rest build real querysets."""
    instance._prefetched_objects_cache = RowsJustWritten(
        instance, {name: list(rows) for name, rows in relations.items()}
    )


def known_rows(instance: Any, name: str) -> list | None:
    """The rows of relation ``name`` already loaded on ``instance`` (by
    ``prefetch_related`` or :func:`known_relations`), without building a queryset;
    ``None`` when they were not loaded."""
    cache = instance.__dict__.get("_prefetched_objects_cache")
    if not cache or name not in cache:
        return None
    rows = dict.__getitem__(cache, name)
    if isinstance(rows, list):
        return rows
    return getattr(rows, "_result_cache", None)


def forget_rows(instance: Any, name: str) -> None:
    """Forget the rows of relation ``name`` loaded on ``instance`` (by
    ``prefetch_related`` or :func:`known_relations`): the next read asks the database."""
    cache = instance.__dict__.get("_prefetched_objects_cache")
    if cache:
        dict.pop(cache, name, None)


def json_value(value: Any) -> Any:
    """A JSON column read without Django's converters: text on most backends (decoded
    with orjson when installed: the transcript query reads one per message)."""
    if isinstance(value, str | bytes | bytearray):
        return loads(value)
    return value
