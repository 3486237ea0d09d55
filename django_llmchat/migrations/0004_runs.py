"""Runs as rows: ``llmchat_run``; messages ordered by ``position``; tool-call ids no longer
unique per chat. Existing state moves over: a prompt marked ``{"queued": true}`` in its
``raw`` becomes a queued run, a chat left ``running`` a running run whose lease has run
out (so the recovery resumes it), a failed or interrupted chat a run that ended so.
"""

import django.db.models.deletion
import django_llmchat.models.message
from django.db import migrations, models
from django.utils import timezone

QUEUED_POSITION = 10**17


def _micros(value) -> int:
    return int(value.timestamp() * 1_000_000) if value is not None else 0


def move_to_runs(apps, schema_editor):
    Chat = apps.get_model("django_llmchat", "Chat")
    Message = apps.get_model("django_llmchat", "Message")
    Run = apps.get_model("django_llmchat", "Run")
    ToolCall = apps.get_model("django_llmchat", "ToolCall")
    db = schema_editor.connection.alias
    # the transcript's order was (created_at, id): the position says it now
    batch = []
    for message in Message.objects.using(db).only("id", "created_at").iterator(chunk_size=2000):
        message.position = _micros(message.created_at)
        batch.append(message)
        if len(batch) >= 2000:
            Message.objects.using(db).bulk_update(batch, ["position"])
            batch = []
    if batch:
        Message.objects.using(db).bulk_update(batch, ["position"])
    now = timezone.now()
    for chat in Chat.objects.using(db).iterator():
        messages = list(Message.objects.using(db).filter(chat=chat).order_by("position", "id"))
        queued = [
            m
            for m in messages
            if m.role == "user" and isinstance(m.raw, dict) and m.raw.get("queued") is True
        ]
        for m in messages:  # the marks lived in raw: gone
            if m.role == "user" and isinstance(m.raw, dict) and "queued" in m.raw:
                rest = {k: v for k, v in m.raw.items() if k != "queued"}
                Message.objects.using(db).filter(pk=m.pk).update(raw=rest or None)
        prompts = [m for m in messages if m.role == "user"]
        last_prompt = prompts[-1] if prompts else None
        status = chat.status or "idle"
        active = None
        if status == "running" and not queued:
            active = Run.objects.using(db).create(
                chat=chat,
                prompt=last_prompt,
                status="running",
                attempt=1,
                started_at=now,
                lease_expires_at=now,  # nobody holds it: the recovery resumes it
                worker="(before runs)",
            )
        elif status == "failed":
            Run.objects.using(db).create(
                chat=chat,
                prompt=last_prompt,
                status="failed",
                error_type="unknown",
                error="The reply failed.",
                attempt=1,
                finished_at=now,
            )
        elif status == "interrupted":
            waiting = ToolCall.objects.using(db).filter(
                chat=chat, approval="", result__isnull=True
            )
            if waiting.exists():
                Run.objects.using(db).create(
                    chat=chat, prompt=last_prompt, status="awaiting_approval", attempt=1
                )
            else:
                Run.objects.using(db).create(
                    chat=chat,
                    prompt=last_prompt,
                    status="interrupted",
                    interrupt_reason=chat.interrupt_reason or "",
                    attempt=1,
                    finished_at=now,
                )
        for m in queued:
            # a waiting prompt reads after everything until its run starts (then it moves
            # after what the runs before it stored)
            Run.objects.using(db).create(chat=chat, prompt=m, status="queued")
            Message.objects.using(db).filter(pk=m.pk).update(position=m.position + QUEUED_POSITION)
        head = (
            Run.objects.using(db)
            .filter(chat=chat, status__in=("queued", "running", "awaiting_approval"))
            .order_by("id")
            .first()
        )
        Chat.objects.using(db).filter(pk=chat.pk).update(
            status=head.status if head else "idle", active_run=active
        )


