"""``Chat.title_source``: who wrote a chat's title (``LLMCHAT["TITLES"]``). A chat titled
before this migration had its title given by a person (nothing else wrote titles), so it
is marked ``"user"`` and never replaced by an automatic one."""

from django.db import migrations, models


def forwards(apps, schema_editor):
    Chat = apps.get_model("django_llmchat", "Chat")
    Chat.objects.using(schema_editor.connection.alias).exclude(title="").update(
        title_source="user"
    )


class Migration(migrations.Migration):
    dependencies = [("django_llmchat", "0019_message_search")]

    operations = [
        migrations.AddField(
            model_name="chat",
            name="title_source",
            field=models.CharField(
                blank=True,
                default="",
                editable=False,
                help_text='Who wrote the title: "user" (never overwritten), "model", "prompt" '
                '(from the first prompt, LLMCHAT["TITLES"]), or empty while the chat is '
                "untitled.",
                max_length=16,
            ),
        ),
        migrations.RunPython(forwards, migrations.RunPython.noop, elidable=True),
    ]
