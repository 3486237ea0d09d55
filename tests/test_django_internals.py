"""The Django internals the package relies on, checked on every supported Django version.

``django_llmchat/db/prepared.py`` is the one module that uses them. Each test here names the
internal it checks, so a Django release that moves one fails here, loudly, rather than
somewhere on the reply path. The last tests read the package's source and fail if any other
module names a private Django attribute or imports a private Django module.
"""

from __future__ import annotations

import ast
import copy
import pickle
from decimal import Decimal
from pathlib import Path

import django
import pytest
from django.db import connection, connections
from django.db.models import Model, QuerySet
from django.db.models.base import ModelState
from django.db.models.options import Options
from django.test.utils import CaptureQueriesContext

import django_llmchat
from django_llmchat.db import prepared
from django_llmchat.db.prepared import (
    PreparedInsert,
    PreparedQuery,
    PreparedUpdate,
    RowsJustWritten,
    database_of,
    is_new,
    known_relations,
    mark_saved,
)
from django_llmchat.models import Chat, Message, Run, ToolCall, Usage

pytestmark = pytest.mark.django_db

PACKAGE = Path(django_llmchat.__file__).parent
FENCE = PACKAGE / "db" / "prepared.py"


def _queries():
    return CaptureQueriesContext(connections["default"])


# -- the internals, one by one -------------------------------------------------------------


def test_model_state_adding_and_db():
    """``Model._state.adding`` / ``.db``: what ``is_new``, ``database_of`` and
    ``mark_saved`` read and write."""
    chat = Chat(title="t")
    assert isinstance(chat._state, ModelState)
    assert is_new(chat) and database_of(chat) is None
    chat.save()
    assert not is_new(chat) and database_of(chat) == "default"
    loaded = Chat.objects.get(pk=chat.pk)
    assert not is_new(loaded) and database_of(loaded) == "default"

    # a row written without save(): marked saved, its next save() is an UPDATE
    twin = Chat(pk=chat.pk, title="renamed")
    mark_saved(twin, "default")
    assert not is_new(twin) and database_of(twin) == "default"
    with _queries() as queries:
        twin.save(update_fields=["title"])
    assert [q["sql"].split()[0] for q in queries.captured_queries] == ["UPDATE"]
    assert Chat.objects.get(pk=chat.pk).title == "renamed"


def test_options_fields_the_insert_is_built_from():
    """``Options.local_concrete_fields``, ``db_returning_fields``, ``auto_field`` and
    ``Field.generated``: the columns ``PreparedInsert`` writes and reads back."""
    meta = Message._meta
    assert isinstance(meta, Options)
    assert meta.auto_field is meta.pk
    assert meta.db_returning_fields == [meta.pk]
    names = [f.attname for f in meta.local_concrete_fields]
    assert names[0] == "id" and "chat_id" in names and "content" in names
    assert all(f.generated is False for f in meta.local_concrete_fields)
    insert = PreparedInsert(Message)
    assert meta.pk not in insert.fields and len(insert.fields) == len(names) - 1


def test_insert_query_compiles_with_returning_fields():
    """``django.db.models.sql.InsertQuery``, ``insert_values`` and the compiler's
    ``returning_fields``: one INSERT per row with ``RETURNING`` the primary key."""
    from django.db.models.sql import InsertQuery

    insert = PreparedInsert(Usage)
    compiled = insert._compile("default")
    query = InsertQuery(Usage)
    query.insert_values(insert.fields, [Usage()])
    compiler = query.get_compiler("default")
    assert hasattr(compiler, "returning_fields")
    if connection.features.can_return_columns_from_insert:
        assert compiled is not None, "PreparedInsert fell back to the ORM"
        sql, plan = compiled
        assert sql.startswith("INSERT INTO") and "RETURNING" in sql
        assert sql.count("%s") == len(insert.fields) == len(plan)
    else:
        assert compiled is None


def test_prepared_insert_gives_the_row_save_gives():
    chat = Chat.objects.create()
    message = Message(chat=chat, role="user", content="hi", supplied_cost=Decimal("0.5"))
    with _queries() as queries:
        PreparedInsert(Message).save(message)
    assert len(queries.captured_queries) == 1
    assert message.pk is not None and not is_new(message)
    assert Message.objects.get(pk=message.pk).content == "hi"


