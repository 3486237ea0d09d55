"""The public face: the few modules users import from (``django_llmchat.FACE``), each name
of it importable, the package importable before the app registry is ready, and the docs
importing nothing else."""

import importlib
import re
import subprocess
import sys
from pathlib import Path

import pytest

import django_llmchat

ROOT = Path(__file__).resolve().parent.parent
BLOCK = re.compile(r"^```(?:python|py|pycon)\n(.*?)^```", re.S | re.M)
IMPORT = re.compile(
    r"^\s*(?:from\s+(django_llmchat[\w.]*)\s+import\s+(\([^)]*\)|.*)"
    r"|import\s+(django_llmchat[\w.]*))",
    re.M,
)


def doc_pages():
    return [*sorted((ROOT / "docs").rglob("*.md")), ROOT / "README.md"]


def test_the_face_is_at_most_five_modules_listed_in_one_place():
    assert len(django_llmchat.FACE) <= 5
    assert django_llmchat.FACE[0] == "django_llmchat"
    assert django_llmchat.URLCONF == "django_llmchat.api.urls"


@pytest.mark.parametrize("module", django_llmchat.FACE)
def test_every_name_of_the_face_imports(module):
    face = importlib.import_module(module)
    assert face.__all__, module
    for name in {*face.__all__, *getattr(face, "_EXPORTS", ())}:
        assert getattr(face, name) is not None, f"{module}.{name}"
    assert set(face.__all__) <= set(dir(face))


def test_a_star_import_needs_no_optional_part():
    assert not django_llmchat._OPTIONAL & set(django_llmchat.__all__)
    assert django_llmchat._OPTIONAL <= set(dir(django_llmchat))


def test_the_face_modules_are_attributes_of_the_package():
    code = (
        "import django_llmchat\n"
        "assert django_llmchat.events.TextDelta('x').content == 'x'\n"
        "errors = django_llmchat.errors\n"
        "assert issubclass(errors.ProviderError, errors.LLMChatError)\n"
        "assert {'events', 'errors', 'testing', 'providers'} <= set(dir(django_llmchat))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stderr


def test_an_unknown_name_is_an_attribute_error():
    with pytest.raises(AttributeError, match="no attribute 'Nope'"):
        django_llmchat.Nope  # noqa: B018
    with pytest.raises(ImportError):
        exec("from django_llmchat import Nope", {})


def test_the_face_re_exports_the_names_where_they_are_defined():
    from django_llmchat import agents, context, errors, models, tools, values

    assert django_llmchat.Chat is models.Chat
    assert django_llmchat.Message is models.Message
    assert django_llmchat.tool is tools.tool
    assert django_llmchat.Agent is agents.Agent
    assert django_llmchat.Context is context.Context
    assert django_llmchat.Tokens is values.Tokens
    assert django_llmchat.errors is errors


def test_importing_the_package_imports_no_model():
    """``settings.py`` may import it: nothing needs the app registry."""
    code = (
        "import sys, django_llmchat\n"
        "from django_llmchat import events, errors, testing, providers\n"
        "assert 'django_llmchat.models' not in sys.modules, sorted(sys.modules)\n"
        "print(len(django_llmchat.__all__))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stderr
    assert int(result.stdout) == len(django_llmchat.__all__)


def docs_imports():
    for path in doc_pages():
        for block in BLOCK.findall(path.read_text()):
            for match in IMPORT.finditer(block):
                module = match.group(1) or match.group(3)
                imported = (match.group(2) or "").split("#")[0].strip().strip("()")
                names = re.findall(r"\w+(?:\s+as\s+\w+)?", imported)
                yield path.relative_to(ROOT), module, [n.split()[0] for n in names]


def test_the_docs_import_only_the_face():
    faces = {module: importlib.import_module(module) for module in django_llmchat.FACE}
    wrong = []
    for page, module, names in docs_imports():
        if module not in faces:
            wrong.append(f"{page}: {module}")
            continue
        known = {*faces[module].__all__, *getattr(faces[module], "_EXPORTS", ())}
        wrong.extend(f"{page}: {module}.{name}" for name in names if name not in known)
    assert not wrong, "\n".join(wrong)


def test_the_reference_page_lists_every_name_of_the_package():
    page = (ROOT / "docs" / "reference.md").read_text()
    listed = set(re.findall(r"`(\w+)`", page.split("## The names of `django_llmchat`")[1]))
    assert set(django_llmchat._EXPORTS) <= listed
    for module in (*django_llmchat.FACE, django_llmchat.URLCONF):
        assert f"`{module}`" in page
