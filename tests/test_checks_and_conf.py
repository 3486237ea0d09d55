import pytest
from django.core.management import call_command
from django.test import override_settings

from django_llmchat.checks import check_settings
from django_llmchat.conf import settings as llm_settings


def ids(errors):
    return sorted(e.id for e in errors)


def test_defaults_are_clean():
    assert check_settings() == []


def test_conf_reloads_on_override_settings():
    assert llm_settings.MAX_STEPS == 16
    with override_settings(LLMCHAT={"MAX_STEPS": 3}):
        assert llm_settings.MAX_STEPS == 3
    assert llm_settings.MAX_STEPS == 16
    with pytest.raises(AttributeError, match="NOPE"):
        _ = llm_settings.NOPE


@pytest.mark.parametrize(
    "value, expected_id, named",
    [
        ("not a dict", "llmchat.E001", "LLMCHAT"),
        ({"MAX_STEPS": 0}, "llmchat.E002", "LLMCHAT['MAX_STEPS']"),
        ({"MAX_RETRIES": "3"}, "llmchat.E002", "LLMCHAT['MAX_RETRIES']"),
        ({"PROVIDERS": []}, "llmchat.E003", "LLMCHAT['PROVIDERS']"),
        ({"PROVIDERS": {"nope": {}}}, "llmchat.E004", "LLMCHAT['PROVIDERS']['nope']"),
        (
            {"PROVIDERS": {"openai": {"base_url": "ftp://x"}}},
            "llmchat.E005",
            "LLMCHAT['PROVIDERS']['openai']['base_url']",
        ),
        (
            {"PROVIDERS": {"openai": {"api_key": 123}}},
            "llmchat.E006",
            "LLMCHAT['PROVIDERS']['openai']['api_key']",
        ),
        ({"DEFAULT_PROVIDER": "acme"}, "llmchat.E007", "LLMCHAT['DEFAULT_PROVIDER']"),
        ({"DEFAULT_MODEL": ""}, "llmchat.E008", "LLMCHAT['DEFAULT_MODEL']"),
        ({"EVENTS_URL": "http://x"}, "llmchat.E009", "LLMCHAT['EVENTS_URL']"),
        (
            {"ALLOWED_ATTACHMENT_TYPES": "image/png"},
            "llmchat.E010",
            "LLMCHAT['ALLOWED_ATTACHMENT_TYPES']",
        ),
        ({"TASK_MAX_RETRIES": -1}, "llmchat.E002", "LLMCHAT['TASK_MAX_RETRIES']"),
        (
            {"TASKS_EAGER_WITHOUT_BROKER": "yes"},
            "llmchat.E011",
            "LLMCHAT['TASKS_EAGER_WITHOUT_BROKER']",
        ),
        ({"EVENTS_KEY_PREFIX": ""}, "llmchat.E012", "LLMCHAT['EVENTS_KEY_PREFIX']"),
        ({"RUN_LEASE": 0.1}, "llmchat.E002", "LLMCHAT['RUN_LEASE']"),
        ({"RUN_MAX_ATTEMPTS": 0}, "llmchat.E002", "LLMCHAT['RUN_MAX_ATTEMPTS']"),
        ({"RECOVER_QUEUED_AFTER": "5m"}, "llmchat.E002", "LLMCHAT['RECOVER_QUEUED_AFTER']"),
        ({"CANCEL_ON_DISCONNECT": "yes"}, "llmchat.E013", "LLMCHAT['CANCEL_ON_DISCONNECT']"),
        (
            {"TOKEN_THROTTLE_RATES": {"username": "20/fortnight"}},
            "llmchat.E015",
            "LLMCHAT['TOKEN_THROTTLE_RATES']",
        ),
        (
            {"TOKEN_THROTTLE_RATES": {"email": "5/min"}},
            "llmchat.E015",
            "LLMCHAT['TOKEN_THROTTLE_RATES']",
        ),
        ({"TOKEN_THROTTLE_RATES": "20/hour"}, "llmchat.E015", "LLMCHAT['TOKEN_THROTTLE_RATES']"),
        (
            {"TOKEN_THROTTLE_RATES": {"address": "0/min"}},
            "llmchat.E015",
            "LLMCHAT['TOKEN_THROTTLE_RATES']",
        ),
        ({"TYPO": 1}, "llmchat.W001", "LLMCHAT['TYPO']"),
        (
            {"PROVIDERS": {"openai": {"apikey": "x"}}},
            "llmchat.W002",
            "LLMCHAT['PROVIDERS']['openai']['apikey']",
        ),
    ],
)
def test_bad_settings_name_the_setting(value, expected_id, named):
    with override_settings(LLMCHAT=value):
        errors = check_settings()
    assert expected_id in ids(errors)
    error = next(e for e in errors if e.id == expected_id)
    assert named in error.msg


@pytest.mark.parametrize(
    "rates", [None, {}, {"username": None}, {"username": "5/minute", "address": "1/s"}]
)
def test_token_throttle_rates_accepted(rates):
    with override_settings(LLMCHAT={"TOKEN_THROTTLE_RATES": rates}):
        assert ids(check_settings()) == []


@pytest.mark.parametrize(
    "proxies, ok", [(None, True), (0, True), (2, True), ("1", False), (-1, False), (True, False)]
)
def test_num_proxies_is_a_count_of_trusted_proxies(proxies, ok):
    with override_settings(REST_FRAMEWORK={"NUM_PROXIES": proxies}):
        errors = check_settings()
    assert ids(errors) == ([] if ok else ["llmchat.E016"])
    if not ok:
        assert "REST_FRAMEWORK['NUM_PROXIES']" in errors[0].msg


def test_custom_provider_with_api_is_accepted():
    with override_settings(
        LLMCHAT={
            "PROVIDERS": {
                "vllm": {"api": "chat_completions", "base_url": "http://127.0.0.1:8001/v1"}
            }
        }
    ):
        assert check_settings() == []
    with override_settings(LLMCHAT={"PROVIDERS": {"vllm": {"api": "soap"}}}):
        [error] = check_settings()
    assert error.id == "llmchat.E004" and "LLMCHAT['PROVIDERS']['vllm']['api']" in error.msg


def test_custom_provider_class_is_accepted():
    with override_settings(
        LLMCHAT={"PROVIDERS": {"mine": {"class": "x.y.Provider"}}, "DEFAULT_PROVIDER": "mine"}
    ):
        assert check_settings() == []


def test_key_value_never_in_check_messages():
    with override_settings(
        LLMCHAT={"PROVIDERS": {"openai": {"api_key": "sk-secret-123", "base_url": "bad"}}}
    ):
        errors = check_settings()
    assert errors and all("sk-secret-123" not in (e.msg + (e.hint or "")) for e in errors)


@pytest.mark.django_db
def test_migrations_are_in_sync():
    call_command("makemigrations", "django_llmchat", "--check", "--dry-run", verbosity=0)
