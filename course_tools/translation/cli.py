"""``python -m course_tools translation``: status, build, adopt, messages, and export and import
as PO files (see the package's docstring)."""

from __future__ import annotations

import argparse
import difflib
import re
import sys
from pathlib import Path

import polib

from course_tools.translation import po
from course_tools.translation.build import NotTranslated, built, refusal
from course_tools.translation.history import english_then
from course_tools.translation.links import broken
from course_tools.translation.messages import message_status, skeleton
from course_tools.translation.sources import built_on_disk, source_for, sources
from course_tools.translation.status import SourceStatus, Survey, adopt, compare, survey

ROOT = Path(__file__).resolve().parents[2]


def _quoted(text: str, limit: int = 70) -> str:
    return repr(text if len(text) <= limit else text[: limit - 1] + "…")


def _indented(text: str) -> str:
    return "\n".join("      | " + line for line in text.splitlines())


def _elsewhere_lines(status: SourceStatus, unit_id: str) -> list[str]:
    lines = []
    for hit in status.elsewhere.get(unit_id, []):
        where = f"{hit.catalogue.as_posix()} (block {hit.block.id}, line {hit.block.line}"
        lines.append(f"      the same English is translated in {where}{', an orphan there' if hit.orphan else ''}): "
                     "`adopt` copies it here")
    return lines


def status_lines(root: Path, status: SourceStatus, show: bool) -> list[str]:
    """The report of one English file."""
    source = status.source
    head = f"{source.english.as_posix()}  ({source.catalogue.as_posix()})"
    if status.problem:
        return [f"✘ {head}: {status.problem}"]
    if status.ok:
        return [f"✔ {head}: all {len(status.units)} units current"]
    counts = [f"{len(status.current)} of {len(status.units)} current"] + \
             [f"{len(found)} {what}" for what, found in (("stale", status.stale), ("missing", status.missing),
                                                        ("orphans", status.orphans)) if found]
    lines = [f"✘ {head}: {', '.join(counts)}"]
    for unit in status.units:
        block = status.block(unit.id)
        if block is not None and block.hash == unit.hash:
            continue
        if block is None:
            lines.append(f"  MISSING {unit.id:14} {_quoted(unit.first_line)}")
        else:
            lines.append(f"  STALE   {unit.id:14} {_quoted(unit.first_line)}: translated from en:{block.hash} "
                         f"(line {block.line}), the English is en:{unit.hash} now")
        lines += _elsewhere_lines(status, unit.id)
        if show:
            before = english_then(root, source.english, unit.id, block.hash) if block else None
            if before is not None:
                diff = difflib.unified_diff(before.splitlines(), unit.text.splitlines(), "English then",
                                            "English now", lineterm="")
                lines.append(_indented("\n".join(diff)))
            else:
                lines.append(_indented(unit.text))
    for block in status.orphans:
        lines.append(f"  ORPHAN  {block.id:14} line {block.line}: {source.english.as_posix()} has no unit "
                     f"{block.id} (no markdown cell or section by that id): delete the block, or `adopt` it "
                     "where its English went")
    return lines


def survey_lines(root: Path, result: Survey, only: list[Path], show: bool) -> list[str]:
    lines = []
    chosen = [status for status in result.statuses if not only or status.source.english in only]
    for status in chosen:
        lines += status_lines(root, status, show)
    if not only:
        for path, blocks in result.lonely.items():
            lines.append(f"✘ {path.as_posix()}: no English file has this catalogue; its {len(blocks)} blocks are "
                         "orphans (delete it, or `adopt` its blocks where their English went)")
        for path, problem in result.lonely_problems.items():
            lines.append(f"✘ {path.as_posix()}: {problem}")
    read = [status for status in chosen if not status.problem]
    files = f"{len(read)} file{'s' * (len(read) != 1)}"
    lines.append(f"{sum(len(s.current) for s in read)} of {sum(len(s.units) for s in read)} units current in {files}; "
                 f"{sum(len(s.stale) for s in read)} stale, {sum(len(s.missing) for s in read)} missing, "
                 f"{sum(len(s.orphans) for s in read)} orphans; {len(chosen) - len(read)} unreadable")
    return lines


