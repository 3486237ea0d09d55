"""Every ```python block in the docs runs: the examples of a page in one namespace, and
each settings example (first line ``# settings.py``) on its own, its ``LLMCHAT`` then
passing the system checks. The JavaScript of docs/frontends.md, docs/assistant-ui.md,
docs/rest.md and docs/events.md runs in the browser and node tests (tests/browser/,
tests/js/); ``JS_RUN_BY`` below names the test of each block, and a block none runs fails.

A page's examples run as they would pasted into ``manage.py shell`` of a new project, and
pasted twice: the hosts are those a ``startproject`` in debug mode answers (not the test
client's ``testserver``), and the second run finds the rows of the first in the database
(so an example that creates a fixed username or looks a row up by a fixed id fails). A
block after ``<!-- pasted: manage_py_shell -->`` needs its page's settings: it runs in a
real ``manage.py shell`` (tests/test_docs_paste.py)."""

import re
import sys
import types
from pathlib import Path

import pytest

DOCS = Path(__file__).resolve().parent.parent / "docs"
BLOCK = re.compile(r"^```python\n(.*?)^```", re.S | re.M)
SHELL_BLOCK = re.compile(r"^<!-- pasted: manage_py_shell -->\n```python\n(.*?)^```", re.S | re.M)
# the hosts a `manage.py shell` of a new startproject (DEBUG = True, ALLOWED_HOSTS = [])
# answers
SHELL_HOSTS = [".localhost", "127.0.0.1", "[::1]"]
# Settings examples are marked by their first line and checked apart (below).
SKIP_MARKERS = ("# settings.py",)


def pages():
    for path in sorted(DOCS.rglob("*.md")):
        text = path.read_text()
        shell = set(SHELL_BLOCK.findall(text))
        blocks = [
            b for b in BLOCK.findall(text) if not b.startswith(SKIP_MARKERS) and b not in shell
        ]
        if blocks:
            yield pytest.param(path, blocks, id=str(path.relative_to(DOCS)))


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("path, blocks", list(pages()))
def test_docs_examples_run(path, blocks):
    from django.test import override_settings

    # a real module, so classes defined in the examples (agents) import by dotted path: a
    # page's agents are a module of the project (the pages say so)
    name = "docs_" + re.sub(r"\W", "_", str(path.relative_to(DOCS).with_suffix("")))
    for paste in ("first", "second"):
        module = types.ModuleType(name)
        sys.modules[name] = module
        try:
            with override_settings(ALLOWED_HOSTS=SHELL_HOSTS):
                for code in blocks:
                    try:
                        exec(compile(code, str(path), "exec"), module.__dict__)
                    except Exception as exc:
                        raise AssertionError(f"the {paste} paste of {path.name}: {exc!r}") from exc
        finally:
            sys.modules.pop(name, None)


SETTINGS_MARKER = "# settings.py"


def settings_blocks():
    for path in sorted(DOCS.rglob("*.md")):
        for number, block in enumerate(BLOCK.findall(path.read_text())):
            if block.startswith(SETTINGS_MARKER):
                yield pytest.param(path, block, id=f"{path.relative_to(DOCS)}#{number}")


@pytest.mark.parametrize("path, block", list(settings_blocks()))
def test_docs_settings_examples_pass_the_system_checks(path, block, monkeypatch):
    """The settings examples run (with dummy keys in the environment) and their ``LLMCHAT``
    passes every system check of the app."""
    import os

    from django.test import override_settings

    from django_llmchat.checks import check_settings

    class Environment(dict):
        """The process environment, with a dummy value for any key the example reads."""

        def __missing__(self, key):
            return "dummy-key"

    monkeypatch.setattr(os, "environ", Environment(os.environ))
    # pasted into a project's settings (tests/test_docs_paste.py pastes them for real)
    namespace: dict = {
        "os": os,
        "__name__": "docs_settings",
        "INSTALLED_APPS": ["django.contrib.admin", "django.contrib.auth"],
        "MIDDLEWARE": ["django.middleware.common.CommonMiddleware"],
        # as startproject writes it
        "DATABASES": {"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": "db.sqlite3"}},
    }
    # the quickstart's settings first, which a block adds to
    quickstart = next(b for b in BLOCK.findall((DOCS / "quickstart.md").read_text()))
    exec(compile(quickstart, "quickstart.md", "exec"), namespace)
    exec(compile(block, str(path), "exec"), namespace)
    if "LLMCHAT" in namespace:
        with override_settings(LLMCHAT=namespace["LLMCHAT"]):
            problems = check_settings()
        assert problems == [], [f"{p.id}: {p.msg}" for p in problems]


