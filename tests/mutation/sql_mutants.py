"""The mutants of the run functions (``django_llmchat/sql/``): each function of each file
parsed into tokens, and each mutant one small change to its body, as text.

The changes (``kind``):

- ``comparison``: ``=`` and ``<>`` swapped, ``<`` and ``<=``, ``>`` and ``>=``, in a
  condition (a ``WHERE``, ``IF``/``ELSIF`` or ``WHEN`` clause, or an expression assigned
  with ``:=``), never in a ``SET`` list;
- ``connective``: ``AND`` and ``OR`` swapped;
- ``condition removed``: one operand of an ``AND`` or ``OR`` chain dropped (with its
  connective), at every level of parentheses; a ``WHERE`` of one condition dropped whole;
  one value of an ``IN (...)`` list dropped;
- ``NOT removed``; ``IS NULL`` and ``IS NOT NULL`` swapped (and ``IS DISTINCT FROM``);
- ``constant``: an integer + 1 and - 1 (``LIMIT n`` only - 1: a ``SELECT INTO`` and a SQL
  function's result keep the first row, so a greater limit is the same query); ``true``
  and ``false`` swapped; ``+`` and ``-`` swapped;
- ``order``: an ``ORDER BY`` key's direction reversed;
- ``outcome``: ``outcome := 'x'`` given another outcome the function sets (the next one
  in alphabetical order);
- ``return``: ``RETURN value`` returning ``NULL``; an early ``RETURN;`` (in an ``IF``)
  removed, so the function carries on.

Comments and string literals are never changed except as above. A mutant is named, as in
``equivalent.toml``, by its function and the lines it changes, before and after
(whitespace folded).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

SQL = Path(__file__).resolve().parents[2] / "django_llmchat" / "sql"

_FUNCTION = re.compile(
    r"CREATE OR REPLACE FUNCTION (?P<name>\w+)\(.*?\bAS \$\$(?P<body>.*?)\$\$;", re.S
)
_TOKEN = re.compile(
    r"""(?P<ws>\s+)
    |(?P<comment>--[^\n]*|\#[^\n]*)
    |(?P<string>'(?:[^']|'')*')
    |(?P<number>\d+)
    |(?P<word>[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*)
    |(?P<op>:=|::|<>|<=|>=|->>|->|\|\||[=<>+\-*/(),;.\[\]])
    """,
    re.X,
)
_FLIP = {"=": "<>", "<>": "=", "<": "<=", "<=": "<", ">": ">=", ">=": ">"}
# what ends a WHERE clause (at its own depth of parentheses)
_WHERE_END = {"ORDER", "RETURNING", "LIMIT", "GROUP", "LOOP", ";"}


@dataclass(frozen=True)
class Token:
    kind: str
    text: str
    start: int
    end: int

    @property
    def upper(self) -> str:
        return self.text.upper()


@dataclass(frozen=True)
class Function:
    name: str
    path: Path
    statement: str  # CREATE OR REPLACE FUNCTION ... $$;
    body_start: int  # the body's offsets in ``statement``
    body_end: int

    @property
    def body(self) -> str:
        return self.statement[self.body_start : self.body_end]

    def calls(self, names) -> set[str]:
        """The functions of ``names`` this one calls."""
        return {n for n in names if n != self.name and re.search(rf"\b{n}\b", self.body)}


@dataclass(frozen=True)
class Mutant:
    function: str
    number: int  # 1, 2, ... in the function
    kind: str
    statement: str  # the mutated CREATE OR REPLACE FUNCTION
    original: str  # the lines changed, before and after, whitespace folded
    mutated: str

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.function, self.original, self.mutated)


def fold(text: str) -> str:
    return " ".join(text.split())


def functions(folder: Path = SQL) -> dict[str, Function]:
    """Every function of ``folder``'s files, by name, the newest version of each
    (``llmchat_run_store_last_step_v2`` of ``sql/v2/``, not the ``_v1`` it replaced and
    migrations keep installed for the processes of an older release)."""
    found = {}
    for path in sorted(folder.glob("v*/*.sql")):
        text = path.read_text()
        for match in _FUNCTION.finditer(text):
            statement = match.group(0)
            offset = match.start()
            found[match["name"]] = Function(
                match["name"],
                path,
                statement,
                match.start("body") - offset,
                match.end("body") - offset,
            )
    newest: dict[str, tuple[int, str]] = {}
    for name in found:
        base, _, version = name.rpartition("_v")
        if base not in newest or int(version) > newest[base][0]:
            newest[base] = (int(version), name)
    return {name: found[name] for _, name in newest.values()}


def tokens(body: str) -> list[Token]:
    """The significant tokens (no whitespace, no comments)."""
    found, position = [], 0
    while position < len(body):
        match = _TOKEN.match(body, position)
        if match is None:
            raise ValueError(f"cannot read the SQL at {body[position : position + 40]!r}")
        if match.lastgroup not in ("ws", "comment"):
            found.append(Token(match.lastgroup, match.group(), match.start(), match.end()))
        position = match.end()
    return found


class _Body:
    """One function's body and the edits of its mutants."""

    def __init__(self, function: Function) -> None:
        self.function = function
        self.text = function.body
        self.tokens = tokens(self.text)
        self.edits: list[tuple[str, list[tuple[int, int, str]]]] = []

    def edit(self, kind: str, *changes: tuple[int, int, str]) -> None:
        self.edits.append((kind, list(changes)))

    def closing(self, i: int) -> int:
        """The index of the ``)`` closing the ``(`` at ``i``."""
        depth = 0
        for j in range(i, len(self.tokens)):
            if self.tokens[j].text == "(":
                depth += 1
            elif self.tokens[j].text == ")":
                depth -= 1
                if depth == 0:
                    return j
        raise ValueError("unbalanced parentheses")

    def top(self, a: int, b: int, words: set[str]) -> list[int]:
        """Indexes in [a, b) of the tokens in ``words`` outside any parentheses."""
        found, depth = [], 0
        for j in range(a, b):
            text = self.tokens[j].upper
            if text == "(":
                depth += 1
            elif text == ")":
                depth -= 1
            elif depth == 0 and text in words:
                found.append(j)
        return found

    # -- where the conditions are ------------------------------------------------------

    def spans(self) -> list[tuple[str, int, int]]:
        """Each condition: ("where" | "if" | "when" | "assign", first token, end token)."""
        found, toks = [], self.tokens
        for i, tok in enumerate(toks):
            word = tok.upper
            if word == "WHERE":
                depth, j = 0, i + 1
                while j < len(toks):
                    t = toks[j].upper
                    if t == "(":
                        depth += 1
                    elif t == ")":
                        if depth == 0:
                            break
                        depth -= 1
                    elif depth == 0 and t in _WHERE_END:
                        break
                    j += 1
                found.append(("where", i + 1, j))
            elif word in ("IF", "ELSIF") and not (i and toks[i - 1].upper == "END"):
                found.append(("if", i + 1, self.next_word(i, "THEN")))
            elif word == "WHEN":
                found.append(("when", i + 1, self.next_word(i, "THEN")))
            elif tok.text == ":=":
                found.append(("assign", i + 1, self.next_word(i, ";")))
        return found

    def next_word(self, i: int, word: str) -> int:
        for j in range(i + 1, len(self.tokens)):
            if self.tokens[j].upper == word:
                return j
        raise ValueError(f"no {word} after {self.tokens[i].text}")

    # -- the mutants -------------------------------------------------------------------

    def generate(self) -> None:
        toks = self.tokens
        in_condition = set()
        for kind, a, b in self.spans():
            in_condition.update(range(a, b))
            self.removals(kind, a, b, whole=kind == "where")
            if kind in ("where", "if", "when"):
                self.in_lists(a, b)
        for i, tok in enumerate(toks):
            word = tok.upper
            before = toks[i - 1].upper if i else ""
            if tok.kind == "op" and tok.text in _FLIP and i in in_condition:
                self.edit("comparison", (tok.start, tok.end, _FLIP[tok.text]))
            elif word in ("AND", "OR") and tok.kind == "word":
                self.edit("connective", (tok.start, tok.end, "OR" if word == "AND" else "AND"))
            elif word == "NOT" and before != "IS":
                self.edit("NOT removed", (tok.start, toks[i + 1].start, ""))
            elif word == "IS":
                after = toks[i + 1]
                if after.upper == "NOT":
                    self.edit("IS NOT", (tok.end, after.end, ""))
                else:
                    self.edit("IS NOT", (tok.end, tok.end, " NOT"))
            elif tok.kind == "number":
                value = int(tok.text)
                if before != "LIMIT":
                    self.edit("constant", (tok.start, tok.end, str(value + 1)))
                if value > 0:
                    self.edit("constant", (tok.start, tok.end, str(value - 1)))
            elif word in ("TRUE", "FALSE") and tok.kind == "word":
                self.edit("constant", (tok.start, tok.end, "false" if word == "TRUE" else "true"))
            elif tok.text in ("+", "-") and toks[i - 1].kind in ("word", "number", "op"):
                if toks[i - 1].kind == "op" and toks[i - 1].text != ")":
                    continue
                self.edit("constant", (tok.start, tok.end, "-" if tok.text == "+" else "+"))
            elif word == "ORDER" and toks[i + 1].upper == "BY":
                self.order(i + 2)
            elif word == "RETURN":
                self.returns(i)
        self.outcomes()

    def removals(self, kind: str, a: int, b: int, whole: bool) -> None:
        """Each operand of an AND or OR chain in [a, b) removed, at every level."""
        for words in ({"OR"}, {"AND"}):
            connectives = self.top(a, b, words)
            if connectives:
                bounds = [a, *connectives, b]
                operands = [(bounds[k] + (k > 0), bounds[k + 1]) for k in range(len(bounds) - 1)]
                toks = self.tokens
                for k, (first, end) in enumerate(operands):
                    if k == 0:  # the operand, its connective, up to the next operand
                        cut = (toks[first].start, toks[operands[1][0]].start)
                    else:  # from the end of the operand before it
                        cut = (toks[operands[k - 1][1] - 1].end, toks[end - 1].end)
                    self.edit("condition removed", (*cut, ""))
                    self.removals(kind, first, end, whole=False)
                return
        toks = self.tokens
        if toks[a].text == "(" and self.closing(a) == b - 1:
            self.removals(kind, a + 1, b - 1, whole=False)
        elif toks[a].upper == "NOT" and toks[a + 1].text == "(" and self.closing(a + 1) == b - 1:
            self.removals(kind, a + 2, b - 1, whole=False)
        elif whole:  # a WHERE of one condition
            self.edit("condition removed", (toks[a - 2].end, toks[b - 1].end, ""))

    def in_lists(self, a: int, b: int) -> None:
        toks = self.tokens
        for i in range(a, b - 1):
            if toks[i].upper == "IN" and toks[i + 1].text == "(":
                close = self.closing(i + 1)
                commas = self.top(i + 2, close, {","})
                if not commas:
                    continue
                bounds = [i + 1, *commas, close]
                for k in range(len(bounds) - 1):
                    if k == 0:
                        cut = (toks[i + 2].start, toks[bounds[1] + 1].start)
                    else:
                        cut = (toks[bounds[k] - 1].end, toks[bounds[k + 1] - 1].end)
                    self.edit("condition removed", (*cut, ""))

    def order(self, i: int) -> None:
        toks = self.tokens
        end = i
        while (
            end < len(toks)
            and toks[end].upper not in ("LIMIT", ";", ")")
            and not (toks[end].upper.startswith("$"))
        ):
            end += 1
        for last in [*self.top(i, end, {","}), end]:  # each key's end
            tail = toks[last - 1]
            if tail.upper == "DESC":
                self.edit("order", (toks[last - 2].end, tail.end, ""))
            else:
                self.edit("order", (tail.end, tail.end, " DESC"))

    def returns(self, i: int) -> None:
        toks = self.tokens
        if toks[i + 1].text != ";":
            end = self.next_word(i, ";")
            self.edit("return", (toks[i + 1].start, toks[end - 1].end, "NULL"))
        elif i + 2 < len(toks) and toks[i + 2].upper == "END":  # the end of an IF branch
            self.edit("return", (toks[i].start, toks[i + 1].end, "NULL;"))

    def outcomes(self) -> None:
        toks = self.tokens
        sites = [
            toks[i + 2]
            for i in range(len(toks) - 2)
            if toks[i].upper == "OUTCOME"
            and toks[i + 1].text == ":="
            and toks[i + 2].kind == "string"
        ]
        values = sorted({s.text for s in sites})
        for site in sites:  # the next outcome, in alphabetical order, round
            value = values[(values.index(site.text) + 1) % len(values)]
            self.edit("outcome", (site.start, site.end, value))

    def mutants(self) -> list[Mutant]:
        self.generate()
        found, seen = [], set()
        function = self.function
        for kind, changes in sorted(self.edits, key=lambda e: min(c[0] for c in e[1])):
            body = self.text
            for start, end, new in sorted(changes, reverse=True):
                body = body[:start] + new + body[end:]
            if body in seen or body == self.text:
                continue
            seen.add(body)
            first = min(start for start, _, _ in changes)
            last = max(end for _, end, _ in changes)
            line_start = self.text.rfind("\n", 0, first) + 1
            line_end = self.text.find("\n", last)
            line_end = len(self.text) if line_end < 0 else line_end
            # lines enough to be found once in the body: the lines before too if not
            while self.text.count(self.text[line_start:line_end]) > 1 and line_start:
                line_start = self.text.rfind("\n", 0, line_start - 1) + 1
            shift = len(body) - len(self.text)
            statement = (
                function.statement[: function.body_start]
                + body
                + function.statement[function.body_end :]
            )
            found.append(
                Mutant(
                    function.name,
                    len(found) + 1,
                    kind,
                    statement,
                    fold(self.text[line_start:line_end]),
                    fold(body[line_start : line_end + shift]),
                )
            )
        return found


def mutants(function: Function) -> list[Mutant]:
    """Every mutant of ``function``, in the order of its body."""
    return _Body(function).mutants()