def test_update_query_chain_and_update_values():
    """``Query.chain(UpdateQuery)``, ``add_update_values`` and ``related_updates``: the
    UPDATE ``PreparedUpdate`` compiles once."""
    from django.db.models.sql import UpdateQuery

    chat = Chat.objects.create(title="before")
    query = Chat.objects.filter(pk=chat.pk).query.chain(UpdateQuery)
    query.add_update_values({"title": "x"})
    assert query.related_updates == {}
    assert PreparedUpdate(Chat, title="after").run(chat.pk) == 1
    assert Chat.objects.get(pk=chat.pk).title == "after"


def test_compiler_select_and_converters():
    """``SQLCompiler.select``, ``col_count`` and ``get_converters``, the backend's
    ``ops.get_db_converters`` and an expression's ``get_db_converters``: what
    ``PreparedQuery.values`` reads once to convert its rows as ``values_list()`` does."""
    chat = Chat.objects.create()
    Message.objects.create(chat=chat, role="user", content="x", citations=[{"url": "u"}])
    queryset = Message.objects.values_list("id", "content", "created_at", "citations")
    compiler = queryset.query.get_compiler("default")
    compiler.as_sql()
    assert compiler.col_count == 4 and len(compiler.select) == 4
    expressions = [expression for expression, _sql, _alias in compiler.select]
    converters = compiler.get_converters(expressions)
    assert {1, 3} <= set(converters)  # the fields' own from_db_value, on every backend
    for index, (convs, expression) in converters.items():
        assert expression is expressions[index]
        assert convs == connection.ops.get_db_converters(expression) + expression.get_db_converters(
            connection
        )
    prepared = PreparedQuery(lambda chat_id: queryset.filter(chat_id=chat_id))
    assert prepared.values(chat.pk) == list(queryset.filter(chat_id=chat.pk))


def test_database_operations_the_insert_plan_compares():
    """``BaseDatabaseOperations.adapt_integerfield_value`` and ``validate_autopk_value``:
    compared to learn whether the backend passes integers through unchanged."""
    from django.db.backends.base.operations import BaseDatabaseOperations

    assert callable(BaseDatabaseOperations.adapt_integerfield_value)
    assert callable(BaseDatabaseOperations.validate_autopk_value)
    assert callable(connection.ops.adapt_integerfield_value)


def test_deferred_attribute_is_the_field_descriptor():
    """``django.db.models.query_utils.DeferredAttribute``: the descriptor a field installs
    by default, which ``ValueListField``'s descriptor extends."""
    from django.db.models import Field

    from django_llmchat.models.fields import ValueListField

    assert Field.descriptor_class is prepared.DeferredAttribute
    assert issubclass(ValueListField.descriptor_class, prepared.DeferredAttribute)
    chat = Chat.objects.create()
    Message.objects.create(chat=chat, citations=[{"url": "https://example.com"}])
    deferred = Message.objects.defer("citations").get(chat=chat)
    assert deferred.citations[0].url == "https://example.com"


def test_queryset_result_cache_and_prefetch_done():
    """``QuerySet._result_cache`` / ``_prefetch_done``: a queryset given its rows yields
    them without a query; ``prefetch_related`` on it adds none."""
    chat = Chat.objects.create()
    row = Message.objects.create(chat=chat, role="user", content="x")
    queryset = Message.objects.filter(chat=chat).prefetch_related("usages")
    assert hasattr(queryset, "_result_cache") and hasattr(queryset, "_prefetch_done")
    queryset._result_cache = [row]
    queryset._prefetch_done = True
    with _queries() as queries:
        assert list(queryset) == [row] and len(queryset) == 1 and queryset[0] is row
    assert queries.captured_queries == []