def test_the_why_page_compares_each_peer_with_links_and_is_reachable():
    """docs/why.md: each peer in the table with a link to its own docs, a "what to pick
    when" list, and the page reachable from the nav, the home page and the README."""
    root = DOCS.parent
    text = (DOCS / "why.md").read_text()
    table = text.split("## Side by side", 1)[1].split("## What to pick when", 1)[0]
    head = table.strip().splitlines()[0]
    assert [c.strip() for c in head.strip("|").split("|")][1:] == [
        "Stores",
        "Runs",
        "Streams",
        "Costs",
    ]
    peers = {
        "LiteLLM": "docs.litellm.ai",
        "pydantic-ai": "ai.pydantic.dev",
        "simonw/llm": "llm.datasette.io",
        "RubyLLM": "rubyllm.com",
        "LangGraph": "docs.langchain.com",
        "Vercel's Chatbot template": "vercel.com",
    }
    rows = [line for line in table.splitlines() if line.startswith("| ")]
    for name, host in peers.items():
        row = next((r for r in rows if name in r.split("|")[1]), None)
        assert row is not None, f"no row for {name}"
        assert f"(https://{host}" in row, f"{name}: no link to its docs"
        assert row.count("|") == 6, f"{name}: not one cell per column"
    picks = text.split("## What to pick when", 1)[1]
    for name in ("django-llmchat", "LiteLLM", "pydantic-ai", "simonw/llm", "RubyLLM"):
        assert name in picks
    assert "LangGraph" in picks and "Vercel" in picks
    assert "why.md" in (root / "mkdocs.yml").read_text()
    assert "(docs/why.md)" in (root / "README.md").read_text()
    assert "(why.md)" in (DOCS / "index.md").read_text()


INSTALL_LINE = re.compile(r'pip install "django-llmchat\[(?P<extras>[\w,]+)\]"\s+#\s*(?P<note>.*)')
PACKAGE_NAME = re.compile(r"\b[a-z0-9]+(?:-[a-z0-9]+)+\b")  # opentelemetry-api