def message_lines(root: Path, language: str) -> tuple[list[str], bool]:
    """The check messages' line of the report, and whether they are all translated."""
    try:
        found = message_status(language, root)
    except ValueError as problem:
        return [f"✘ check messages: {problem}"], False
    name = f"translations/{language}/checks.md"
    if found.ok:
        return [f"✔ check messages ({name}): all translated"], True
    lines = [f"✘ check messages ({name}): {len(found.missing)} missing"
             + (f", orphans: {found.orphans}" if found.orphans else "")
             + f" (`python -m course_tools translation messages {language}` lists the missing ones to fill in)"]
    return lines, False


def run_status(root: Path, language: str, only: list[Path], show: bool) -> int:
    result = survey(root, language)
    lines = survey_lines(root, result, only, show)
    ok = all(status.ok for status in result.statuses if not only or status.source.english in only)
    if not only:
        more, messages_ok = message_lines(root, language)
        lines[-1:-1] = more
        ok = ok and messages_ok and not result.lonely and not result.lonely_problems
    print("\n".join(lines))
    return 0 if ok else 1


def run_build(root: Path, language: str, only: list[Path], check: bool, allow_english: bool) -> int:
    result = survey(root, language)
    chosen = [status for status in result.statuses if not only or status.source.english in only]
    refused, texts = [], {}
    for status in chosen:
        reason = refusal(status)
        if reason:
            refused.append(f"✘ {status.source.english.as_posix()}: {reason}")
            continue
        try:
            texts[status.source.built] = built(root, status, language, allow_english)
        except NotTranslated:
            refused += status_lines(root, status, show=False)
    if refused:
        print("\n".join(refused), file=sys.stderr)
        print(f"Not built: translate what is missing or stale (`python -m course_tools translation status {language} "
              "--show` shows the English), or build with --allow-english to show it in English under a notice.",
              file=sys.stderr)
        return 1
    everything = frozenset(root / status.source.built for status in result.statuses)
    for path, made in texts.items():
        text = made.text
        for target in broken(_markdown_of(path, text), (root / path).parent, everything):
            print(f"warning: {path.as_posix()}: the link {target} leads to no file", file=sys.stderr)
        if made.english:
            print(f"{path.as_posix()}: {len(made.english)} units shown in English: {', '.join(made.english)}",
                  file=sys.stderr)
    out_of_date = [path for path, made in texts.items()
                   if not (root / path).is_file() or (root / path).read_text(encoding="utf-8") != made.text]
    leftovers = [] if only else sorted(set(built_on_disk(root, language)) - {s.source.built for s in result.statuses})
    if check:
        for path in out_of_date:
            print(f"out of date: {path.as_posix()}")
        for path in leftovers:
            print(f"no English file any more: {path.as_posix()}")
        if out_of_date or leftovers:
            print(f"Run `python -m course_tools translation build {language}` and commit the files.", file=sys.stderr)
            return 1
        print(f"{len(texts)} files up to date")
        return 0
    for path in out_of_date:
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_text(texts[path].text, encoding="utf-8")
        print(f"wrote {path.as_posix()}")
    for path in leftovers:
        (root / path).unlink()
        print(f"removed {path.as_posix()} (its English file is gone)")
    print(f"{len(texts)} files, {len(out_of_date)} written")
    return 0


def _markdown_of(path: Path, text: str) -> str:
    """The Markdown of a built file: a README's text, or a notebook's markdown cells."""
    if path.suffix != ".ipynb":
        return text
    import json

    return "\n\n".join("".join(cell["source"]) for cell in json.loads(text)["cells"] if cell["cell_type"] == "markdown")