def test_related_managers_read_the_prefetch_cache():
    """``Model._prefetched_objects_cache``: the related manager's ``all()`` answers from it
    (keyed by the accessor name)."""
    chat = Chat.objects.create()
    message = Message.objects.create(chat=chat, role="assistant", content="x")
    Usage.objects.create(chat=chat, message=message, provider="p", model_id="m")
    fetched = Message.objects.prefetch_related("usages", "tool_calls").get(pk=message.pk)
    assert set(fetched._prefetched_objects_cache) == {"usages", "tool_calls"}
    with _queries() as queries:
        assert len(fetched.usages.all()) == 1 and list(fetched.tool_calls.all()) == []
    assert queries.captured_queries == []


# -- RowsJustWritten / known_relations -------------------------------------------------------


def _reply():
    chat = Chat.objects.create()
    message = Message.objects.create(chat=chat, role="assistant", content="x")
    call = ToolCall.objects.create(chat=chat, message=message, call_id="c1", name="weather")
    usage = Usage.objects.create(
        chat=chat, message=message, provider="p", model_id="m", input_tokens=3
    )
    return chat, message, call, usage


def test_known_relations_answer_all_without_a_query():
    chat, message, call, usage = _reply()
    known_relations(message, tool_calls=[call], usages=[usage], attachments=[])
    assert isinstance(message._prefetched_objects_cache, RowsJustWritten)
    with _queries() as queries:
        assert list(message.tool_calls.all()) == [call]
        assert list(message.usages.all()) == [usage]
        assert list(message.attachments.all()) == []
        assert message.usages.all()[0] is usage  # the very rows given, not copies
        assert message.cost().total == usage.total_cost
    assert queries.captured_queries == []


def test_known_relations_leave_other_queryset_methods_real():
    chat, message, call, usage = _reply()
    other = Usage.objects.create(chat=chat, message=message, provider="p", model_id="m2")
    # told only one of the two usages: all() and count() answer from the rows given (as
    # after prefetch_related), filter() and exists() on a new queryset ask the database
    known_relations(message, usages=[usage])
    assert list(message.usages.all()) == [usage] and message.usages.count() == 1
    assert list(message.usages.filter(model_id="m2")) == [other]
    assert message.usages.filter(model_id="m2").exists()
    # a relation not given is read from the database
    assert list(message.tool_calls.all()) == [call]


def test_rows_just_written_becomes_querysets_once():
    chat, message, call, usage = _reply()
    cache = RowsJustWritten(message, {"usages": [usage]})
    assert cache.get("tool_calls") is None and "usages" in cache
    first = cache["usages"]
    assert isinstance(first, QuerySet) and cache["usages"] is first and cache.get("usages") is first
    assert first.model is Usage and list(first) == [usage]


def test_rows_just_written_pickle_and_copy_as_plain_querysets():
    chat, message, call, usage = _reply()
    known_relations(message, usages=[usage], tool_calls=[call])
    clone = pickle.loads(pickle.dumps(message))
    cache = clone._prefetched_objects_cache
    assert type(cache) is dict and set(cache) == {"usages", "tool_calls"}
    with _queries() as queries:  # pickled with their rows, as prefetched querysets are
        assert [u.pk for u in clone.usages.all()] == [usage.pk]
        assert [c.call_id for c in clone.tool_calls.all()] == ["c1"]
    assert queries.captured_queries == []
    # deepcopy drops a queryset's rows (Django's rule): the copy reads them again
    clone = copy.deepcopy(message)
    assert type(clone._prefetched_objects_cache) is dict
    assert [u.pk for u in clone.usages.all()] == [usage.pk]


def test_refresh_from_db_clears_rows_just_written():
    chat, message, call, usage = _reply()
    known_relations(message, usages=[])
    message.refresh_from_db()
    assert list(message.usages.all()) == [usage]


def test_run_marked_saved_after_a_raw_read():
    """``runs`` builds the head run from a raw row and marks it saved (no INSERT on save)."""
    chat = Chat.objects.create()
    run = Run(chat=chat)
    mark_saved(run, "default")
    assert not is_new(run)
    assert Run.objects.count() == 0


def _fields_of(obj: Model) -> dict:
    """The instance's attributes; a callable default's value (a clock's reading) by its
    type."""
    made = {f.attname for f in obj._meta.concrete_fields if f.has_default() and callable(f.default)}
    values = {
        name: type(value) if name in made else value
        for name, value in vars(obj).items()
        if name != "_state"
    }
    return {"values": values, "adding": obj._state.adding, "db": obj._state.db}


