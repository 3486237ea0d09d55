"""Skills: folders with a ``SKILL.md`` the model can activate during a run."""

from __future__ import annotations

from dataclasses import dataclass, field


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
