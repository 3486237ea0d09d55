import pytest
from django.core.management import call_command
from django.test import override_settings

from django_llmchat.checks import check_settings


def ids(errors):
    return sorted(e.id for e in errors)


def test_defaults_are_clean():
    assert check_settings() == []


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
        ({"EVENTS_HEARTBEAT": 0}, "llmchat.E017", "LLMCHAT['EVENTS_HEARTBEAT']"),
        ({"EVENTS_HEARTBEAT": 60}, "llmchat.E017", "LLMCHAT['EVENTS_HEARTBEAT']"),
        ({"EVENTS_HEARTBEAT": "3s"}, "llmchat.E017", "LLMCHAT['EVENTS_HEARTBEAT']"),
        ({"RUN_LEASE": 0.1}, "llmchat.E002", "LLMCHAT['RUN_LEASE']"),
        ({"RUN_MAX_ATTEMPTS": 0}, "llmchat.E002", "LLMCHAT['RUN_MAX_ATTEMPTS']"),
        ({"TOOL_RESULT_MAX_CHARS": 0}, "llmchat.E002", "LLMCHAT['TOOL_RESULT_MAX_CHARS']"),
        ({"TOOL_RESULT_MAX_CHARS": None}, "llmchat.E002", "LLMCHAT['TOOL_RESULT_MAX_CHARS']"),
        ({"TOOL_RESULT_MAX_CHARS": 1.5}, "llmchat.E002", "LLMCHAT['TOOL_RESULT_MAX_CHARS']"),
        ({"RECOVER_QUEUED_AFTER": "5m"}, "llmchat.E002", "LLMCHAT['RECOVER_QUEUED_AFTER']"),
        ({"CANCEL_ON_DISCONNECT": "yes"}, "llmchat.E013", "LLMCHAT['CANCEL_ON_DISCONNECT']"),
        (
            {"ADMISSION_SYNCHRONOUS_COMMIT": "on"},
            "llmchat.E026",
            "LLMCHAT['ADMISSION_SYNCHRONOUS_COMMIT']",
        ),
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


def keep_recent(messages, window):
    return messages[-2:]


def count_words(message):
    return len(message.content.split())


REGISTRIES = {
    "HISTORY_PROCESSORS": {"recent": f"{__name__}.keep_recent"},
    "TOKEN_ESTIMATORS": {"words": f"{__name__}.count_words", "chars": lambda m: 1},
}


@pytest.mark.parametrize(
    "llmchat, check_id, words",
    [
        ({"HISTORY_PROCESSORS": ["x"]}, "llmchat.E023", "must be a dict"),
        ({"HISTORY_PROCESSORS": {"my.policy": "a.b"}}, "llmchat.E023", "no dots"),
        ({"HISTORY_PROCESSORS": {"window": f"{__name__}.keep_recent"}}, "llmchat.E023", "built-in"),
        ({"HISTORY_PROCESSORS": {"p": "no_such_module.f"}}, "llmchat.E023", "cannot be imported"),
        ({"HISTORY_PROCESSORS": {"p": "django_llmchat.conf.DEFAULTS"}}, "llmchat.E023", "callable"),
        ({"TOKEN_ESTIMATORS": "words"}, "llmchat.E024", "must be a dict"),
        ({"IDEMPOTENCY_TTL": 0}, "llmchat.E025", "IDEMPOTENCY_TTL"),
        ({"IDEMPOTENCY_TTL": "1d"}, "llmchat.E025", "IDEMPOTENCY_TTL"),
        ({"IDEMPOTENCY_TTL": True}, "llmchat.E025", "IDEMPOTENCY_TTL"),
        ({"TOKEN_ESTIMATORS": {"": "a.b"}}, "llmchat.E024", "a name is"),
        ({"TOKEN_ESTIMATORS": {"w": "nope.words"}}, "llmchat.E024", "cannot be imported"),
        ({"HISTORY": {"strategy": "recent"}}, "llmchat.E014", "'recent'"),
        ({"HISTORY": {"estimator": "words"}}, "llmchat.E014", "'words'"),
    ],
)
def test_bad_registries_name_the_setting(llmchat, check_id, words):
    with override_settings(LLMCHAT=llmchat):
        errors = check_settings()
    found = [e for e in errors if e.id == check_id]
    assert found and words in found[0].msg, [(e.id, e.msg) for e in errors]
    key = next(iter(llmchat))
    assert f"LLMCHAT[{key!r}]" in found[0].msg


def test_registered_names_pass_the_checks():
    for history in ({"strategy": "recent"}, {"estimator": "words"}, "recent", "all"):
        with override_settings(LLMCHAT={**REGISTRIES, "HISTORY": history}):
            assert check_settings() == []
    # a dotted path stays the project's choice
    with override_settings(LLMCHAT={"HISTORY": f"{__name__}.keep_recent"}):
        assert check_settings() == []