@pytest.mark.parametrize(
    "model, values",
    [
        (Message, {"role": "assistant", "content": "hi", "model_id": "m", "run_id": 3}),
        (Message, {"role": "user", "content": "q", "citations": [{"url": "https://a.example"}]}),
        (Run, {"task_id": "t", "status": "queued"}),
        (
            Usage,
            {"provider": "p", "model_id": "m", "status": "pending", "duration_ms": 4, "error": ""},
        ),
        (ToolCall, {"call_id": "c1", "name": "lookup", "arguments": {"q": 1}}),
        (Chat, {"title": "t"}),
        (Run, {"id": 7, "chat_id": 2, "status": "running", "attempt": 1}),
    ],
)
def test_new_instance_is_the_instance_the_constructor_builds(model, values):
    """``prepared.new_instance``: Django's ``Model.__init__`` sets each concrete field's
    attname (its default, or the keyword given; a related object through its descriptor)
    and a new ``ModelState``; the copy of a blank instance gives the same attributes."""
    chat = Chat.objects.create()
    if model is not Chat and "chat_id" not in values:
        values = {**values, "chat": chat}
    built = model(**values)
    copied = prepared.new_instance(model, **values)
    assert type(copied) is model
    assert _fields_of(copied) == _fields_of(built)
    assert isinstance(copied._state, ModelState) and copied._state is not built._state
    if "chat" in values:  # the related object cached as the descriptor caches it
        assert copied.chat is chat


def test_new_instance_makes_each_callable_default_and_descriptor_value_anew():
    one = prepared.new_instance(Message, role="user", content="a")
    two = prepared.new_instance(Message, role="user", content="b")
    assert one.citations == [] and one.citations is not two.citations
    one.citations.append("x")
    assert two.citations == [] and Message(role="user").citations == []
    assert one._state is not two._state and one._state.adding


def test_new_instance_leaves_to_the_constructor_what_a_copy_could_change(monkeypatch):
    from django.db.models import signals

    # a keyword no concrete field has: the constructor's own error
    with pytest.raises(TypeError, match="unexpected keyword arguments: 'colour'"):
        prepared.new_instance(Run, colour="red")
    # a keyword the model's __init__ rewrites (Message(cost=...)): its constructor
    message = prepared.new_instance(Message, role="assistant", cost=Decimal("0.25"))
    assert message.supplied_cost == Decimal("0.25")
    # receivers of pre_init / post_init hear every instance
    heard = []

    def receiver(sender, **kwargs):
        heard.append(sender)

    signals.post_init.connect(receiver, sender=Run)
    try:
        prepared.new_instance(Run, status="queued")
    finally:
        signals.post_init.disconnect(receiver, sender=Run)
    assert heard == [Run]

    # a model whose __init__ says nothing of what it rewrites: always its constructor
    built = []

    class Stamped(Run):
        class Meta:
            proxy = True
            app_label = "django_llmchat"

        def __init__(self, *args, **kwargs):
            built.append(kwargs)
            super().__init__(*args, **kwargs)

    try:
        prepared.new_instance(Stamped, status="queued")
    finally:  # out of the app registry again (makemigrations would see a new model)
        from django.apps import apps

        del apps.all_models["django_llmchat"]["stamped"]
        apps.clear_cache()
    assert built == [{"status": "queued"}]


def test_supported_django_version():
    assert django.VERSION[:2] >= (5, 2)


# -- no other module names a Django internal ---------------------------------------------------

# the documented parts of ``Model._meta`` (docs: "Model _meta API", "Model Meta options")
DOCUMENTED_META = {
    "get_field",
    "get_fields",
    "app_label",
    "model_name",
    "object_name",
    "label",
    "label_lower",
    "db_table",
    "verbose_name",
    "verbose_name_plural",
    "ordering",
    "abstract",
}
# documented model attributes that start with an underscore
DOCUMENTED_UNDERSCORED = {"_meta", "_base_manager", "_default_manager"}
PRIVATE_MODULES = ("django.db.models.sql", "django.db.backends", "django.db.models.query_utils")


