"""The provider registry: names -> classes, and configured, cached instances.

``get_provider("anthropic")`` builds the provider from ``LLMCHAT["PROVIDERS"]["anthropic"]``
(``api_key``, ``base_url``, ``timeout``, ``max_retries``, ``api``, ``class``, and an
``options`` dict, which any other key joins), falling back to the vendor's usual
environment variables. Instances are cached per process and name, and rebuilt when
``LLMCHAT`` changes.
"""

from __future__ import annotations

import importlib
import os
import threading
from typing import TYPE_CHECKING, Any

from ..conf import on_change, settings
from ..errors import ConfigurationError

if TYPE_CHECKING:
    from .base import Provider

__all__ = [
    "PROVIDERS",
    "API_KEY_ENV",
    "BASE_URL_ENV",
    "get_provider",
    "provider_class",
    "provider_classes",
    "clear_provider_cache",
]

# name -> dotted path of the class (relative paths are under this package).
PROVIDERS: dict[str, str] = {
    "openai": ".openai_responses.OpenAIResponsesProvider",
    "anthropic": ".anthropic.AnthropicProvider",
    "gemini": ".gemini.GeminiProvider",
    "xai": ".openai_responses.XAIProvider",
    "ollama": ".openai_chat.OllamaProvider",
    "openrouter": ".openai_chat.OpenRouterProvider",
    "deepseek": ".openai_chat.DeepSeekProvider",
    "mistral": ".openai_chat.MistralProvider",
    "perplexity": ".openai_chat.PerplexityProvider",
    "openai_compatible": ".openai_chat.OpenAICompatibleProvider",
}

# ``"api"`` in a provider's settings picks another wire protocol for that name.
APIS: dict[str, str] = {
    "chat_completions": ".openai_chat.OpenAIChatProvider",
    "responses": ".openai_responses.OpenAIResponsesProvider",
}

# Environment variables read when the settings give no key, first match wins.
API_KEY_ENV: dict[str, tuple[str, ...]] = {
    "openai": ("OPENAI_API_KEY",),
    "anthropic": ("ANTHROPIC_API_KEY",),
    "gemini": ("GEMINI_API_KEY", "GOOGLE_API_KEY"),
    "xai": ("XAI_API_KEY",),
    "deepseek": ("DEEPSEEK_API_KEY",),
    "mistral": ("MISTRAL_API_KEY",),
    "openrouter": ("OPENROUTER_API_KEY",),
    "perplexity": ("PERPLEXITY_API_KEY",),
    "ollama": ("OLLAMA_API_KEY",),
}

BASE_URL_ENV: dict[str, tuple[str, ...]] = {
    "ollama": ("OLLAMA_BASE_URL", "OLLAMA_HOST"),
}

_CONFIG_KEYS = ("api_key", "base_url", "timeout", "max_retries", "api", "class", "options")

_lock = threading.Lock()
_instances: dict[str, Provider] = {}


def _import(path: str) -> type[Provider]:
    module_path, _, attr = path.rpartition(".")
    if module_path.startswith("."):
        module = importlib.import_module(module_path, __name__)
    else:
        module = importlib.import_module(module_path)
    return getattr(module, attr)


def _settings_for(name: str) -> dict[str, Any]:
    configured = settings.PROVIDERS or {}
    value = configured.get(name)
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ConfigurationError(f'LLMCHAT["PROVIDERS"]["{name}"] must be a dict of settings.')
    return value


def provider_class(name: str) -> type[Provider]:
    """The class serving ``name``: a ``class`` or ``api`` setting, else the registry."""
    config = _settings_for(name)
    path = config.get("class")
    if not path and config.get("api"):
        api = config["api"]
        if api not in APIS:
            raise ConfigurationError(
                f'LLMCHAT["PROVIDERS"]["{name}"]["api"] is {api!r}; '
                f"expected one of {', '.join(sorted(APIS))}."
            )
        builtin = PROVIDERS.get(name, "")
        if builtin.startswith(APIS[api].rpartition(".")[0] + "."):
            path = builtin  # already speaks it (e.g. "xai" and Responses)
        elif api == "chat_completions" and name != "openai":
            path = PROVIDERS["openai_compatible"]  # any compatible server at base_url
        else:
            path = APIS[api]
    if not path:
        path = PROVIDERS.get(name)
    if not path:
        known = ", ".join(sorted(PROVIDERS))
        raise ConfigurationError(
            f'Unknown provider "{name}". Built-in providers: {known}. A custom one needs '
            f'LLMCHAT["PROVIDERS"]["{name}"] with a "class" (dotted path) or '
            '"api": "chat_completions" and a "base_url".'
        )
    try:
        return _import(path)
    except (ImportError, AttributeError) as exc:
        raise ConfigurationError(
            f'Provider "{name}": cannot import {path.lstrip(".")} ({exc}).'
        ) from None