class Migration(migrations.Migration):

    dependencies = [
        ('django_llmchat', '0003_drop_redundant_fk_indexes'),
    ]

    operations = [
        migrations.CreateModel(
            name='Run',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('status', models.CharField(choices=[('queued', 'queued'), ('running', 'running'), ('awaiting_approval', 'awaiting approval'), ('succeeded', 'succeeded'), ('failed', 'failed'), ('cancelled', 'cancelled'), ('interrupted', 'interrupted')], default='queued', max_length=24)),
                ('error', models.TextField(blank=True, help_text='Why the run failed, in words safe to show.')),
                ('error_type', models.CharField(blank=True, max_length=64)),
                ('interrupt_reason', models.CharField(blank=True, max_length=255)),
                ('cancel_requested', models.BooleanField(default=False)),
                ('attempt', models.PositiveIntegerField(default=0, help_text='How many times a process took the run on (1 unless recovered).')),
                ('steps', models.PositiveIntegerField(default=0, help_text='Provider responses stored.')),
                ('task_id', models.CharField(blank=True, max_length=255)),
                ('worker', models.CharField(blank=True, max_length=255)),
                ('lease_expires_at', models.DateTimeField(blank=True, null=True)),
                ('created_at', models.DateTimeField(auto_now_add=True)),
                ('started_at', models.DateTimeField(blank=True, null=True)),
                ('finished_at', models.DateTimeField(blank=True, null=True)),
            ],
            options={
                'db_table': 'llmchat_run',
                'ordering': ('created_at', 'id'),
                'abstract': False,
            },
        ),
        migrations.AlterModelOptions(
            name='message',
            options={'ordering': ('position', 'id')},
        ),
        migrations.RemoveConstraint(
            model_name='toolcall',
            name='llmchat_tool_call_chat_uniq',
        ),
        migrations.RemoveIndex(
            model_name='message',
            name='llmchat_message_chat_idx',
        ),
        migrations.AddField(
            model_name='message',
            name='position',
            field=models.BigIntegerField(default=django_llmchat.models.message.clock_position, editable=False, help_text="The message's place in the transcript (ordered by position, then id): when it was stored, or, for a prompt asked while an earlier run worked, when its own run started."),
        ),
        migrations.AlterField(
            model_name='chat',
            name='status',
            field=models.CharField(blank=True, default='idle', editable=False, help_text="What the chat is doing: idle, queued, running or awaiting_approval (kept by django_llmchat.runs from the chat's runs).", max_length=24),
        ),
        migrations.AddIndex(
            model_name='toolcall',
            index=models.Index(fields=['chat', 'call_id'], name='llmchat_tool_call_chat_idx'),
        ),
        migrations.AddField(
            model_name='run',
            name='chat',
            field=models.ForeignKey(db_index=False, on_delete=django.db.models.deletion.CASCADE, related_name='runs', to='django_llmchat.chat'),
        ),
        migrations.AddField(
            model_name='run',
            name='prompt',
            field=models.ForeignKey(blank=True, help_text='The user message the run answers (empty for a continuation).', null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='prompted_runs', to='django_llmchat.message'),
        ),
        migrations.AddField(
            model_name='chat',
            name='active_run',
            field=models.ForeignKey(blank=True, editable=False, help_text='The run working on the chat now (kept by django_llmchat.runs).', null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='+', to='django_llmchat.run'),
        ),
        migrations.AddField(
            model_name='message',
            name='run',
            field=models.ForeignKey(blank=True, db_index=False, help_text="The run that stored the message (a prompt's runs are prompted_runs).", null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='messages', to='django_llmchat.run'),
        ),
        migrations.AddField(
            model_name='usage',
            name='run',
            field=models.ForeignKey(blank=True, db_index=False, null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='usages', to='django_llmchat.run'),
        ),
        migrations.AddIndex(
            model_name='message',
            index=models.Index(fields=['chat', 'position', 'id'], name='llmchat_message_chat_idx'),
        ),
        migrations.AddIndex(
            model_name='message',
            index=models.Index(fields=['run'], name='llmchat_message_run_idx'),
        ),
        migrations.AddIndex(
            model_name='usage',
            index=models.Index(fields=['run'], name='llmchat_usage_run_idx'),
        ),
        migrations.AddIndex(
            model_name='run',
            index=models.Index(fields=['chat', 'created_at', 'id'], name='llmchat_run_chat_idx'),
        ),
        migrations.AddIndex(
            model_name='run',
            index=models.Index(fields=['status', 'lease_expires_at'], name='llmchat_run_lease_idx'),
        ),
        migrations.RunPython(move_to_runs, migrations.RunPython.noop, elidable=False),
        migrations.RemoveField(
            model_name='chat',
            name='cancel_requested',
        ),
        migrations.RemoveField(
            model_name='chat',
            name='error',
        ),
        migrations.RemoveField(
            model_name='chat',
            name='interrupt_reason',
        ),
    ]
