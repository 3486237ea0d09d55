"""Spending limits: ``llmchat_limit`` (a user's own limits over the settings), the chat's
user copied onto each usage row (filled in here for the rows already there) with the
index ``(user, created_at)`` the limits sum by, and an index of the open runs, which the
concurrent-runs limit counts."""

import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models
from django.db.models import OuterRef, Subquery


def copy_users(apps, schema_editor):
    Chat = apps.get_model("django_llmchat", "Chat")
    Usage = apps.get_model("django_llmchat", "Usage")
    db = schema_editor.connection.alias
    user = Chat.objects.using(db).filter(pk=OuterRef("chat_id")).values("user_id")[:1]
    Usage.objects.using(db).filter(user__isnull=True).update(user_id=Subquery(user))


class Migration(migrations.Migration):

    dependencies = [
        ('django_llmchat', '0007_usage_dashboard'),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
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
            ],
            options={
                'verbose_name': 'spending limit',
                'db_table': 'llmchat_limit',
                'abstract': False,
            },
        ),
        migrations.AddField(
            model_name='usage',
            name='user',
            field=models.ForeignKey(blank=True, db_index=False, editable=False, null=True, on_delete=django.db.models.deletion.CASCADE, related_name='llmchat_usages', to=settings.AUTH_USER_MODEL),
        ),
        migrations.RunPython(copy_users, migrations.RunPython.noop, elidable=True),
        migrations.AddIndex(
            model_name='run',
            index=models.Index(condition=models.Q(('status__in', ['queued', 'running'])), fields=['chat'], name='llmchat_run_open_idx'),
        ),
        migrations.AddIndex(
            model_name='usage',
            index=models.Index(fields=['user', 'created_at'], name='llmchat_usage_user_idx'),
        ),
        migrations.AddField(
            model_name='limit',
            name='user',
            field=models.OneToOneField(on_delete=django.db.models.deletion.CASCADE, related_name='llmchat_limit', to=settings.AUTH_USER_MODEL),
        ),
    ]