def _django_private_names() -> set[str]:
    """Single-underscore attribute names of Django's model, queryset, manager, options and
    field classes and of their instances."""
    from django.db.models import Field, Manager
    from django.db.models.fields.related_descriptors import ReverseManyToOneDescriptor

    chat = Chat.objects.create()
    message = Message.objects.create(chat=chat)
    objects: list = [
        Model,
        QuerySet,
        Manager,
        Options,
        Field,
        ModelState,
        ReverseManyToOneDescriptor,
        message,
        message._state,
        Message._meta,
        Message.objects.all(),
        Message.objects,
        message.usages,
        Message._meta.get_field("content"),
    ]
    names = set()
    for obj in objects:
        names.update(dir(obj))
        names.update(getattr(obj, "__dict__", {}))
    names.update({"_prefetched_objects_cache", "_result_cache", "_prefetch_done", "_state"})
    return {n for n in names if n.startswith("_") and not n.startswith("__")}


def _package_modules():
    for path in sorted(PACKAGE.rglob("*.py")):
        if path == FENCE or "migrations" in path.parts:
            continue
        yield path, ast.parse(path.read_text(), filename=str(path))


# named nowhere outside the fence, even where the package defines the same name itself
ALWAYS_PRIVATE = {"_state", "_result_cache", "_prefetch_done", "_prefetched_objects_cache"}


def _own_names(trees) -> set[str]:
    """Names the package defines itself (functions, methods, attributes set on self)."""
    own = set()
    for node in (node for tree in trees for node in ast.walk(tree)):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            own.add(node.name)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
            if isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"):
                own.add(node.attr)
    return own


def test_no_module_outside_the_fence_names_a_private_django_attribute():
    modules = list(_package_modules())
    own = _own_names(tree for _, tree in modules) - ALWAYS_PRIVATE
    private = _django_private_names() - DOCUMENTED_UNDERSCORED
    found = []
    for path, tree in modules:
        for node in ast.walk(tree):
            if not isinstance(node, ast.Attribute):
                continue
            where = f"{path.relative_to(PACKAGE.parent)}:{node.lineno}"
            if node.attr in private and node.attr not in own:
                found.append(f"{where}: .{node.attr}")
            if (
                isinstance(node.value, ast.Attribute)
                and node.value.attr == "_meta"
                and node.attr not in DOCUMENTED_META
            ):
                found.append(f"{where}: ._meta.{node.attr}")
    assert found == [], "Django internals outside prepared.py:\n" + "\n".join(found)


def test_no_module_outside_the_fence_imports_a_private_django_module():
    found = []
    for path, tree in _package_modules():
        for node in ast.walk(tree):
            names = []
            if isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            for name in names:
                if name.startswith(PRIVATE_MODULES):
                    found.append(f"{path.relative_to(PACKAGE.parent)}:{node.lineno}: {name}")
    assert found == [], "private Django modules imported outside prepared.py:\n" + "\n".join(found)


def test_the_fence_check_sees_a_private_attribute(tmp_path, monkeypatch):
    """The check above finds ``obj._state.adding`` and ``qs._result_cache`` when they
    appear."""
    module = tmp_path / "leak.py"
    module.write_text(
        "def f(obj, qs):\n"
        "    qs._result_cache = []\n"
        "    return obj._state.adding or obj._meta.concrete_fields\n"
    )
    monkeypatch.setattr(
        "tests.test_django_internals._package_modules",
        lambda: iter([(module, ast.parse(module.read_text()))]),
    )
    monkeypatch.setattr("tests.test_django_internals.PACKAGE", tmp_path / "pkg")
    with pytest.raises(AssertionError) as failed:
        test_no_module_outside_the_fence_names_a_private_django_attribute()
    text = str(failed.value)
    assert "._result_cache" in text and "._state" in text and "._meta.concrete_fields" in text


def test_the_fence_is_where_the_internals_are():
    source = FENCE.read_text()
    for name in ("_state", "_result_cache", "_prefetch_done", "_prefetched_objects_cache"):
        assert f".{name}" in source
    assert prepared.__doc__ and "Django internals" in prepared.__doc__


# -- every framework private the package names, fenced and listed -----------------------------

