"""The release baseline: every table, index and constraint of the app, from the models,
and the full-text search of messages (:mod:`django_llmchat.chats.search_index`: a trigger on PostgreSQL, an FTS5
table on SQLite). The run functions of PostgreSQL follow in ``0002_run_functions``.

It replaces the 23 migrations written before the first release (``replaces``): a
database that applied them all is treated as migrated to it. How to fold a later
migration into it: tests/test_schema_baseline.py.
"""

import django.core.validators
import django.db.models.deletion
import django_llmchat.models.attachment
import django_llmchat.models.chat
import django_llmchat.models.message
from decimal import Decimal
from django.conf import settings
from django.db import migrations, models

from django_llmchat.chats import search_index


class Migration(migrations.Migration):

    initial = True

    replaces = [
        ("django_llmchat", "0001_initial"),
        ("django_llmchat", "0002_chat_interrupt_reason"),
        ("django_llmchat", "0003_drop_redundant_fk_indexes"),
        ("django_llmchat", "0004_runs"),
        ("django_llmchat", "0005_history_summaries"),
        ("django_llmchat", "0006_chat_client_id"),
        ("django_llmchat", "0007_usage_dashboard"),
        ("django_llmchat", "0008_limits"),
        ("django_llmchat", "0009_usage_pending_attempts"),
        ("django_llmchat", "0010_idempotency_keys"),
        ("django_llmchat", "0011_usage_ledger"),
        ("django_llmchat", "0012_feedback"),
        ("django_llmchat", "0013_message_tree"),
        ("django_llmchat", "0014_run_functions"),
        ("django_llmchat", "0015_run_enqueue_v2"),
        ("django_llmchat", "0016_run_reserved_cost"),
        ("django_llmchat", "0017_idempotency_key_per_chat"),
        ("django_llmchat", "0018_chat_retention_indexes"),
        ("django_llmchat", "0019_message_search"),
        ("django_llmchat", "0020_chat_title_source"),
        ("django_llmchat", "0021_forks_and_shares"),
        ("django_llmchat", "0022_chat_archive_pin_tags"),
        ("django_llmchat", "0023_chat_double_texting"),
    ]

    dependencies = [
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.CreateModel(
            name='Chat',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('title', models.CharField(blank=True, max_length=255)),
                ('title_source', models.CharField(blank=True, default='', editable=False, help_text='Who wrote the title: "user" (never overwritten), "model", "prompt" (from the first prompt, LLMCHAT["TITLES"]), or empty while the chat is untitled.', max_length=16)),
                ('model_id', models.CharField(default=django_llmchat.models.chat._default_model_id, max_length=255)),
                ('provider', models.CharField(default=django_llmchat.models.chat._default_provider, max_length=64)),
                ('agent', models.CharField(blank=True, max_length=255)),
                ('params', models.JSONField(blank=True, default=dict)),
                ('schema', models.JSONField(blank=True, null=True)),
                ('tools', models.JSONField(blank=True, default=list)),
                ('context', models.JSONField(blank=True, default=dict)),
                ('history', models.JSONField(blank=True, help_text='What of the transcript each request sends: "all", "window", "summarize", the dotted path of a history processor, or a dict of history options (with "strategy"); empty: the agent\'s, else LLMCHAT["HISTORY"].', null=True)),
                ('double_texting', models.CharField(blank=True, default='', help_text='What a new prompt does while a run of the chat is queued or working: enqueue, reject, interrupt or rollback; empty: LLMCHAT["DOUBLE_TEXTING"].', max_length=16)),
                ('status', models.CharField(blank=True, default='idle', editable=False, help_text="What the chat is doing: idle, queued, running or awaiting_approval (kept by django_llmchat.runs from the chat's runs).", max_length=24)),
                ('client_id', models.CharField(blank=True, default='', help_text="The id a frontend made up for the chat (the AI SDK's useChat id), unique per user; blank for chats made on the server.", max_length=255)),
                ('retention_days', models.PositiveIntegerField(blank=True, help_text='Days the transcript is kept after its last message (LLMCHAT["RETENTION"] deletes or anonymises it then); empty: the user\'s or the default.', null=True)),
                ('anonymised_at', models.DateTimeField(blank=True, editable=False, help_text='When the retention emptied the transcript (contents, title, user).', null=True)),
                ('archived', models.BooleanField(db_default=False, default=False, help_text="Archived: left out of the chat list (GET chats/) unless ?archived=true, and of the chat page's sidebar; still readable and usable.")),
                ('pinned', models.BooleanField(db_default=False, default=False, help_text='Pinned: listed before the others.')),
                ('created_at', models.DateTimeField(auto_now_add=True)),
                ('updated_at', models.DateTimeField(auto_now=True)),
                ('forked_from', models.ForeignKey(blank=True, db_index=False, editable=False, help_text='The chat this one was forked from (chat.fork()), while it exists.', null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='forks', to='django_llmchat.chat')),
                ('user', models.ForeignKey(blank=True, db_index=False, null=True, on_delete=django.db.models.deletion.CASCADE, related_name='llm_chats', to=settings.AUTH_USER_MODEL)),
            ],
            options={
                'db_table': 'llmchat_chat',
                'ordering': ('-updated_at', '-id'),
                'abstract': False,
            },
        ),
        migrations.CreateModel(
            name='Limit',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('usd_per_day', models.DecimalField(blank=True, decimal_places=10, help_text='USD per day (empty: the default).', max_digits=16, null=True)),
                ('usd_per_month', models.DecimalField(blank=True, decimal_places=10, help_text='USD per calendar month.', max_digits=16, null=True)),
                ('tokens_per_day', models.PositiveBigIntegerField(blank=True, help_text='Input, output and cache tokens per day.', null=True)),
                ('runs_per_hour', models.PositiveIntegerField(blank=True, help_text='Runs started in the last hour.', null=True)),
                ('concurrent_runs', models.PositiveIntegerField(blank=True, help_text='Runs queued or running at once.', null=True)),
                ('soft', models.DecimalField(blank=True, decimal_places=3, help_text='Fraction of a limit that sends the budget_warning signal and event (e.g. 0.8).', max_digits=4, null=True)),
                ('unlimited', models.BooleanField(default=False, help_text='No limit at all for this user.')),
                ('note', models.CharField(blank=True, max_length=255)),
                ('updated_at', models.DateTimeField(auto_now=True)),
                ('user', models.OneToOneField(on_delete=django.db.models.deletion.CASCADE, related_name='llmchat_limit', to=settings.AUTH_USER_MODEL)),
            ],
            options={
                'verbose_name': 'spending limit',
                'db_table': 'llmchat_limit',
                'abstract': False,
            },
        ),
        migrations.CreateModel(
            name='LLMModel',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('provider', models.CharField(max_length=64)),
                ('model_id', models.CharField(max_length=255)),
                ('name', models.CharField(max_length=255)),
                ('family', models.CharField(blank=True, max_length=128)),
                ('context_window', models.PositiveIntegerField(blank=True, null=True)),
                ('max_output_tokens', models.PositiveIntegerField(blank=True, null=True)),
                ('modalities', models.JSONField(blank=True, default=dict)),
                ('capabilities', models.JSONField(blank=True, default=list)),
                ('pricing', models.JSONField(blank=True, default=dict)),
                ('metadata', models.JSONField(blank=True, default=dict)),
                ('created_at', models.DateTimeField(auto_now_add=True)),
                ('updated_at', models.DateTimeField(auto_now=True)),
            ],
            options={
                'verbose_name': 'LLM model',
                'db_table': 'llmchat_llm_model',
                'ordering': ('provider', 'model_id'),
                'abstract': False,
                'indexes': [models.Index(fields=['model_id'], name='llmchat_llm_model_model_idx')],
                'constraints': [models.UniqueConstraint(fields=('provider', 'model_id'), name='llmchat_llm_model_provider_model_uniq')],
            },
        ),
        migrations.CreateModel(
            name='Message',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('role', models.CharField(max_length=16)),
                ('content', models.TextField(blank=True, default='')),
                ('model_id', models.CharField(blank=True, max_length=255)),
                ('provider', models.CharField(blank=True, max_length=64)),
                ('finish_reason', models.CharField(blank=True, max_length=64)),
                ('thinking_text', models.TextField(blank=True)),
                ('thinking_signature', models.TextField(blank=True)),
                ('citations', models.JSONField(blank=True, default=list)),
                ('server_tool_calls', models.JSONField(blank=True, default=list)),
                ('raw', models.JSONField(blank=True, null=True)),
                ('cache_boundary', models.BooleanField(default=False)),
                ('input_tokens', models.PositiveIntegerField(blank=True, null=True)),
                ('output_tokens', models.PositiveIntegerField(blank=True, null=True)),
                ('cache_read_tokens', models.PositiveIntegerField(blank=True, null=True)),
                ('cache_write_tokens', models.PositiveIntegerField(blank=True, null=True)),
                ('thinking_tokens', models.PositiveIntegerField(blank=True, null=True)),
                ('supplied_cost', models.DecimalField(blank=True, db_column='cost', decimal_places=10, help_text='A cost supplied by hand (USD); usage rows take precedence.', max_digits=16, null=True)),
                ('position', models.BigIntegerField(default=django_llmchat.models.message.clock_position, editable=False, help_text="The message's place in the transcript (ordered by position, then id): when it was stored, or, for a prompt asked while an earlier run worked, when its own run started.")),
                ('created_at', models.DateTimeField(auto_now_add=True)),
                ('on_path', models.BooleanField(default=True, editable=False, help_text="Whether the message is on the chat's active path (the branch the transcript, the next request, the API and the admin show); kept by django_llmchat.models.branches.")),
                ('chat', models.ForeignKey(db_index=False, on_delete=django.db.models.deletion.CASCADE, related_name='messages', to='django_llmchat.chat')),
                ('parent', models.ForeignKey(blank=True, db_index=False, help_text="The message this one follows in the conversation's tree (empty for system messages, the first message, and a prompt still queued behind a run).", null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='children', to='django_llmchat.message')),
                ('summary_until', models.ForeignKey(blank=True, db_index=False, help_text='For a summary (a compaction of the history): the last message it covers. Requests send the summary instead of the messages up to that one; the messages themselves stay stored.', null=True, on_delete=django.db.models.deletion.CASCADE, related_name='+', to='django_llmchat.message')),
            ],
            options={
                'db_table': 'llmchat_message',
                'ordering': ('position', 'id'),
                'abstract': False,
            },
        ),
        migrations.AddField(
            model_name='chat',
            name='forked_from_message',
            field=models.ForeignKey(blank=True, editable=False, help_text="The source chat's message the fork's transcript ends with.", null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='+', to='django_llmchat.message'),
        ),
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
                ('reserved_cost', models.DecimalField(decimal_places=10, default=Decimal('0'), editable=False, help_text="USD the run's admission reserved: its first request's expected cost, counted by the spending limits while the run is unfinished.", max_digits=16)),
                ('chat', models.ForeignKey(db_index=False, on_delete=django.db.models.deletion.CASCADE, related_name='runs', to='django_llmchat.chat')),
                ('prompt', models.ForeignKey(blank=True, help_text='The user message the run answers (empty for a continuation).', null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='prompted_runs', to='django_llmchat.message')),
            ],
            options={
                'db_table': 'llmchat_run',
                'ordering': ('created_at', 'id'),
                'abstract': False,
            },
        ),
        migrations.AddField(
            model_name='message',
            name='run',
            field=models.ForeignKey(blank=True, db_index=False, help_text="The run that stored the message (a prompt's runs are prompted_runs).", null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='messages', to='django_llmchat.run'),
        ),
        migrations.CreateModel(
            name='IdempotencyKey',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('scope', models.CharField(max_length=32)),
                ('key', models.CharField(max_length=255, validators=[django.core.validators.RegexValidator('\\A[\\x21-\\x7e](?:[\\x20-\\x7e]*[\\x21-\\x7e])?\\Z', 'printable ASCII, at most 255 characters')])),
                ('request_hash', models.CharField(max_length=64)),
                ('response_status', models.PositiveSmallIntegerField(blank=True, null=True)),
                ('response_body', models.JSONField(blank=True, null=True)),
                ('created_at', models.DateTimeField(auto_now_add=True, db_index=True)),
                ('chat', models.ForeignKey(help_text='The chat the request was on.', on_delete=django.db.models.deletion.CASCADE, related_name='idempotency_keys', to='django_llmchat.chat')),
                ('user', models.ForeignKey(db_index=False, on_delete=django.db.models.deletion.CASCADE, related_name='llmchat_idempotency_keys', to=settings.AUTH_USER_MODEL)),
                ('run', models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='idempotency_keys', to='django_llmchat.run')),
            ],
            options={
                'verbose_name': 'idempotency key',
                'db_table': 'llmchat_idempotency_key',
                'abstract': False,
            },
        ),
        migrations.AddField(
            model_name='chat',
            name='active_run',
            field=models.ForeignKey(blank=True, editable=False, help_text='The run working on the chat now (kept by django_llmchat.runs).', null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='+', to='django_llmchat.run'),
        ),
        migrations.CreateModel(
            name='ToolCall',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('call_id', models.CharField(max_length=255)),
                ('name', models.CharField(max_length=255)),
                ('arguments', models.JSONField(blank=True, default=dict)),
                ('thought_signature', models.TextField(blank=True)),
                ('approval', models.CharField(blank=True, default='', max_length=16)),
                ('created_at', models.DateTimeField(auto_now_add=True)),
                ('chat', models.ForeignKey(db_index=False, on_delete=django.db.models.deletion.CASCADE, related_name='tool_calls', to='django_llmchat.chat')),
                ('message', models.ForeignKey(db_index=False, on_delete=django.db.models.deletion.CASCADE, related_name='tool_calls', to='django_llmchat.message')),
            ],
            options={
                'db_table': 'llmchat_tool_call',
                'ordering': ('id',),
                'abstract': False,
            },
        ),
        migrations.AddField(
            model_name='message',
            name='parent_tool_call',
            field=models.OneToOneField(blank=True, null=True, on_delete=django.db.models.deletion.CASCADE, related_name='result', to='django_llmchat.toolcall'),
        ),
        migrations.CreateModel(
            name='Usage',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('operation', models.CharField(default='chat', max_length=32)),
                ('provider', models.CharField(blank=True, max_length=64)),
                ('model_id', models.CharField(blank=True, max_length=255)),
                ('status', models.CharField(default='pending', max_length=16)),
                ('input_tokens', models.PositiveIntegerField(blank=True, null=True)),
                ('output_tokens', models.PositiveIntegerField(blank=True, null=True)),
                ('cache_read_tokens', models.PositiveIntegerField(blank=True, null=True)),
                ('cache_write_tokens', models.PositiveIntegerField(blank=True, null=True)),
                ('thinking_tokens', models.PositiveIntegerField(blank=True, null=True)),
                ('input_cost', models.DecimalField(blank=True, decimal_places=10, max_digits=16, null=True)),
                ('output_cost', models.DecimalField(blank=True, decimal_places=10, max_digits=16, null=True)),
                ('cache_read_cost', models.DecimalField(blank=True, decimal_places=10, max_digits=16, null=True)),
                ('cache_write_cost', models.DecimalField(blank=True, decimal_places=10, max_digits=16, null=True)),
                ('thinking_cost', models.DecimalField(blank=True, decimal_places=10, max_digits=16, null=True)),
                ('total_cost', models.DecimalField(blank=True, decimal_places=10, max_digits=16, null=True)),
                ('duration_ms', models.PositiveIntegerField(blank=True, null=True)),
                ('first_token_ms', models.PositiveIntegerField(blank=True, null=True)),
                ('error', models.TextField(blank=True)),
                ('estimated', models.BooleanField(default=False, help_text='The tokens and cost are the estimate written before the provider call (the attempt is pending, or its process died before the vendor reported them).')),
                ('created_at', models.DateTimeField(auto_now_add=True)),
                ('chat_title', models.CharField(blank=True, editable=False, help_text="The chat's title, kept here when the chat is deleted (blank while it exists, and once the user's data is erased).", max_length=255)),
                ('chat', models.ForeignKey(blank=True, db_constraint=False, db_index=False, null=True, on_delete=django.db.models.deletion.DO_NOTHING, related_name='usages', to='django_llmchat.chat')),
                ('message', models.ForeignKey(blank=True, db_index=False, null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='usages', to='django_llmchat.message')),
                ('run', models.ForeignKey(blank=True, db_index=False, null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='usages', to='django_llmchat.run')),
                ('user', models.ForeignKey(blank=True, db_constraint=False, db_index=False, editable=False, null=True, on_delete=django.db.models.deletion.DO_NOTHING, related_name='llmchat_usages', to=settings.AUTH_USER_MODEL)),
            ],
            options={
                'verbose_name_plural': 'usage',
                'db_table': 'llmchat_usage',
                'ordering': ('created_at', 'id'),
                'abstract': False,
            },
        ),
        migrations.CreateModel(
            name='UsageDashboard',
            fields=[
            ],
            options={
                'verbose_name': 'usage dashboard',
                'verbose_name_plural': 'usage dashboard',
                'proxy': True,
                'indexes': [],
                'constraints': [],
            },
            bases=('django_llmchat.usage',),
        ),
        migrations.CreateModel(
            name='ChatShare',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('token_hash', models.CharField(editable=False, help_text="SHA-256 (hex) of the link's token; the token itself is not stored.", max_length=64, unique=True)),
                ('include', models.JSONField(blank=True, default=list, editable=False, help_text='What the snapshot shows besides the messages: "thinking", "tools".')),
                ('message_count', models.PositiveIntegerField(default=0, editable=False)),
                ('snapshot', models.JSONField(blank=True, default=dict, editable=False)),
                ('created_at', models.DateTimeField(auto_now_add=True)),
                ('chat', models.ForeignKey(db_index=False, on_delete=django.db.models.deletion.CASCADE, related_name='shares', to='django_llmchat.chat')),
            ],
            options={
                'db_table': 'llmchat_chat_share',
                'ordering': ('-created_at', '-id'),
                'abstract': False,
                'indexes': [models.Index(fields=['chat', '-created_at'], name='llmchat_share_chat_idx')],
            },
        ),
        migrations.CreateModel(
            name='ChatTag',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('name', models.CharField(max_length=64)),
                ('chat', models.ForeignKey(db_index=False, on_delete=django.db.models.deletion.CASCADE, related_name='tag_rows', to='django_llmchat.chat')),
            ],
            options={
                'db_table': 'llmchat_chat_tag',
                'ordering': ('name',),
                'indexes': [models.Index(fields=['name', 'chat'], name='llmchat_chat_tag_name_idx')],
                'constraints': [models.UniqueConstraint(fields=('chat', 'name'), name='llmchat_chat_tag_uniq')],
            },
        ),
        migrations.CreateModel(
            name='Feedback',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('rating', models.SmallIntegerField(help_text='1: thumbs up; -1: thumbs down.')),
                ('comment', models.TextField(blank=True, default='', help_text='What the user said about the reply (at most 2000 characters).')),
                ('created_at', models.DateTimeField(auto_now_add=True)),
                ('updated_at', models.DateTimeField(auto_now=True)),
                ('user', models.ForeignKey(blank=True, db_index=False, null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='+', to=settings.AUTH_USER_MODEL)),
                ('message', models.ForeignKey(db_index=False, on_delete=django.db.models.deletion.CASCADE, related_name='feedback', to='django_llmchat.message')),
            ],
            options={
                'verbose_name_plural': 'feedback',
                'db_table': 'llmchat_feedback',
                'ordering': ('message_id', 'id'),
                'abstract': False,
                'indexes': [models.Index(condition=models.Q(('user__isnull', False)), fields=['user'], name='llmchat_feedback_user_idx'), models.Index(fields=['rating'], name='llmchat_feedback_rating_idx')],
                'constraints': [models.CheckConstraint(condition=models.Q(('rating__in', (1, -1))), name='llmchat_feedback_rating_ck'), models.UniqueConstraint(fields=('message', 'user'), name='llmchat_feedback_one_per_user')],
            },
        ),
        migrations.CreateModel(
            name='Attachment',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('file', models.FileField(max_length=500, upload_to=django_llmchat.models.attachment.attachment_upload_to)),
                ('filename', models.CharField(max_length=255)),
                ('mime_type', models.CharField(max_length=255)),
                ('size', models.PositiveBigIntegerField(default=0)),
                ('sha256', models.CharField(blank=True, max_length=64)),
                ('created_at', models.DateTimeField(auto_now_add=True)),
                ('message', models.ForeignKey(db_index=False, on_delete=django.db.models.deletion.CASCADE, related_name='attachments', to='django_llmchat.message')),
            ],
            options={
                'db_table': 'llmchat_attachment',
                'ordering': ('id',),
                'abstract': False,
                'indexes': [models.Index(fields=['message'], name='llmchat_attachment_msg_idx')],
            },
        ),
        migrations.AddIndex(
            model_name='run',
            index=models.Index(fields=['chat', 'created_at', 'id'], name='llmchat_run_chat_idx'),
        ),
        migrations.AddIndex(
            model_name='run',
            index=models.Index(fields=['status', 'lease_expires_at'], name='llmchat_run_lease_idx'),
        ),
        migrations.AddIndex(
            model_name='run',
            index=models.Index(condition=models.Q(('status__in', ['queued', 'running'])), fields=['chat'], name='llmchat_run_open_idx'),
        ),
        migrations.AddConstraint(
            model_name='idempotencykey',
            constraint=models.UniqueConstraint(fields=('user', 'chat', 'scope', 'key'), name='llmchat_idempotency_key_chat'),
        ),
        migrations.AddIndex(
            model_name='chat',
            index=models.Index(fields=['user', '-updated_at'], name='llmchat_chat_user_idx'),
        ),
        migrations.AddIndex(
            model_name='chat',
            index=models.Index(fields=['provider', 'model_id'], name='llmchat_chat_model_idx'),
        ),
        migrations.AddIndex(
            model_name='chat',
            index=models.Index(fields=['user', 'archived', '-pinned', '-updated_at', '-id'], name='llmchat_chat_list_idx'),
        ),
        migrations.AddIndex(
            model_name='chat',
            index=models.Index(fields=['updated_at'], name='llmchat_chat_updated_idx'),
        ),
        migrations.AddIndex(
            model_name='chat',
            index=models.Index(condition=models.Q(('retention_days__isnull', False)), fields=['updated_at'], name='llmchat_chat_own_days_idx'),
        ),
        migrations.AddIndex(
            model_name='chat',
            index=models.Index(condition=models.Q(('forked_from__isnull', False)), fields=['forked_from'], name='llmchat_chat_fork_idx'),
        ),
        migrations.AddConstraint(
            model_name='chat',
            constraint=models.UniqueConstraint(condition=models.Q(('client_id', ''), _negated=True), fields=('user', 'client_id'), name='llmchat_chat_client_id_uniq'),
        ),
        migrations.AddIndex(
            model_name='toolcall',
            index=models.Index(fields=['message'], name='llmchat_tool_call_msg_idx'),
        ),
        migrations.AddIndex(
            model_name='toolcall',
            index=models.Index(fields=['chat', 'call_id'], name='llmchat_tool_call_chat_idx'),
        ),
        migrations.AddIndex(
            model_name='message',
            index=models.Index(fields=['chat', 'on_path', 'position', 'id'], name='llmchat_message_path_idx'),
        ),
        migrations.AddIndex(
            model_name='message',
            index=models.Index(fields=['parent'], name='llmchat_message_parent_idx'),
        ),
        migrations.AddIndex(
            model_name='message',
            index=models.Index(fields=['run'], name='llmchat_message_run_idx'),
        ),
        migrations.AddIndex(
            model_name='message',
            index=models.Index(condition=models.Q(('summary_until__isnull', False)), fields=['summary_until'], name='llmchat_message_summary_idx'),
        ),
        migrations.AddIndex(
            model_name='usage',
            index=models.Index(fields=['chat', 'created_at'], name='llmchat_usage_chat_idx'),
        ),
        migrations.AddIndex(
            model_name='usage',
            index=models.Index(fields=['message'], name='llmchat_usage_msg_idx'),
        ),
        migrations.AddIndex(
            model_name='usage',
            index=models.Index(fields=['run'], name='llmchat_usage_run_idx'),
        ),
        migrations.AddIndex(
            model_name='usage',
            index=models.Index(fields=['provider', 'model_id'], name='llmchat_usage_model_idx'),
        ),
        migrations.AddIndex(
            model_name='usage',
            index=models.Index(fields=['created_at'], name='llmchat_usage_created_idx'),
        ),
        migrations.AddIndex(
            model_name='usage',
            index=models.Index(fields=['user', 'created_at'], name='llmchat_usage_user_idx'),
        ),
        migrations.RunPython(search_index.forwards, search_index.backwards, elidable=False),
    ]
