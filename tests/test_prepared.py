import pytest

from django_llmchat.db.prepared import PreparedQuery, json_value
from django_llmchat.models import Chat, Message

pytestmark = pytest.mark.django_db


def test_prepared_query_swaps_arguments():
    a, b = Chat.objects.create(title="a"), Chat.objects.create(title="b")
    a.add_message(role="user", content="in a", raw={"k": 1})
    b.add_message(role="user", content="in b")
    query = PreparedQuery(
        lambda chat_id: Message.objects.filter(chat_id=chat_id).values_list("content", "raw")
    )
    [(content, raw)] = query.rows(a.pk)
    assert content == "in a" and json_value(raw) == {"k": 1}
    assert query.rows(b.pk) == [("in b", None)]
    assert query.rows(10**9) == []


def test_prepared_values_are_what_values_list_gives():
    from decimal import Decimal

    from cryptography.fernet import Fernet
    from django.db import connection
    from django.test import override_settings

    from django_llmchat.models import ToolCall
    from django_llmchat.values import Citation

    chat = Chat.objects.create()
    with override_settings(LLMCHAT={"ENCRYPTION_KEYS": [Fernet.generate_key().decode()]}):
        asking = chat.add_message(role="assistant", content="secret", cost=Decimal("0.25"))
        call = ToolCall.objects.create(chat=chat, message=asking, call_id="c1", name="f")
        chat.add_message(
            role="tool",
            content="ünïcode",
            parent_tool_call=call,
            cache_boundary=True,
            citations=[Citation(url="https://example.com")],
        )
        columns = ("content", "citations", "cache_boundary", "supplied_cost", "created_at")
        columns += ("parent_tool_call__call_id", "on_path")

        def build(chat_id):
            return Message.objects.filter(chat_id=chat_id).order_by("id").values_list(*columns)

        query = PreparedQuery(build)
        expected = list(build(chat.pk))
        assert query.values(chat.pk) == expected
        assert query.values(chat.pk) == expected  # compiled once, converted each time
        rows = query.rows(chat.pk)
        with connection.cursor() as cursor:
            cursor.execute("SELECT content FROM llmchat_message ORDER BY id")
            stored = cursor.fetchall()
    assert stored[0][0].startswith("llmchat-fernet:")  # the database holds ciphertext
    # rows(): the columns as the database returns them, an encrypted one decrypted
    assert rows[0][0] == "secret" and rows[1][0] == "ünïcode"
    assert expected[0][:1] == ("secret",) and expected[0][3] == Decimal("0.25")
    assert expected[1][1] == [Citation(url="https://example.com")]
    assert expected[1][2] is True and expected[1][5] == "c1"
    assert query.values(10**9) == []


def test_prepared_values_of_an_argument_of_another_type_or_too_large_run_the_queryset():
    chat = Chat.objects.create()
    chat.add_message(role="user", content="hi")
    query = PreparedQuery(
        lambda chat_id: Message.objects.filter(chat_id=chat_id).values_list("content")
    )
    assert query.values(str(chat.pk)) == [("hi",)]  # not the integer the SQL was built for
    by_pk = PreparedQuery(lambda pk: Message.objects.filter(pk=pk).values_list("content"))
    assert by_pk.values(2**63) == [] and by_pk.values(-(2**64)) == []  # past any column
    assert by_pk._compiled == {}
    assert query._compiled == {}
    assert query.values(chat.pk) == [("hi",)] and query._compiled


