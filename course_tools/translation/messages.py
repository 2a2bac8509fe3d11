"""The exercises' check messages and their translations (``translations/<language>/checks.md``).

A check cell's code is the same in every edition, so what it says (the ``what`` and ``hint``
of ``check``, ``check_equal`` and ``check_close``) is translated when it is shown
(``course_lib.checks.said``). The catalogue pairs each English message with its translation,
one line each::

    # 02_chat_templates

    en: declaring `now` costs {cost_now} tokens
    ja: `now` を宣言すると {cost_now} トークンかかります

A message written as an f-string is listed as its template: the f-string's text with each
``{expression}`` as the solution writes it (``ast.unparse``'s spelling, with ``!r`` and a
format spec kept), and the translation uses the same placeholders, where its grammar puts
them; the values are the English message's (numbers, names, ``repr`` of a reply), never
translated. A literal brace is written twice, as in an f-string. Lines starting with ``#``
name the notebook the messages below come from; blank lines separate pairs; anything else is
an error, as are an ``en:`` without its ``ja:``, a message given twice, placeholders that
differ, and an English message no check has any more (an orphan).

A message that is neither text nor an f-string (``"; ".join(differences)``: data) is not
translatable and is shown as it is; ``solution_messages`` lists it with ``template=None``.
"""

from __future__ import annotations

import ast
import json
from dataclasses import dataclass
from pathlib import Path

from course_lib.check_messages import translations

CHECKS = {"check": 1, "check_equal": 2, "check_close": 2}  # each check, and the position of its `what`
ROOT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Message:
    """A ``what`` or ``hint`` of a check call in a solution notebook: its ``template`` (None when
    it is data, not text), where it is (notebook, cell id) and its source code."""

    template: str | None
    notebook: str
    cell: str
    code: str


def template_of(node: ast.expr) -> list[str] | None:
    """The message templates an argument can produce: a string gives itself (braces doubled),
    an f-string its template, ``a if c else b`` both branches; None for anything else."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value.replace("{", "{{").replace("}", "}}")]
    if isinstance(node, ast.JoinedStr):
        text = ""
        for part in node.values:
            if isinstance(part, ast.Constant):
                text += str(part.value).replace("{", "{{").replace("}", "}}")
            elif isinstance(part, ast.FormattedValue):
                conversion = f"!{chr(part.conversion)}" if part.conversion != -1 else ""
                spec = f":{ast.unparse(part.format_spec)[2:-1]}" if part.format_spec is not None else ""
                text += "{" + ast.unparse(part.value) + conversion + spec + "}"
        return [text]
    if isinstance(node, ast.IfExp):
        branches = [template_of(node.body), template_of(node.orelse)]
        return None if None in branches else [text for branch in branches for text in branch or []]
    return None


def _code(source: str) -> str:
    """A cell's source as Python: IPython's ``%magic`` and ``!shell`` lines become ``pass``."""
    return "\n".join(line[: len(line) - len(line.lstrip())] + "pass" if line.lstrip().startswith(("%", "!")) else line
                     for line in source.splitlines())


def messages_in(source: str, notebook: str, cell: str) -> list[Message]:
    """Every ``what`` and ``hint`` of the check calls in a code cell's ``source``."""
    found = []
    for node in ast.walk(ast.parse(_code(source))):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in CHECKS):
            continue
        where = CHECKS[node.func.id]
        keywords = {keyword.arg: keyword.value for keyword in node.keywords}
        for position, name in ((where, "what"), (where + 1, "hint")):
            argument = node.args[position] if len(node.args) > position else keywords.get(name)
            if argument is None:
                continue
            templates = template_of(argument)
            for template in templates if templates is not None else [None]:
                if template is not None and "\n" in template:
                    raise ValueError(f"{notebook}, cell {cell}: a check message with a line break "
                                     f"({template!r}); write it on one line")
                found.append(Message(template, notebook, cell, ast.unparse(argument)))
    return found


def solution_messages(root: Path = ROOT) -> list[Message]:
    """The messages of every check call in ``solutions/*.ipynb``, in order."""
    found = []
    for path in sorted((root / "solutions").glob("*.ipynb")):
        for cell in json.loads(path.read_text(encoding="utf-8"))["cells"]:
            if cell["cell_type"] == "code":
                source = "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]
                found += messages_in(source, path.stem, cell.get("id", "?"))
    return found


@dataclass
class MessageStatus:
    """The check messages against a catalogue: the translatable ones it lacks, its orphans, and
    the messages that are data (shown as they are)."""

    missing: list[Message]
    orphans: list[str]
    data: list[Message]

    @property
    def ok(self) -> bool:
        return not self.missing and not self.orphans


def message_status(language: str, root: Path = ROOT) -> MessageStatus:
    """Which check messages of ``solutions/`` have no translation into ``language``."""
    messages = solution_messages(root)
    pairs = translations(language, root)
    templates = {message.template for message in messages if message.template is not None}
    missing, seen = [], set()
    for message in messages:
        if message.template is not None and message.template not in pairs and message.template not in seen:
            missing.append(message)
            seen.add(message.template)
    return MessageStatus(missing, [english for english in pairs if english not in templates],
                         [message for message in messages if message.template is None])


def skeleton(missing: list[Message]) -> str:
    """Catalogue lines for ``missing`` messages, grouped by notebook, each ``ja:`` to be written."""
    lines: list[str] = []
    notebook: str | None = None
    for message in missing:
        if message.notebook != notebook:
            lines += ["", f"# {message.notebook}", ""] if lines else [f"# {message.notebook}", ""]
            notebook = message.notebook
        lines += [f"en: {message.template}", "ja: ", ""]
    return "\n".join(lines).rstrip("\n") + "\n"
