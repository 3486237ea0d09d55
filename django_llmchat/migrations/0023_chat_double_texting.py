"""``Chat.double_texting``: what a new prompt does while a run of the chat is live."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("django_llmchat", "0022_chat_archive_pin_tags"),
    ]

    operations = [
        migrations.AddField(
            model_name="chat",
            name="double_texting",
            field=models.CharField(
                blank=True,
                default="",
                help_text="What a new prompt does while a run of the chat is queued or "
                "working: enqueue, reject, interrupt or rollback; empty: "
                'LLMCHAT["DOUBLE_TEXTING"].',
                max_length=16,
            ),
        ),
    ]