def test_prepared_in_compiles_once_per_number_of_ids():
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from django_llmchat.db.prepared import PreparedIn

    chat = Chat.objects.create()
    a, b, c = (chat.add_message(role="user", content=text) for text in "abc")
    query = PreparedIn(
        lambda ids: Message.objects.filter(pk__in=ids).order_by("id").values_list("content"),
        lengths=2,
    )
    assert query.values([a.pk, c.pk]) == [("a",), ("c",)]
    assert query.values([c.pk, b.pk]) == [("b",), ("c",)]
    assert query.values([b.pk]) == [("b",)]
    assert sorted(query._queries) == [1, 2]  # one statement per length
    with CaptureQueriesContext(connection) as queries:
        assert query.values([]) == []
    assert queries.captured_queries == []
    assert query.values([a.pk, b.pk, c.pk]) == [("a",), ("b",), ("c",)]  # past 2: the ORM
    assert sorted(query._queries) == [1, 2]


def test_placeholder_that_never_reaches_the_sql_is_an_error():
    query = PreparedQuery(lambda chat_id: Message.objects.all())
    with pytest.raises(ValueError, match="placeholder"):
        query.rows(1)


def _columns(obj, skip=("id", "created_at", "position")):
    return {
        f.attname: getattr(obj, f.attname)
        for f in type(obj)._meta.concrete_fields
        if f.attname not in skip
    }


def test_prepared_insert_stores_what_save_stores():
    from decimal import Decimal

    from django_llmchat.db.prepared import PreparedInsert
    from django_llmchat.models import Usage
    from django_llmchat.values import Citation

    chat = Chat.objects.create()
    fields = dict(
        chat=chat,
        role="assistant",
        content="Paris — ünïcode",
        raw={"response": {"id": "r1"}, "item_ids": {"c1": "i1"}},
        citations=[Citation(url="https://example.com", title="Example")],
        input_tokens=12,
        cache_boundary=True,
        supplied_cost=Decimal("0.000123"),
    )
    by_orm, prepared = Message(**fields), Message(**fields)
    by_orm.save()
    PreparedInsert(Message).save(prepared)
    assert prepared.pk is not None and prepared.pk != by_orm.pk
    assert not prepared._state.adding and prepared._state.db == "default"
    assert prepared.created_at is not None
    assert _columns(Message.objects.get(pk=prepared.pk)) == _columns(
        Message.objects.get(pk=by_orm.pk)
    )

    usage = Usage(
        chat=chat, message=prepared, provider="openai", model_id="gpt-4.1", status="succeeded"
    )
    PreparedInsert(Usage).save(usage)
    assert Usage.objects.get(pk=usage.pk).message_id == prepared.pk


def test_prepared_insert_refuses_rows_it_cannot_insert():
    from django_llmchat.db.prepared import PreparedInsert

    chat = Chat.objects.create()
    saved = Message.objects.create(chat=chat, role="user", content="x")
    with pytest.raises(ValueError, match="saves new Message rows"):
        PreparedInsert(Message).save(saved)
    with pytest.raises(ValueError, match="saves new Message rows"):
        PreparedInsert(Message).save(chat)


def test_prepared_insert_sends_save_signals_through_the_orm():
    from django.db.models.signals import post_save

    from django_llmchat.db.prepared import PreparedInsert

    seen = []

    def receiver(sender, instance, created, **kwargs):
        seen.append((instance.content, created, instance.pk))

    post_save.connect(receiver, sender=Message)
    try:
        message = Message(chat=Chat.objects.create(), role="user", content="signalled")
        PreparedInsert(Message).save(message)
    finally:
        post_save.disconnect(receiver, sender=Message)
    assert seen == [("signalled", True, message.pk)]


def test_prepared_insert_leaves_an_unsaved_related_object_to_the_orm():
    """A message whose chat is not saved yet: nothing is written, the ORM's save says
    why (rather than a row with no chat)."""
    from django_llmchat.db.prepared import PreparedInsert

    message = Message(chat=Chat(), role="user", content="orphan")
    assert PreparedInsert(Message).insert(message) is False
    assert message.pk is None
    with pytest.raises(ValueError, match="unsaved related object"):
        PreparedInsert(Message).save(message)
    assert not Message.objects.filter(content="orphan").exists()