def run_adopt(root: Path, language: str) -> int:
    done = adopt(root, survey(root, language))
    for adoption in done:
        hit = adoption.hit
        print(f"{'moved' if hit.orphan else 'copied'} {hit.block.id} from {hit.catalogue.as_posix()} "
              f"to {adoption.target.as_posix()} as {adoption.unit.id}")
    if not done:
        print("nothing to adopt: no missing or stale unit has a translation of its English elsewhere")
    return 0


def run_messages(root: Path, language: str) -> int:
    try:
        found = message_status(language, root)
    except ValueError as problem:
        print(f"check messages: {problem}", file=sys.stderr)
        return 1
    if found.missing:
        print(skeleton(found.missing), end="")
    for english in found.orphans:
        print(f"orphan (no check says it any more): {english}", file=sys.stderr)
    return 0 if found.ok else 1


def run_po(root: Path, language: str, only: list[Path], command: str, folder: Path) -> int:
    chosen = [source for source in sources(root, language) if not only or source.english in only]
    if command == "export":
        written = po.export(root, [compare(root, source) for source in chosen], language, folder)
        print(f"wrote {len(written)} PO files in {folder}")
        return 0
    failed = False
    for source in chosen:
        path = po.po_path(folder, source, language)
        if not path.is_file():
            continue
        try:
            result = po.imported(root, source, polib.pofile(str(path)))
        except (OSError, ValueError) as problem:  # polib raises OSError for a file it cannot parse
            print(f"✘ {path}: {problem}")
            failed = True
            continue
        for refused in result.refused:
            print(f"✘ {path}: {refused}")
        failed |= bool(result.refused)
        if result.changed:
            print(f"{source.catalogue.as_posix()}: {len(result.changed)} units from {path}")
    return 1 if failed else 0


def _from_top(path: Path, root: Path) -> Path:
    """``path`` (from the top folder, or from here) as a path from the top folder ``root``."""
    if not path.is_absolute() and (root / path).exists():
        return path
    try:
        return (Path.cwd() / path).resolve().relative_to(root)
    except ValueError:  # outside the course: source_for says what can be named
        return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m course_tools translation",
                                     description="The translated editions: status, build, adopt, messages, "
                                                 "and export/import as PO files.")
    parser.add_argument("command", choices=["status", "build", "adopt", "messages", "export", "import"])
    parser.add_argument("language", help="the edition's language, e.g. ja")
    parser.add_argument("paths", nargs="*", type=Path,
                        help="status and build: only these English files (e.g. notebooks/03_tool_calls.ipynb)")
    parser.add_argument("--show", action="store_true", help="status: print the English of each missing or stale unit")
    parser.add_argument("--check", action="store_true", help="build: only report the files that are out of date")
    parser.add_argument("--allow-english", action="store_true",
                        help="build: show a unit without a current translation in English, under a notice")
    parser.add_argument("--po", type=Path, help="export and import: the folder of the PO files (translation/po.py)")
    parser.add_argument("--root", type=Path, default=ROOT, help=argparse.SUPPRESS)  # the course's top folder (tests)
    args = parser.parse_args(argv)
    if not re.fullmatch(r"[a-z]{2}", args.language) or args.language == "en":
        parser.error(f"a language is a two-letter code other than en (the original), such as ja; not {args.language!r}")
    root = args.root.resolve()
    only = []
    for path in args.paths:
        relative = _from_top(path, root)
        try:
            source_for(relative, args.language)
        except ValueError as problem:
            parser.error(str(problem))
        only.append(relative)
    if args.command == "status":
        return run_status(root, args.language, only, args.show)
    if args.command == "build":
        return run_build(root, args.language, only, args.check, args.allow_english)
    if args.command == "adopt":
        return run_adopt(root, args.language)
    if args.command in ("export", "import"):
        if args.po is None:
            parser.error(f"{args.command} needs --po DIR, the folder of the PO files")
        return run_po(root, args.language, only, args.command, args.po)
    return run_messages(root, args.language)