# the fenced modules: the only ones that may name a private attribute of Django, DRF or
# drf-spectacular (or of the standard library)
FENCES = (FENCE, PACKAGE / "api" / "schema_views.py")

# every private attribute the fenced modules name, and what it is (each one checked above
# or below)
FENCED_PRIVATES = {
    "_state": "Model._state (.adding, .db): is_new, database_of, mark_saved",
    "_result_cache": "QuerySet._result_cache: RowsJustWritten, known_rows",
    "_prefetch_done": "QuerySet._prefetch_done: RowsJustWritten",
    "_prefetched_objects_cache": "Model._prefetched_objects_cache: known_relations",
    "_swagger_ui_resource": "drf-spectacular SpectacularSwaggerView._swagger_ui_resource",
    "_swagger_ui_favicon": "drf-spectacular SpectacularSwaggerView._swagger_ui_favicon",
    "_redoc_standalone": "drf-spectacular SpectacularRedocView._redoc_standalone",
}
# the same, without a leading underscore: Query.annotation_select (prepared.annotation_names)
FENCED_INTERNALS = {"annotation_select"}

# underscored names that are documented public API
DOCUMENTED_PRIVATES = DOCUMENTED_UNDERSCORED | {
    "_make",  # collections.namedtuple's documented constructor from an iterable
    "_asdict",
    "_replace",
    "_fields",
}
# framework privates flagged wherever they appear outside the fences, though the package
# defines a name alike for its own objects (overrides in a fence, or its own attributes)
FRAMEWORK_PRIVATES = ALWAYS_PRIVATE | {
    "_swagger_ui_resource",
    "_swagger_ui_favicon",
    "_redoc_standalone",
    "_readable_fields",  # DRF Serializer
    "_get_obj_does_not_exist_redirect",  # the admin's ModelAdmin
}
# flagged on any object but ``self``: the package's own attribute of that name is fine
FRAMEWORK_PRIVATES_OF_OTHERS = {"_request"}  # DRF Request._request (Django's request)


def _all_modules():
    for path in sorted(PACKAGE.rglob("*.py")):
        if "migrations" not in path.parts:
            yield path, ast.parse(path.read_text(), filename=str(path))


def _defined_names(trees) -> tuple[set[str], tuple[str, ...]]:
    """Every name the package defines itself (functions, classes, variables, arguments,
    attributes it sets, keyword names), and the prefixes of the names it builds with
    f-strings (``f"_last_run_{name}"``, annotations read back with ``getattr``)."""
    own, prefixes = set(), set()
    for node in (node for tree in trees for node in ast.walk(tree)):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            own.add(node.name)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
            own.add(node.attr)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            own.add(node.id)
        elif isinstance(node, ast.arg):
            own.add(node.arg)
        elif isinstance(node, ast.keyword) and node.arg:
            own.add(node.arg)
        elif isinstance(node, ast.JoinedStr) and node.values:
            first = node.values[0]
            if isinstance(first, ast.Constant) and str(first.value).startswith("_"):
                if len(str(first.value)) > 2:
                    prefixes.add(str(first.value))
    return own, tuple(prefixes)


