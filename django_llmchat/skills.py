"""Skills: folders with a ``SKILL.md`` (front matter ``name`` and ``description``, then
the body). The catalog goes to the model as a system message; the built-in
``skill_activate`` tool loads one skill's body into the conversation."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from .errors import ArgumentError

ACTIVATE_TOOL = "skill_activate"


@dataclass(frozen=True, slots=True)
class Skill:
    """One skill: its name, a one-line description, and the body loaded on activation."""

    name: str
    description: str = ""
    body: str = ""
    path: str | None = None


@dataclass(slots=True)
class SkillsContext:
    """The skills available to a run and the ones the model activated."""

    skills: dict[str, Skill] = field(default_factory=dict)
    activated: list[str] = field(default_factory=list)

    def get(self, name: str) -> Skill | None:
        return self.skills.get(name)

    def activate(self, name: str) -> Skill:
        skill = self.skills[name]
        if name not in self.activated:
            self.activated.append(name)
        return skill

    def catalog(self) -> str:
        """The system message listing the skills."""
        lines = [
            "You can use skills. Call the `skill_activate` tool with a skill's name to load "
            "its instructions before doing a task it covers. Available skills:"
        ]
        for skill in self.skills.values():
            lines.append(f"- {skill.name}: {skill.description}")
        return "\n".join(lines)


def parse_skill(text: str, path: str | None = None) -> Skill:
    """Read a ``SKILL.md``: ``---`` front matter with ``name:`` and ``description:``."""
    meta: dict[str, str] = {}
    body = text
    if text.startswith("---"):
        head, sep, rest = text[3:].partition("\n---")
        if not sep:
            raise ArgumentError(f"{path or 'SKILL.md'}: front matter is not closed with ---")
        for line in head.strip().splitlines():
            key, _, value = line.partition(":")
            if key.strip():
                meta[key.strip()] = value.strip().strip("\"'")
        body = rest.lstrip("\n")
    name = meta.get("name") or (Path(path).parent.name if path else "")
    if not name:
        raise ArgumentError(f"{path or 'SKILL.md'}: a skill needs a name")
    return Skill(name=name, description=meta.get("description", ""), body=body.strip(), path=path)


def load_skills(paths: list[str | Path]) -> SkillsContext:
    """Skills from folders: each path is a skill folder (holding ``SKILL.md``) or a folder
    of skill folders."""
    found: dict[str, Skill] = {}
    for base in paths:
        base = Path(base)
        candidates = (
            [base / "SKILL.md"] if (base / "SKILL.md").exists() else sorted(base.glob("*/SKILL.md"))
        )
        if not base.exists():
            raise ArgumentError(f"skills folder {str(base)!r} does not exist")
        for md in candidates:
            skill = parse_skill(md.read_text(encoding="utf-8"), str(md))
            found[skill.name] = skill
    return SkillsContext(skills=found)
