"""A chat can carry the id a frontend made up for it (the AI SDK's useChat id)."""

from django.conf import settings
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('django_llmchat', '0005_history_summaries'),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.AddField(
            model_name='chat',
            name='client_id',
            field=models.CharField(blank=True, default='', help_text="The id a frontend made up for the chat (the AI SDK's useChat id), unique per user; blank for chats made on the server.", max_length=255),
        ),
        migrations.AddConstraint(
            model_name='chat',
            constraint=models.UniqueConstraint(condition=models.Q(('client_id', ''), _negated=True), fields=('user', 'client_id'), name='llmchat_chat_client_id_uniq'),
        ),
    ]
