"""An ``Idempotency-Key`` is unique per user, chat and route (it was per user and route):
the same key on another chat of the user, such as an AI SDK client's message id ``m1``
in each of its chats, names another request."""

from django.conf import settings
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("django_llmchat", "0016_run_reserved_cost"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.RemoveConstraint(
            model_name="idempotencykey",
            name="llmchat_idempotency_key_unique",
        ),
        migrations.AddConstraint(
            model_name="idempotencykey",
            constraint=models.UniqueConstraint(
                fields=("user", "chat", "scope", "key"), name="llmchat_idempotency_key_chat"
            ),
        ),
    ]