def _attribute_names(tree):
    """``(node, name, on_self)`` for each ``x._name`` and ``getattr/hasattr/setattr(x,
    "_name")`` in ``tree``."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute):
            on_self = isinstance(node.value, ast.Name) and node.value.id in ("self", "cls")
            yield node, node.attr, on_self
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in ("getattr", "hasattr", "setattr", "delattr")
            and len(node.args) > 1
            and isinstance(node.args[1], ast.Constant)
            and isinstance(node.args[1].value, str)
        ):
            first = node.args[0]
            on_self = isinstance(first, ast.Name) and first.id in ("self", "cls")
            yield node, node.args[1].value, on_self


def framework_privates_named(modules) -> list[tuple[Path, int, str]]:
    """Where the package names a private attribute it does not define itself (a private of
    Django, DRF, drf-spectacular or the standard library), or one of the known framework
    privates: ``(module, line, name)``."""
    modules = list(modules)
    own, prefixes = _defined_names(tree for _, tree in modules)
    found = []
    for path, tree in modules:
        for node, name, on_self in _attribute_names(tree):
            if name in FENCED_INTERNALS:
                found.append((path, node.lineno, name))
                continue
            if not name.startswith("_") or name.startswith("__") or name in DOCUMENTED_PRIVATES:
                continue
            if (
                name in FRAMEWORK_PRIVATES
                or (name in FRAMEWORK_PRIVATES_OF_OTHERS and not on_self)
                or (name not in own and not name.startswith(prefixes))
            ):
                found.append((path, node.lineno, name))
    return found


def test_every_framework_private_is_fenced_and_listed():
    """Scanning the whole package: a private attribute of Django, DRF, drf-spectacular or
    the standard library is named only in a fenced module, and listed above by name."""
    outside, unlisted = [], []
    for path, line, name in framework_privates_named(_all_modules()):
        where = f"{path.relative_to(PACKAGE.parent)}:{line}: .{name}"
        if path not in FENCES:
            outside.append(where)
        elif name not in FENCED_PRIVATES and name not in FENCED_INTERNALS:
            unlisted.append(where)
    assert outside == [], "framework privates outside the fenced modules:\n" + "\n".join(outside)
    assert unlisted == [], "framework privates not listed in FENCED_PRIVATES:\n" + "\n".join(
        unlisted
    )


def test_every_listed_private_is_used_in_a_fence():
    named = {name for path, _, name in framework_privates_named(_all_modules())}
    assert set(FENCED_PRIVATES) | FENCED_INTERNALS <= named


def test_the_package_scan_sees_framework_privates(tmp_path):
    """The scan finds a DRF serializer's ``_readable_fields``, a DRF request's
    ``._request``, ``getattr(x, "_private")`` and ``Query.annotation_select``; not
    ``self._request``, a name the module defines, ``_meta`` or a namedtuple's ``_make``."""
    module = tmp_path / "leak.py"
    module.write_text(
        "class A:\n"
        "    def f(self, s, request, qs, Row):\n"
        "        self._mine = self._request = 1\n"
        "        s._readable_fields, request._request, self._request, self._mine\n"
        "        getattr(qs, '_hidden'), qs.query.annotation_select, qs.model._meta\n"
        "        return Row._make([])\n"
    )
    found = framework_privates_named([(module, ast.parse(module.read_text()))])
    assert sorted(name for _, _, name in found) == [
        "_hidden",
        "_readable_fields",
        "_request",
        "annotation_select",
    ]


def test_query_annotation_select():
    """``Query.annotation_select``: the names ``prepared.annotation_names`` gives, in the
    order ``values_list`` selects them (the spending check's columns, ``limits.py``)."""
    from django.db.models import Count, F, Value

    queryset = Chat.objects.annotate(b=Value(1), a=F("pk"), c=Count("messages"))
    assert prepared.annotation_names(queryset) == ["b", "a", "c"]
    assert list(queryset.query.annotation_select) == ["b", "a", "c"]
    chat = Chat.objects.create()
    row = queryset.filter(pk=chat.pk).values_list(*prepared.annotation_names(queryset)).get()
    assert row == (1, chat.pk, 0)


def test_drf_spectacular_asset_hooks():
    """``SpectacularSwaggerView._swagger_ui_resource`` / ``_swagger_ui_favicon`` and
    ``SpectacularRedocView._redoc_standalone``: static methods the views call for their
    assets' URLs, which ``api/schema_views.py`` overrides."""
    import inspect

    from drf_spectacular.views import SpectacularRedocView, SpectacularSwaggerView

    from django_llmchat.api.schema_views import SchemaRedocView, SchemaSwaggerView

    hooks = [
        (SpectacularSwaggerView, SchemaSwaggerView, "_swagger_ui_resource", ["filename"]),
        (SpectacularSwaggerView, SchemaSwaggerView, "_swagger_ui_favicon", []),
        (SpectacularRedocView, SchemaRedocView, "_redoc_standalone", []),
    ]
    for base, ours, name, parameters in hooks:
        assert isinstance(inspect.getattr_static(base, name), staticmethod)
        assert list(inspect.signature(getattr(base, name)).parameters) == parameters
        assert name in inspect.getsource(base.get)
        assert getattr(ours, name) is not getattr(base, name)