def test_an_install_lines_comment_names_what_its_extras_install():
    """A ``pip install "django-llmchat[extra]"  # ...`` line whose comment names packages
    names each package the extras install (pyproject.toml), and no other: the ``otel``
    extra's comment said ``opentelemetry-api`` after it brought the SDK too."""
    import tomllib

    root = DOCS.parent
    extras = tomllib.loads((root / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]

    def names(requirements: list[str]) -> set[str]:
        return {re.match(r"[\w.-]+", r)[0].lower().replace("_", "-") for r in requirements}

    known = set().union(*(names(reqs) for reqs in extras.values()))
    checked = 0
    for path in [root / "README.md", *sorted(DOCS.rglob("*.md"))]:
        for line in path.read_text().splitlines():
            found = INSTALL_LINE.search(line)
            if not found:
                continue
            note = found["note"].lower()
            named = set(PACKAGE_NAME.findall(note))
            named |= {n for n in known if re.search(rf"(?<![\w-]){re.escape(n)}(?![\w-])", note)}
            if not named:
                continue
            wanted = set().union(*(names(extras[e]) for e in found["extras"].split(",")))
            assert named == wanted, f"{path.name}: {line.strip()!r} installs {sorted(wanted)}"
            checked += 1
    assert checked, "no install line with a comment naming packages"


def test_the_readme_says_what_pytest_args_and_redis_url_do():
    """The README's test section names ``PYTEST_ARGS`` (what ``make test`` passes to pytest)
    and ``REDIS_URL`` (which turns on the tests that need Redis), each with what it does,
    as the Makefile and the tests use them."""
    root = DOCS.parent
    readme = (root / "README.md").read_text()
    section = readme.split("## The two commands", 1)[1].split("\n## ", 1)[0]
    text = " ".join(section.split())
    assert re.search(r"`PYTEST_ARGS` passes arguments to `make test`'s pytest", text)
    assert 'make test PYTEST_ARGS="-k ' in text, "an example of PYTEST_ARGS"
    assert re.search(r"`REDIS_URL=redis://[\w.:/]+` turns on the tests that need Redis", text)
    assert "$(BIN)/python -m pytest $(PYTEST_ARGS)" in (root / "Makefile").read_text()
    assert any(
        'require_service("REDIS_URL")' in path.read_text()
        for path in (root / "tests").rglob("*.py")
    ), "no test turned on by REDIS_URL"


# The JavaScript of these pages and the test that runs each block, by the identifier the
# test picks it with: a string only that block of its page has, the block's
# ``<!-- pasted: <mark> -->``, or the heading of its section (every block under it).
JS_PAGES = ("frontends.md", "assistant-ui.md", "rest.md", "events.md")
JS_RUN_BY = {
    "frontends.md": {
        "export function ChatLoader": "tests/browser/test_assistant_ui.py",
        "async function wholeStreams": "tests/js/retry-resume.test.mjs",
        "async function editMessage": "tests/js/branches.test.mjs",
        "function MessageTools": "tests/browser/test_assistant_ui.py",
        "node": "tests/test_docs_paste.py",  # <!-- pasted: node -->
        "import { fetchEventSource }": "tests/js/retry-resume.test.mjs",
        "### Same origin: the session cookie and CSRF": "tests/browser/test_chat_page.py",
        "api/auth/token/": "tests/js/signing-in.test.mjs",
        "const chats = await": "tests/js/signing-in.test.mjs",
        "async function follow": "tests/js/signing-in.test.mjs",
    },
    "assistant-ui.md": {"assistant-ui": "tests/browser/test_assistant_ui.py"},
    "rest.md": {
        "async function ask(": "tests/browser/test_chat_page.py",
        "new EventSource(run.events_url)": "tests/browser/test_chat_page.py",
    },
    "events.md": {'source.addEventListener("text_delta"': "tests/browser/test_chat_page.py"},
}
JS_FENCE = re.compile(
    r"^(?:<!-- pasted: (?P<mark>[\w-]+) -->\n)?```(?:js|javascript|jsx|tsx)\n(?P<body>.*?)^```",
    re.S | re.M,
)


def _js_blocks(page: str) -> list[dict]:
    """The page's JavaScript blocks: text, mark, the heading of the section holding it."""
    text = (DOCS / page).read_text()
    headings, fenced, offset = [], False, 0
    for line in text.splitlines(keepends=True):
        fenced ^= line.startswith("```")
        if not fenced and line.startswith("#"):
            headings.append((offset, line.strip()))
        offset += len(line)
    return [
        {
            "body": m["body"],
            "mark": m["mark"],
            "heading": [h for at, h in headings if at < m.start()][-1],
            "first": m["body"].splitlines()[0],
        }
        for m in JS_FENCE.finditer(text)
    ]


def _names(test: str, identifier: str) -> bool:
    """Whether the test file has ``identifier`` as a string (a mark: in its comment form)."""
    path = DOCS.parent / test
    if path.suffix != ".py":
        return any(f"{q}{identifier}{q}" in path.read_text() for q in "\"'`")
    import ast

    strings = [
        node.value
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.Constant) and isinstance(node.value, str)
    ]
    return identifier in strings or any(f"<!-- pasted: {identifier} -->" in s for s in strings)


@pytest.mark.parametrize("page", JS_PAGES)
def test_every_javascript_block_of_the_frontend_pages_is_run_by_a_test(page):
    """Each ``js``/``javascript``/``jsx``/``tsx`` block of the frontend pages is picked by a
    test that runs it (JS_RUN_BY names the test and the identifier it picks the block
    with; the test must have it as a string); a new block with no test fails here."""
    blocks = _js_blocks(page)
    run = set()
    for identifier, test in JS_RUN_BY[page].items():
        assert _names(test, identifier), f"{test} does not pick a block by {identifier!r}"
        picked = [
            i
            for i, b in enumerate(blocks)
            if identifier == b["heading"] or identifier == b["mark"] or identifier in b["body"]
        ]
        by_text = [i for i in picked if identifier in blocks[i]["body"]]
        assert picked and len(by_text) <= 1, f"{identifier!r} picks blocks {picked} of {page}"
        run.update(picked)
    missing = [b["first"] for i, b in enumerate(blocks) if i not in run]
    assert not missing, f"docs/{page}: blocks no test runs (first lines): {missing}"
