from django.apps import AppConfig


class LLMChatConfig(AppConfig):
    name = "django_llmchat"
    label = "django_llmchat"
    verbose_name = "LLM chats"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from . import checks  # noqa: F401  (registers system checks)
