"""The conversation as a tree: ``Message.parent`` (the message it follows) and
``Message.on_path`` (the chat's active path). Existing messages get their parent: the
previous non-system message of their chat by position (queued prompts keep none until
their run places them); every message starts on the path."""

import django.db.models.deletion
from django.db import migrations, models


QUEUED_POSITION = 10**17  # django_llmchat.models.message.QUEUED_POSITION, frozen here
BATCH = 1000


def give_parents(apps, schema_editor):
    Message = apps.get_model("django_llmchat", "Message")
    db = schema_editor.connection.alias
    rows = (
        Message.objects.using(db)
        .filter(position__lt=QUEUED_POSITION)
        .exclude(role="system")
        .order_by("chat_id", "position", "id")
        .values_list("id", "chat_id")
    )
    batch, chat, previous = [], None, None
    for pk, chat_id in rows.iterator(chunk_size=BATCH):
        if chat_id != chat:
            chat, previous = chat_id, None
        if previous is not None:
            batch.append(Message(pk=pk, parent_id=previous))
        previous = pk
        if len(batch) >= BATCH:
            Message.objects.using(db).bulk_update(batch, ["parent"])
            batch = []
    if batch:
        Message.objects.using(db).bulk_update(batch, ["parent"])


def forget_parents(apps, schema_editor):
    Message = apps.get_model("django_llmchat", "Message")
    Message.objects.using(schema_editor.connection.alias).exclude(parent=None).update(parent=None)


class Migration(migrations.Migration):

    dependencies = [
        ('django_llmchat', '0012_feedback'),
    ]

    operations = [
        migrations.RemoveIndex(
            model_name='message',
            name='llmchat_message_chat_idx',
        ),
        migrations.AddField(
            model_name='message',
            name='on_path',
            field=models.BooleanField(default=True, editable=False, help_text="Whether the message is on the chat's active path (the branch the transcript, the next request, the API and the admin show); kept by django_llmchat.branches."),
        ),
        migrations.AddField(
            model_name='message',
            name='parent',
            field=models.ForeignKey(blank=True, db_index=False, help_text="The message this one follows in the conversation's tree (empty for system messages, the first message, and a prompt still queued behind a run).", null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='children', to='django_llmchat.message'),
        ),
        migrations.AddIndex(
            model_name='message',
            index=models.Index(fields=['chat', 'on_path', 'position', 'id'], name='llmchat_message_path_idx'),
        ),
        migrations.AddIndex(
            model_name='message',
            index=models.Index(fields=['parent'], name='llmchat_message_parent_idx'),
        ),
        migrations.RunPython(give_parents, forget_parents, elidable=True),
    ]
