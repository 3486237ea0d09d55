import pytest

from django_llmchat.models import Chat, Message
from django_llmchat.prepared import PreparedQuery, json_value

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


def test_placeholder_that_never_reaches_the_sql_is_an_error():
    query = PreparedQuery(lambda chat_id: Message.objects.all())
    with pytest.raises(ValueError, match="placeholder"):
        query.rows(1)
