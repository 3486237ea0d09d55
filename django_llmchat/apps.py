from django.apps import AppConfig


class LLMChatConfig(AppConfig):
    name = "django_llmchat"
    label = "django_llmchat"
    verbose_name = "LLM chats"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # the system checks, and the Celery tasks (the run module sends them by name)
        from . import checks, tasks  # noqa: F401
