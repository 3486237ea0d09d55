from __future__ import annotations

from django.db import models


class AbstractLLMModel(models.Model):
    """One model a provider serves: limits, modalities, capabilities and prices."""

    provider = models.CharField(max_length=64)
    model_id = models.CharField(max_length=255)
    name = models.CharField(max_length=255)
    family = models.CharField(max_length=128, blank=True)
    context_window = models.PositiveIntegerField(null=True, blank=True)
    max_output_tokens = models.PositiveIntegerField(null=True, blank=True)
    modalities = models.JSONField(default=dict, blank=True)
    capabilities = models.JSONField(default=list, blank=True)
    pricing = models.JSONField(default=dict, blank=True)
    metadata = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        abstract = True
        verbose_name = "LLM model"
        ordering = ("provider", "model_id")

    def __str__(self) -> str:
        return f"{self.provider}/{self.model_id}"

    def supports(self, capability: str) -> bool:
        return capability in (self.capabilities or [])


class LLMModel(AbstractLLMModel):
    class Meta(AbstractLLMModel.Meta):
        db_table = "llmchat_llm_model"
        constraints = [
            models.UniqueConstraint(
                fields=["provider", "model_id"], name="llmchat_llm_model_provider_model_uniq"
            )
        ]
        indexes = [models.Index(fields=["model_id"], name="llmchat_llm_model_model_idx")]