def provider_classes() -> dict[str, type[Provider]]:
    """Every built-in provider name and its class; one that fails to import is left out."""
    out: dict[str, type[Provider]] = {}
    for name, path in PROVIDERS.items():
        try:
            out[name] = _import(path)
        except (ImportError, AttributeError):
            continue
    return out


def _env(names: tuple[str, ...]) -> str | None:
    for env in names:
        value = os.environ.get(env)
        if value:
            return value
    return None


def _ollama_url(value: str) -> str:
    """``OLLAMA_HOST`` may be ``0.0.0.0:11434`` or a URL without ``/v1``."""
    url = value.strip().rstrip("/")
    if "://" not in url:
        url = "http://" + url
    scheme, _, rest = url.partition("://")
    if "/" not in rest:
        url += "/v1"
    return url.replace("://0.0.0.0", "://localhost")


def build_provider(name: str) -> Provider:
    """A new provider for ``name`` from settings and environment (uncached)."""
    cls = provider_class(name)
    config = _settings_for(name)
    envs = API_KEY_ENV.get(name) or ((cls.api_key_env,) if cls.api_key_env else ())
    api_key = config.get("api_key") or _env(envs)
    if cls.requires_api_key and not api_key:
        where = f'LLMCHAT["PROVIDERS"]["{name}"]["api_key"]'
        if envs:
            where += " or the " + " / ".join(envs) + " environment variable"
        raise ConfigurationError(f'No API key for provider "{name}": set {where}.')
    base_url = config.get("base_url")
    if not base_url and name in BASE_URL_ENV:
        found = _env(BASE_URL_ENV[name])
        base_url = _ollama_url(found) if found and name == "ollama" else found
    options = dict(config.get("options") or {})
    options.update((k, v) for k, v in config.items() if k not in _CONFIG_KEYS)
    return cls(
        api_key=api_key,
        base_url=base_url,
        timeout=config.get("timeout"),
        max_retries=config.get("max_retries"),
        options=options,
        name=name,
    )


def get_provider(name: str | None = None) -> Provider:
    """The configured provider called ``name`` (default ``LLMCHAT["DEFAULT_PROVIDER"]``),
    one instance per process, so its HTTP connection pool is reused."""
    name = name or settings.DEFAULT_PROVIDER
    provider = _instances.get(name)
    if provider is None:
        with _lock:
            provider = _instances.get(name)
            if provider is None:
                provider = _instances[name] = build_provider(name)
    return provider


def clear_provider_cache() -> None:
    """Forget the cached instances (done for you when ``LLMCHAT`` changes)."""
    with _lock:
        _instances.clear()


on_change(clear_provider_cache)


# The face for writing and calling providers (read lazily: a protocol module is imported
# when one of its names is first read).
_EXPORTS = {
    **{
        name: ".types"
        for name in (
            "AttachmentData",
            "Capabilities",
            "ProviderMessage",
            "ProviderRequest",
            "ProviderResponse",
            "ToolCallData",
            "ToolSpec",
        )
    },
    **{
        name: ".base"
        for name in ("Provider", "as_authentication_error", "copy_params", "merge_vendor_options")
    },
    **{
        name: ".openai_chat"
        for name in (
            "ChatCompletionsProvider",
            "OpenAIChatProvider",
            "OllamaProvider",
            "OpenRouterProvider",
            "DeepSeekProvider",
            "MistralProvider",
            "PerplexityProvider",
            "OpenAICompatibleProvider",
        )
    },
    "OpenAIResponsesProvider": ".openai_responses",
    "XAIProvider": ".openai_responses",
    "AnthropicProvider": ".anthropic",
    "GeminiProvider": ".gemini",
    "redact_request": ".redact",
    "feature_matrix": ".matrix",
}
__all__ += sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(module, __name__), name)


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