def test_known_rows_and_forget_rows_read_the_prefetch_cache():
    """``known_rows`` reads the rows of a relation prefetched (or just written) without a
    query; ``forget_rows`` drops them, so the next read asks the database."""
    from django_llmchat.db.prepared import forget_rows, known_rows

    chat, message, call, usage = _reply()
    assert known_rows(message, "usages") is None
    forget_rows(message, "usages")  # nothing loaded: nothing to forget
    fetched = Message.objects.prefetch_related("usages").get(pk=message.pk)
    assert known_rows(fetched, "usages") == [usage]
    known_relations(message, usages=[usage], tool_calls=[])
    assert known_rows(message, "usages") == [usage] and known_rows(message, "tool_calls") == []
    forget_rows(fetched, "usages")
    forget_rows(message, "usages")
    assert known_rows(fetched, "usages") is None and known_rows(message, "usages") is None
    assert known_rows(message, "tool_calls") == []
    with _queries() as queries:
        assert list(message.usages.all()) == [usage]
    assert len(queries.captured_queries) == 1


def test_connection_attributes_the_direct_statements_read():
    """``BaseDatabaseWrapper.connection``, ``execute_wrappers``, ``queries_logged``,
    ``health_check_enabled``/``health_check_done``, ``validate_no_broken_transaction()``
    and ``wrap_database_errors``: what ``prepared.execute`` reads to run a statement on
    SQLite's own connection only where Django's cursor would add nothing."""
    connection.ensure_connection()
    assert connection.connection is not None
    assert connection.execute_wrappers == []
    assert connection.queries_logged is False
    assert isinstance(connection.health_check_enabled, bool)
    assert isinstance(connection.health_check_done, bool)
    connection.validate_no_broken_transaction()
    with connection.wrap_database_errors:
        pass
    with connection.execute_wrapper(lambda *a: None):
        assert connection.execute_wrappers


@pytest.mark.skipif(connection.vendor != "postgresql", reason="PostgreSQL's cursor classes")
def test_postgresql_cursor_classes_the_server_binding_path_reads():
    """``django.db.backends.postgresql.base``: ``Cursor`` (client binding) is the
    connection's ``cursor_factory`` unless ``OPTIONS["server_side_binding"]``,
    ``ServerBindingCursor`` binds on the server; ``make_cursor`` / ``make_debug_cursor``
    wrap a cursor as ``connection.cursor()`` does; ``connection.timezone`` is the zone of
    the connection's timestamp loader. ``prepared._cursor`` builds on each."""
    import psycopg
    from django.db.backends.postgresql import base as postgresql
    from django.db.backends.utils import CursorDebugWrapper, CursorWrapper

    connection.ensure_connection()
    raw = connection.connection
    assert type(raw) is psycopg.Connection
    assert raw.cursor_factory is postgresql.Cursor
    assert issubclass(postgresql.Cursor, psycopg.ClientCursor)
    assert issubclass(postgresql.ServerBindingCursor, psycopg.Cursor)
    assert not issubclass(postgresql.ServerBindingCursor, psycopg.ClientCursor)
    assert type(connection.cursor()) is type(connection.make_cursor(raw.cursor()))
    assert isinstance(connection.make_cursor(raw.cursor()), CursorWrapper)
    assert isinstance(connection.make_debug_cursor(raw.cursor()), CursorDebugWrapper)
    loader = raw.adapters.get_loader(prepared._TIMESTAMPTZ_OID, psycopg.pq.Format.TEXT)
    assert loader.timezone == connection.timezone
    unprepared = prepared._unprepared_cursor_class(raw, connection)
    assert issubclass(unprepared, postgresql.ServerBindingCursor)
    with prepared._cursor(connection, raw) as cursor:
        assert isinstance(cursor, CursorWrapper) and isinstance(cursor.cursor, unprepared)
        for _ in range(8):  # past psycopg's prepare_threshold: still no named statement
            cursor.execute("SELECT %s::int", [1])
        cursor.execute("SELECT count(*) FROM pg_prepared_statements")
        assert cursor.fetchone() == (0,)
