"""Feedback on replies: ``llmchat_feedback``, a rating (+1 / -1) and a comment per user
per assistant message."""

import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('django_llmchat', '0011_usage_ledger'),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.CreateModel(
            name='Feedback',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('rating', models.SmallIntegerField(help_text='1: thumbs up; -1: thumbs down.')),
                ('comment', models.TextField(blank=True, default='', help_text='What the user said about the reply (at most 2000 characters).')),
                ('created_at', models.DateTimeField(auto_now_add=True)),
                ('updated_at', models.DateTimeField(auto_now=True)),
                ('message', models.ForeignKey(db_index=False, on_delete=django.db.models.deletion.CASCADE, related_name='feedback', to='django_llmchat.message')),
                ('user', models.ForeignKey(blank=True, db_index=False, null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='+', to=settings.AUTH_USER_MODEL)),
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
    ]