def test_a_new_chat_is_saved_by_its_compiled_insert_as_the_orm_saves_it(
    django_user_model, django_assert_num_queries
):
    """``Chat.objects.create()``: one INSERT, compiled once, the row the ORM writes; a
    save with other arguments, a given primary key or a save receiver goes to the ORM."""
    from django.db.models.signals import pre_save

    user = django_user_model.objects.create_user("owner")
    fields = dict(user=user, title="Trip", model_id="gpt-4.1-mini", params={"t": 1})
    with django_assert_num_queries(1):
        fast = Chat.objects.create(**fields)
    by_orm = Chat(**fields)
    by_orm.save(force_update=False, update_fields=None)  # other arguments: the ORM's save
    assert fast.pk is not None and not fast._state.adding and fast.created_at is not None
    assert _columns(Chat.objects.get(pk=fast.pk), skip=("id", "created_at", "updated_at")) == (
        _columns(Chat.objects.get(pk=by_orm.pk), skip=("id", "created_at", "updated_at"))
    )
    assert Chat.objects.get(pk=fast.pk).title_source == "user"
    given = Chat.objects.create(pk=fast.pk + 100, title="given")
    assert Chat.objects.get(pk=fast.pk + 100).title == "given" and given.pk == fast.pk + 100
    seen = []

    def receiver(sender, instance, **kwargs):
        seen.append(instance.title)

    pre_save.connect(receiver, sender=Chat)
    try:
        Chat.objects.create(title="signalled")
    finally:
        pre_save.disconnect(receiver, sender=Chat)
    assert seen == ["signalled"]


def test_prepared_update_changes_one_row():
    from django.db.models.functions import Now

    from django_llmchat.db.prepared import PreparedUpdate

    a, b = Chat.objects.create(), Chat.objects.create()
    before = Chat.objects.get(pk=a.pk).updated_at
    update = PreparedUpdate(Chat, status="running", updated_at=Now())
    assert update.run(a.pk) == 1
    assert update.run(10**9) == 0
    a.refresh_from_db()
    b.refresh_from_db()
    # SQLite's clock (Now()) keeps milliseconds, Python's the microseconds
    assert a.status == "running" and a.updated_at >= before.replace(
        microsecond=before.microsecond // 1000 * 1000
    )
    assert b.status == "idle"


def test_prepared_update_with_arguments_and_a_where_clause():
    from django.db.models import F

    from django_llmchat.db.prepared import INT_ARG, Arg, PreparedUpdate
    from django_llmchat.models import Run

    chat = Chat.objects.create()
    run = Run.objects.create(chat=chat, status="running", attempt=3)
    update = PreparedUpdate(
        Run,
        where=lambda pk, attempt: Run.objects.filter(pk=pk, attempt=attempt),
        placeholders=(INT_ARG, 2_000_000_000),  # in range of the positive column
        steps=F("steps") + 1,
        status=Arg(str),
        task_id=Arg(str),
    )
    assert update.run(run.pk, 2, status="failed", task_id="t") == 0  # another attempt
    assert update.run(run.pk, 3, status="succeeded", task_id="t1") == 1
    assert update.run(run.pk, 3, status="failed", task_id="t2") == 1  # compiled once, reused
    run.refresh_from_db()
    assert (run.status, run.task_id, run.steps) == ("failed", "t2", 2)
    with pytest.raises(TypeError):
        update.run(run.pk, 3, status="x")  # task_id is missing
    other = PreparedUpdate(Chat, status=Arg(str), active_run=Arg(int))
    assert other.run(chat.pk, status="running", active_run=run.pk) == 1
    assert other.run(chat.pk, status="idle", active_run=None) == 1
    chat.refresh_from_db()
    assert chat.status == "idle" and chat.active_run_id is None


