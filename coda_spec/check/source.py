"""Stage ``load``: read a spec file into plain Python data plus a source map.

Contract
--------
``load_source(path) -> Source`` returns the document as plain ``dict``/``list``/scalars and a map
from every spec path (``("steps", 0, "epilogue", 1)``) to the 1-based (line, col) of its value and,
for mapping entries, of its key. Any problem becomes a located :class:`~coda_spec.errors.SpecError`;
no input, however hostile, produces a traceback.

Why an event-driven builder
---------------------------
PyYAML's composer recurses (deeply nested input overflows the C stack) and expands aliases
(billion-laughs). We build the tree from the flat event stream instead: depth is checked as we go,
aliases, anchors, tags and merge keys are refused with their position (a spec never needs them),
duplicate keys are reported with both places, and non-UTF-8 or oversized files are refused before
parsing. Plain scalars resolve with YAML's core rules, plus one fix for a classic trap: ``1e-6``
(no dot) is a float here, not the string YAML 1.1 makes of it.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from pathlib import Path

import yaml

from coda_spec.errors import Diagnostic, SpecError, ToolError, UsageError, format_path

MAX_BYTES = 1 << 20  # 1 MiB: the whole bundled catalogue is ~100 KiB.
MAX_DEPTH = 64
# Unambiguous on purpose: r"\d+\.?\d*" backtracks quadratically on a long run of digits.
_FLOAT_NO_DOT = re.compile(r"^[-+]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)[eE][-+]?[0-9]+$")


@dataclass(frozen=True)
class Source:
    """A loaded spec: data, the text it came from, and where every value sits."""

    file: str
    text: str
    data: object
    marks: dict = field(repr=False)  # path tuple -> (line, col) of the value
    key_marks: dict = field(repr=False)  # path tuple -> (line, col) of the mapping key

    @property
    def lines(self) -> list[str]:
        return self.text.splitlines()

    def where(self, path: tuple, key: bool = False) -> tuple[int, int]:
        """Position of ``path`` (or of its key), falling back to the nearest located ancestor."""
        table = self.key_marks if key else self.marks
        p = tuple(path)
        while p:
            if p in table:
                return table[p]
            if not key and p in self.key_marks:
                return self.key_marks[p]
            p = p[:-1]
        return self.marks.get((), (1, 1))

    def diag(
        self,
        path: tuple,
        message: str,
        hint: str = "",
        key: bool = False,
        severity: str = "error",
    ) -> Diagnostic:
        line, col = self.where(path, key=key)
        return Diagnostic(self.file, line, col, format_path(path), message, hint, severity)


def _err(file: str, line: int, col: int, message: str, hint: str = "") -> SpecError:
    return SpecError([Diagnostic(file, line, col, "<root>", message, hint)])


def _mark(m) -> tuple[int, int]:
    return (m.line + 1, m.column + 1)


def _decode(file: str, raw: bytes) -> str:
    if len(raw) > MAX_BYTES:
        raise _err(
            file,
            0,
            0,
            f"file is larger than {MAX_BYTES} bytes, the limit for a spec",
            "split the chain into several specs",
        )
    nul = raw.find(b"\x00")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        bad = e.start
        line = raw.count(b"\n", 0, bad) + 1
        col = bad - (raw.rfind(b"\n", 0, bad) + 1) + 1
        raise _err(
            file,
            line,
            col,
            f"file is not UTF-8 text (byte 0x{raw[bad]:02x})",
            "is this a YAML spec?",
        ) from e
    if nul >= 0:
        line = raw.count(b"\n", 0, nul) + 1
        col = nul - (raw.rfind(b"\n", 0, nul) + 1) + 1
        raise _err(file, line, col, "file contains a NUL byte; is this a YAML spec?")
    if text.startswith("\ufeff"):
        text = text[1:]
    return text


def _scalar(event, constructor, resolver) -> object:
    value = event.value
    if not event.style and event.implicit[0]:
        if _FLOAT_NO_DOT.match(value):
            return float(value)
        tag = resolver.resolve(yaml.ScalarNode, value, event.implicit)
        if ":" in value and tag in ("tag:yaml.org,2002:int", "tag:yaml.org,2002:float"):
            # YAML 1.1 sexagesimal (1:30 is 90; building a long one is quadratic): a string here.
            tag = "tag:yaml.org,2002:str"
    else:
        tag = "tag:yaml.org,2002:str"
    node = yaml.ScalarNode(tag, value, event.start_mark, event.end_mark, event.style)
    return constructor.construct_object(node, deep=True)


class _Frame:
    __slots__ = ("container", "path", "pending_key", "key_mark", "first_seen")

    def __init__(self, container, path):
        self.container = container
        self.path = path
        self.pending_key = None
        self.key_mark = None
        self.first_seen = {}


def _build(file: str, text: str) -> tuple[object, dict, dict]:
    marks: dict = {}
    key_marks: dict = {}
    problems: list[Diagnostic] = []
    constructor = yaml.constructor.SafeConstructor()
    resolver = yaml.resolver.Resolver()
    stack: list[_Frame] = []
    root: list = []
    docs = 0

    def place(value, start_mark):
        """Attach ``value`` to the current parent; return its path."""
        if not stack:
            root.append(value)
            path = ()
        else:
            top = stack[-1]
            if isinstance(top.container, list):
                path = top.path + (len(top.container),)
                top.container.append(value)
            elif top.pending_key is None:
                raise _err(file, *_mark(start_mark), "mapping keys must be plain names")
            else:
                key = top.pending_key
                top.pending_key = None
                path = top.path + (key,)
                if key in top.first_seen:
                    fl, fc = top.first_seen[key]
                    problems.append(
                        Diagnostic(
                            file,
                            *top.key_mark,
                            format_path(path),
                            f"duplicate key '{key}'",
                            f"first defined at line {fl}, column {fc}; remove one of them",
                        )
                    )
                else:
                    top.first_seen[key] = top.key_mark
                    top.container[key] = value
                    key_marks[path] = top.key_mark
        marks[path] = _mark(start_mark)
        return path

    for event in yaml.parse(text, Loader=yaml.CSafeLoader):
        if isinstance(event, yaml.DocumentStartEvent):
            docs += 1
            if docs > 1:
                raise _err(
                    file,
                    *_mark(event.start_mark),
                    "a spec file holds exactly one YAML document",
                    "remove the '---'",
                )
            continue
        if isinstance(event, (yaml.StreamStartEvent, yaml.StreamEndEvent, yaml.DocumentEndEvent)):
            continue
        anchor = getattr(event, "anchor", None)
        if isinstance(event, yaml.AliasEvent) or anchor:
            what = "aliases" if isinstance(event, yaml.AliasEvent) else "anchors"
            raise _err(
                file,
                *_mark(event.start_mark),
                f"YAML {what} ('&name'/'*name') are not supported in specs",
                "write the value out where it is used",
            )
        tag = getattr(event, "tag", None)
        if tag and tag not in ("!", "tag:yaml.org,2002:str"):
            # Only '!!str' has a use (quoting); '!!python/...' and friends are refused.
            shown = tag.replace("tag:yaml.org,2002:", "!!")
            raise _err(
                file,
                *_mark(event.start_mark),
                f"YAML tag '{shown}' is not supported in specs",
                "remove the tag",
            )
        if isinstance(event, (yaml.MappingStartEvent, yaml.SequenceStartEvent)):
            if len(stack) >= MAX_DEPTH:
                raise _err(
                    file,
                    *_mark(event.start_mark),
                    f"nesting deeper than {MAX_DEPTH} levels",
                    "a spec is a few levels deep",
                )
            container = {} if isinstance(event, yaml.MappingStartEvent) else []
            path = place(container, event.start_mark)
            stack.append(_Frame(container, path))
        elif isinstance(event, (yaml.MappingEndEvent, yaml.SequenceEndEvent)):
            stack.pop()
        elif isinstance(event, yaml.ScalarEvent):
            top = stack[-1] if stack else None
            if top is not None and isinstance(top.container, dict) and top.pending_key is None:
                key = event.value
                if key == "<<":
                    raise _err(
                        file,
                        *_mark(event.start_mark),
                        "YAML merge keys ('<<') are not supported in specs",
                    )
                top.pending_key = key
                top.key_mark = _mark(event.start_mark)
                continue
            try:
                value = _scalar(event, constructor, resolver)
            except (yaml.YAMLError, ValueError, OverflowError) as e:
                problems.append(
                    Diagnostic(
                        file,
                        *_mark(event.start_mark),
                        "<root>",
                        f"cannot read scalar {event.value[:40]!r}: {e}",
                    )
                )
                value = event.value
            place(value, event.start_mark)
    if problems:
        raise SpecError(problems)
    if not root:
        raise _err(file, 1, 1, "empty spec", "a spec starts with 'coda: 1' and a 'name:'")
    return root[0], marks, key_marks


def _at_index(text: str, index: int) -> tuple[int, int]:
    """1-based (line, col) of character ``index`` of ``text``, counting lines like splitlines."""
    parts = (text[:index] + "x").splitlines()
    return len(parts), len(parts[-1])


def _clamp(text: str, line: int, col: int) -> tuple[int, int]:
    """An end-of-stream mark can sit one line past the text: point at the end of the last line."""
    lines = text.splitlines()
    if line <= max(len(lines), 1):
        return line, col
    return max(len(lines), 1), (len(lines[-1]) + 1 if lines else 1)


def _syntax_message(text: str, e, line: int, col: int, what: str) -> tuple[str, str]:
    """Message and hint for a YAML syntax error: name tabs, point back at unclosed brackets."""
    lines = text.splitlines()
    here = lines[line - 1] if 0 < line <= len(lines) else ""
    if here[col - 1 : col] == "\t":
        return "YAML syntax error: tab character", "YAML indents with spaces; replace the tab"
    if "maximum nesting depth" in what:  # newer libyaml stops deep flow nesting itself
        return f"nesting deeper than {MAX_DEPTH} levels", "a spec is a few levels deep"
    hint = ""
    cm, pm = e.context_mark, e.problem_mark
    if cm is not None and pm is not None and (cm.line, cm.column) != (pm.line, pm.column):
        cl, cc = _mark(cm)
        opened = lines[cl - 1][cc - 1 : cc] if 0 < cl <= len(lines) else ""
        if opened in ("{", "[", "'", '"'):
            hint = f"is the {opened!r} at line {cl}, column {cc} closed?"
        else:
            hint = f"it started at line {cl}, column {cc}"
    return f"YAML syntax error: {what}", hint


def parse_text(file: str, text: str) -> Source:
    """Parse spec ``text`` (already decoded) attributed to ``file``."""
    try:
        data, marks, key_marks = _build(file, text)
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        line, col = _clamp(text, *_mark(mark)) if mark else (0, 0)
        what = e.problem or str(e)
        if e.context:
            what = f"{e.context}: {what}" if e.problem else e.context
        raise _err(file, line, col, *_syntax_message(text, e, line, col, what)) from e
    except yaml.reader.ReaderError as e:
        # libyaml reports a byte offset into the UTF-8 encoding of the text.
        index = len(text.encode("utf-8")[: e.position].decode("utf-8", errors="ignore"))
        line, col = _at_index(text, index)
        ch = e.character if isinstance(e.character, int) else ord(e.character[:1] or "\0")
        what = f"character U+{ch:04X} is not allowed in YAML ({e.reason})"
        raise _err(file, line, col, what) from e
    except yaml.YAMLError as e:
        raise _err(file, 0, 0, f"YAML error: {e}") from e
    except UnicodeEncodeError as e:  # lone surrogates: only reachable by passing text directly
        raise _err(file, *_at_index(text, e.start), "text is not valid Unicode") from e
    except RecursionError as e:
        raise _err(file, 0, 0, "nesting too deep to read") from e
    if data is None:
        raise _err(file, 1, 1, "empty spec", "a spec starts with 'coda: 1' and a 'name:'")
    return Source(file=file, text=text, data=data, marks=marks, key_marks=key_marks)


def load_source(path: str | Path) -> Source:
    """Read and parse one spec file. Raises SpecError (invalid) or ToolError (unreadable)."""

    file = str(path)
    try:
        with open(path, "rb") as f:  # bounded: /dev/zero or a huge file must not exhaust memory
            raw = f.read(MAX_BYTES + 1)
    except IsADirectoryError as e:
        raise ToolError(f"{file}: is a directory") from e
    except (OSError, ValueError) as e:  # ValueError: a NUL in the path
        raise ToolError(f"{file}: cannot read: {getattr(e, 'strerror', None) or e}") from e
    return parse_text(file, _decode(file, raw))


def decode_bytes(file: str, raw: bytes) -> str:
    """Public wrapper over the size/encoding gate (used by tests and stdin input)."""
    return _decode(file, raw)


# -- folder scans ------------------------------------------------------------------------------

SPEC_SUFFIXES = (".yaml", ".yml")
# Folders a scan never enters (a folder named on the command line is scanned all the same):
# hidden ones (.git, .venv, .tox, a build's .tmp-*), and these by name ...
SKIPPED_NAMES = frozenset({"venv", "node_modules", "site-packages", "__pycache__"})
# ... and any folder holding one of these: a virtual environment (pyvenv.cfg; conda-meta for
# conda), or a coda build directory (its spec.yaml is a copy of a spec).
SKIPPED_MARKERS = ("pyvenv.cfg", "conda-meta", "spec.normalized.json")


def skipped_folder(path: Path) -> bool:
    """Whether a folder scan leaves out ``path`` (a folder below the one it was given)."""
    if path.name.startswith(".") or path.name in SKIPPED_NAMES:
        return True
    return any((path / m).exists() for m in SKIPPED_MARKERS)


def excluded(rel: str, patterns) -> bool:
    """``rel`` (a path relative to the folder scanned, '/'-separated) matches an ``--exclude``
    glob: the whole path (``drafts/*.yaml``), its file name (``*_wip.yaml``) or one of its
    folders (``drafts``)."""

    parts = rel.split("/")
    return any(fnmatchcase(rel, g) or any(fnmatchcase(p, g) for p in parts) for g in patterns)


def spec_files(paths, exclude=()) -> list[Path]:
    """The spec files named by ``paths``: files as given, folders searched recursively for
    ``*.yaml``/``*.yml`` (sorted), leaving out :func:`skipped_folder` folders and whatever
    matches an ``--exclude`` glob (:func:`excluded`). A folder that yields no spec file is a
    ``UsageError`` naming it, as is an argument list that ``--exclude`` empties."""

    out: list[Path] = []
    for p in map(Path, paths):
        try:
            is_dir = p.is_dir()
        except OSError:  # e.g. a name too long: let the loader report it
            is_dir = False
        if not is_dir:
            if not excluded(p.as_posix(), exclude):
                out.append(p)
            continue
        found = []
        for top, dirs, files in os.walk(p):
            here = Path(top)
            dirs[:] = sorted(d for d in dirs if not skipped_folder(here / d))
            for f in files:
                path = here / f
                rel = path.relative_to(p).as_posix()
                if path.suffix in SPEC_SUFFIXES and path.is_file() and not excluded(rel, exclude):
                    found.append(path)
        if not found:
            why = ", after --exclude" if exclude else ""
            raise UsageError(f"no spec files (*.yaml, *.yml) in this folder{why}", p)
        out += sorted(found)
    if not out and paths:
        raise UsageError(f"no spec files left after --exclude {' '.join(exclude)}")
    return out
