"""django-llmchat: LLM conversations as Django models."""

__version__ = "0.1.0"