@pytest.mark.django_db
def test_a_prepared_update_takes_decimal_arguments():
    from decimal import Decimal

    from django_llmchat.db.prepared import Arg, PreparedUpdate
    from django_llmchat.models import Usage

    chat = Chat.objects.create()
    row = Usage.objects.create(chat=chat, status="pending", estimated=True)
    close = PreparedUpdate(
        Usage, status=Arg(str), total_cost=Arg(Decimal), input_tokens=Arg(int), estimated=False
    )
    assert close.run(row.pk, status="succeeded", total_cost=Decimal("0.0000123"), input_tokens=7)
    row.refresh_from_db()
    assert (row.status, row.total_cost, row.input_tokens, row.estimated) == (
        "succeeded",
        Decimal("0.0000123"),
        7,
        False,
    )
    assert close.run(row.pk, status="failed", total_cost=None, input_tokens=None)
    row.refresh_from_db()
    assert (row.status, row.total_cost, row.input_tokens) == ("failed", None, None)
    with pytest.raises(ValueError):
        Arg(float)


def test_a_prepared_update_returns_the_row_it_updated(monkeypatch):
    """``returning``: :meth:`returned` runs the UPDATE and reads back those columns as
    the UPDATE left them (an expression's result included), ``None`` when no row was
    updated; without ``returning`` it is refused, and a database that cannot return an
    updated row refuses the statement by name."""
    from django.db import NotSupportedError, connection
    from django.db.models import Case, F, Value, When

    from django_llmchat.db import prepared
    from django_llmchat.db.prepared import Arg, PreparedUpdate

    chat = Chat.objects.create(title="old")
    update = PreparedUpdate(
        Chat,
        returning=("title", "status"),
        title=Arg(str),
        status=Case(When(title="old", then=Value("queued")), default=F("status")),
    )
    assert update.returned(chat.pk, title="new") == ("new", "queued")
    assert update.returned(10**9, title="none") is None
    chat.refresh_from_db()
    assert (chat.title, chat.status) == ("new", "queued")
    with pytest.raises(TypeError, match="returning"):
        PreparedUpdate(Chat, title=Arg(str)).returned(chat.pk, title="x")
    with pytest.raises(TypeError, match="keywords title"):
        update.returned(chat.pk)
    monkeypatch.setattr(connection.features, "can_return_columns_from_insert", False)
    assert not prepared.returns_updated_rows(connection)
    with pytest.raises(NotSupportedError, match="cannot return the rows an UPDATE changed"):
        PreparedUpdate(Chat, returning=("title",), title="y").returned(chat.pk)


def test_plain_rows_decrypts_the_encrypted_columns_in_the_form_the_database_returns():
    import json

    from cryptography.fernet import Fernet
    from django.test import override_settings

    from django_llmchat.db.prepared import plain_rows, protected_columns
    from django_llmchat.models import ToolCall
    from django_llmchat.models.protected import encrypt

    fields = [None, Message._meta.get_field("content"), ToolCall._meta.get_field("arguments")]
    columns = protected_columns(fields)
    assert [index for index, _, _ in columns] == [1, 2]
    plain = [(1, "hello", '{"a": 1}'), (2, "", None)]
    assert plain_rows(plain, columns) is plain  # nothing to decrypt: the same rows
    with override_settings(LLMCHAT={"ENCRYPTION_KEYS": [Fernet.generate_key().decode()]}):
        text, args = encrypt("hello"), encrypt('{"a":1}')
        # a JSON column as text (a JSON string), or already decoded by the backend
        rows = plain_rows([(1, text, json.dumps(args)), (2, text, args)], columns)
    assert rows == [(1, "hello", '{"a":1}'), (2, "hello", '{"a":1}')]


def _both_rows(obj):
    """``PreparedInsert.row(obj)`` as orjson writes it (``None``: refused) and as the
    standard library writes it, each parsed."""
    import json

    from django.db import connection

    from django_llmchat.db.prepared import PreparedInsert

    insert = PreparedInsert(type(obj))
    insert.row(obj, "default")  # the plan
    plan, groups, rest = insert._plans["default"]
    fast = insert._orjson_row(obj, groups, rest, connection)
    return (
        None if fast is None else json.loads(fast),
        json.loads(insert._json_row(obj, plan, connection)),
        json.loads(insert.row(obj, "default")),
    )


