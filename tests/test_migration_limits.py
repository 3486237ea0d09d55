"""Migration 0008 copies each chat's user onto its usage rows."""

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

APP = "django_llmchat"


@pytest.mark.django_db(transaction=True)
def test_usage_rows_get_their_chats_user(django_user_model):
    executor = MigrationExecutor(connection)
    executor.migrate([(APP, "0007_usage_dashboard")])
    old = executor.loader.project_state([(APP, "0007_usage_dashboard")]).apps
    Chat, Usage = old.get_model(APP, "Chat"), old.get_model(APP, "Usage")
    User = old.get_model("auth", "User")
    ann = User.objects.create(username="ann")
    owned = Chat.objects.create(user_id=ann.pk)
    nobody = Chat.objects.create()
    Usage.objects.create(chat=owned, status="succeeded")
    Usage.objects.create(chat=owned, status="failed")
    Usage.objects.create(chat=nobody, status="succeeded")

    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(executor.loader.graph.leaf_nodes(APP))

    from django_llmchat.models import Usage as NewUsage

    rows = NewUsage.objects.order_by("id").values_list("chat_id", "user_id")
    assert list(rows) == [(owned.pk, ann.pk), (owned.pk, ann.pk), (nobody.pk, None)]


@pytest.mark.django_db
def test_new_usage_rows_carry_the_user(django_user_model):
    from django_llmchat.models import Chat, Usage

    user = django_user_model.objects.create_user("u")
    chat = Chat.objects.create(user=user)
    assert Usage.objects.create(chat=chat).user_id == user.pk
    assert Usage.objects.create(chat=Chat.objects.create()).user_id is None