def test_a_functions_row_is_the_same_from_orjson_as_from_the_standard_library():
    """The JSON row a run function inserts (``PreparedInsert.row``): orjson writes what
    the standard library writes (integers the backend wraps, decimals, datetimes, a JSON
    field's value with keys of any kind, an encrypted or redacted JSON field's own text),
    and a row orjson refuses is the standard library's."""
    from decimal import Decimal

    from django_llmchat.models import Usage
    from django_llmchat.values import Citation

    chat = Chat.objects.create(
        title="Ünïcode — “quoted”",
        params={"temperature": 0.5, 1: "one", "nested": {"é": [1, 2.5, None, True, "\u2028"]}},
        tools=[{"name": "weather"}],
    )
    message = Message(
        chat=chat,
        role="assistant",
        content='Paris\n\t"quoted"',
        raw={"response": {"id": "r1", "n": 3}, "item_ids": {"c1": "i1"}},
        citations=[Citation(url="https://example.com", title="Example")],
        input_tokens=12,
        supplied_cost=Decimal("0.000123"),
    )
    usage = Usage(
        chat=chat, provider="openai", model_id="gpt-4.1", status="succeeded", input_tokens=7
    )
    usage.freeze_cost()
    usage.output_tokens = True  # a bool in an integer column: 1, as the field prepares it
    for obj in (Chat(title="new", params=chat.params, context={"k": [1]}), message, usage):
        fast, std, row = _both_rows(obj)
        assert fast is not None
        fast.pop("created_at", None), std.pop("created_at", None), row.pop("created_at", None)
        fast.pop("updated_at", None), std.pop("updated_at", None), row.pop("updated_at", None)
        assert fast == std == row
    assert _both_rows(message)[0]["raw"] == _both_rows(message)[1]["raw"]  # the field's own text
    assert _both_rows(message)[0]["chat_id"] == chat.pk  # an integer, as JSON
    assert [type(row["output_tokens"]) for row in _both_rows(usage)] == [int, int, int]

    too_large = Chat(title="big", params={"n": 2**70})  # past 64 bits: orjson refuses
    fast, std, row = _both_rows(too_large)
    assert fast is None and row["params"] == std["params"] == {"n": 2**70}


def test_a_json_field_with_an_encoder_of_its_own_is_written_by_that_encoder(monkeypatch):
    """A JSON field with an encoder (``DjangoJSONEncoder``: decimals, datetimes as
    strings) has its value written by it, in the orjson row too."""
    import datetime
    from decimal import Decimal

    from django.core.serializers.json import DjangoJSONEncoder

    monkeypatch.setattr(Chat._meta.get_field("params"), "encoder", DjangoJSONEncoder)
    when = datetime.datetime(2026, 12, 6, 12, 30, tzinfo=datetime.UTC)
    fast, std, row = _both_rows(Chat(title="t", params={"n": Decimal("1.50"), "at": when}))
    assert fast is not None
    assert (
        fast["params"]
        == std["params"]
        == row["params"]
        == {
            "n": "1.50",
            "at": "2026-12-06T12:30:00Z",
        }
    )


def test_a_value_passed_straight_to_the_backend_is_what_the_fields_preparation_gives():
    """``PreparedInsert`` hands an aware datetime, a dict or list and a finite Decimal to
    the backend's adaptation directly, for fields whose preparation is Django's own: for
    every such field of the app's models, that is what ``get_db_prep_save`` gives; any
    other value (a naive datetime, a string, NaN) and every field with preparation of its
    own (the encrypted ones) take ``get_db_prep_save``."""
    from datetime import UTC, datetime, timedelta, timezone
    from decimal import Decimal
    from zoneinfo import ZoneInfo

    from django.apps import apps
    from django.db import connection
    from django.db.models import DateTimeField, DecimalField, JSONField

    from django_llmchat.db.prepared import _UNKNOWN, _direct_preparation

    samples = {
        DateTimeField: [
            datetime(2026, 12, 7, 1, 2, 3, 456789, tzinfo=UTC),
            datetime(2026, 12, 7, 1, 2, 3, tzinfo=UTC),  # no microseconds: none written
            datetime(2026, 12, 7, 1, 2, 3, tzinfo=timezone(timedelta(hours=-5))),
            datetime(2026, 12, 7, 1, 2, 3, 7, tzinfo=ZoneInfo("UTC")),
        ],
        JSONField: [{"a": [1, 2.5, "é"], "b": None}, [1, {"c": True}], {}, []],
        DecimalField: [Decimal("0.000123"), Decimal("12"), Decimal("-3.5")],
    }
    others = {
        DateTimeField: [datetime(2026, 12, 7, 1, 2, 3), "2026-12-07T01:02:03Z"],
        JSONField: ["text", 3, None, (1, 2)],
        DecimalField: [Decimal("NaN"), "1.5", 2],
    }
    checked = 0
    for model in apps.get_app_config("django_llmchat").get_models():
        for field in model._meta.concrete_fields:
            prepare = _direct_preparation(field, connection)
            kind = next((k for k in samples if isinstance(field, k)), None)
            if prepare is None:
                # only a field whose class prepares values its own way is left out
                assert kind is None or type(field) not in samples, field
                continue
            assert kind is not None, field
            for value in samples[kind]:
                if isinstance(value, Decimal) and len(value.as_tuple().digits) > field.max_digits:
                    continue
                got, want = prepare(value), field.get_db_prep_save(value, connection)
                assert _adapted(got) == _adapted(want), (field, value)
                checked += 1
            for value in others[kind]:
                assert prepare(value) is _UNKNOWN, (field, value)
    assert checked > 20


@pytest.mark.parametrize("zone", ["Europe/Lisbon", "UTC", "no USE_TZ"])
def test_a_datetime_passed_straight_to_sqlite_reads_in_the_connections_zone(zone, monkeypatch):
    """On SQLite a UTC datetime is written as its text directly only while the
    connection's zone is UTC itself; a database ``TIME_ZONE`` of its own (a zone that is
    not ``datetime.UTC``, even one named UTC) or ``USE_TZ`` off (the backend refuses an
    aware datetime) takes the backend's adaptation, as Django's cursor does."""
    from datetime import UTC, datetime
    from zoneinfo import ZoneInfo

    from django.db import DEFAULT_DB_ALIAS, connections
    from django.db.models import DateTimeField
    from django.test import override_settings

    from django_llmchat.db.prepared import _direct_preparation

    connection = connections[DEFAULT_DB_ALIAS]
    if connection.vendor != "sqlite":
        pytest.skip("SQLite's adaptation")
    field = DateTimeField()
    prepare = _direct_preparation(field, connection)
    summer = datetime(2026, 7, 1, 12, 0, 0, 5, tzinfo=UTC)
    if zone == "no USE_TZ":
        with override_settings(USE_TZ=False), pytest.raises(ValueError, match="USE_TZ is False"):
            prepare(summer)
        return
    monkeypatch.setitem(connection.__dict__, "timezone", ZoneInfo(zone))
    want = field.get_db_prep_save(summer, connection)
    assert want == ("2026-07-01 13:00:00.000005" if zone != "UTC" else "2026-07-01 12:00:00.000005")
    assert prepare(summer) == want


def _adapted(value):
    """A prepared parameter in a form that compares by value (psycopg's ``Jsonb`` wrapper
    does not: its object and its ``dumps``)."""
    if hasattr(value, "obj") and hasattr(value, "dumps"):
        return (type(value), value.obj, value.dumps)
    return (type(value), value)
