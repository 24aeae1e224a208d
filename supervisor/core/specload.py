"""Reading a spec file: YAML with line numbers, duration and size values, and
validation errors as messages a person can act on.

Generic on purpose: this module knows YAML and pydantic, not the fields of a job
(those live in spec.py). It keeps each value's YAML node so that any validation
error, however deep, points back at the line that caused it.
"""

from __future__ import annotations

import difflib
import json
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError
from rsup.supervisor.core.errors import UsageError
from yaml.constructor import SafeConstructor

Loc = tuple[str | int, ...]

_MAP_TAG = "tag:yaml.org,2002:map"
_SEQ_TAG = "tag:yaml.org,2002:seq"

_DURATION = re.compile(r"(?:\d+(?:\.\d+)?(?:ms|[dhms]))+")
_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|[dhms])")
_DURATION_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
_DURATION_HELP = "use seconds (90) or a number with a unit: 90s, 30m, 72h, 1h30m, 2d"

# K/M/G/T count in 1024s as systemd and most tools do; KB/MB/GB/TB are decimal.
_SIZE = re.compile(r"(\d+(?:\.\d+)?)\s*([kmgt]?)(i?)(b?)", re.IGNORECASE)
_SIZE_POWERS = {"": 0, "k": 1, "m": 2, "g": 3, "t": 4}
_SIZE_HELP = "use bytes (1048576) or a size such as 500M, 256MiB, 1GiB, 2GB"


def parse_duration(value: object) -> float:
    """Seconds from 90, 90.5, "90", "90s", "30m", "72h", "1h30m" or "2d"; ValueError if bad."""
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise ValueError(f"expected a duration, got {type(value).__name__}; {_DURATION_HELP}")
    if isinstance(value, str):
        text = value.strip().lower().replace(" ", "")
        if _DURATION.fullmatch(text):
            seconds = sum(float(n) * _DURATION_UNITS[u] for n, u in _DURATION_PART.findall(text))
        else:
            seconds = _plain_number(text, f"invalid duration {value!r}; {_DURATION_HELP}")
    else:
        seconds = float(value)
    if not math.isfinite(seconds) or seconds < 0:
        raise ValueError(f"invalid duration {value!r}: must be zero or more; {_DURATION_HELP}")
    return seconds


def parse_size(value: object) -> int:
    """Bytes from 1048576, "500M", "256MiB", "1GiB" or "2GB" (K/M/G/T are powers of 1024)."""
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise ValueError(f"expected a size, got {type(value).__name__}; {_SIZE_HELP}")
    if isinstance(value, int):
        size = float(value)
    else:
        match = _SIZE.fullmatch(value.strip())
        if match is None or (match[3] and not match[2]):
            raise ValueError(f"invalid size {value!r}; {_SIZE_HELP}")
        number, prefix, binary, unit_b = match.groups()
        base = 1000 if unit_b and prefix and not binary else 1024
        size = float(number) * base ** _SIZE_POWERS[prefix.lower()]
    if size < 1:
        raise ValueError(f"invalid size {value!r}: must be at least 1 byte; {_SIZE_HELP}")
    return int(size)


def _plain_number(text: str, error: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise ValueError(error) from None


@dataclass(frozen=True)
class SpecProblem:
    """One thing wrong with a spec, and where."""

    text: str
    line: int | None = None
    field: str | None = None
    column: int | None = None

    def render(self, source: str) -> str:
        """`<source>:<line>[:<column>]: <field>: <text>`, leaving out what is unknown."""
        where = source
        if self.line is not None:
            where += f":{self.line}" + (f":{self.column}" if self.column is not None else "")
        return f"{where}: {self.field}: {self.text}" if self.field else f"{where}: {self.text}"


class SpecError(UsageError):
    """An invalid or unreadable job spec.

    str(err) is the whole message, one problem per line, in file order; `line` and
    `field` belong to the first problem, `problems` holds them all.
    """

    what = "invalid job spec: "

    def __init__(
        self,
        source: str,
        text: str,
        line: int | None = None,
        field: str | None = None,
        *,
        column: int | None = None,
        others: Sequence[SpecProblem] = (),
    ) -> None:
        self.source = source
        self.text = text
        self.line = line
        self.field = field
        self.column = column
        self.problems = (SpecProblem(text, line, field, column), *others)
        super().__init__("\n".join(p.render(source) for p in self.problems))

    @classmethod
    def from_problems(cls, source: str, problems: Sequence[SpecProblem]) -> SpecError:
        """One error carrying several problems (at least one)."""
        first, *rest = problems
        return cls(source, first.text, first.line, first.field, column=first.column, others=rest)


@dataclass
class Marks:
    """Where each value, and each mapping key, of a loaded document sits in its file."""

    values: dict[Loc, yaml.Node] = field(default_factory=dict)
    keys: dict[Loc, yaml.Node] = field(default_factory=dict)

    def value_line(self, loc: Loc) -> int | None:
        """Line of the value at loc, or of its nearest enclosing value."""
        for end in range(len(loc), -1, -1):
            node = self.values.get(loc[:end])
            if node is not None:
                return int(node.start_mark.line) + 1
        return None

    def key_line(self, loc: Loc) -> int | None:
        """Line of the key that names loc, else of the value holding it."""
        node = self.keys.get(loc)
        return int(node.start_mark.line) + 1 if node is not None else None

    def node(self, loc: Loc) -> yaml.Node | None:
        return self.values.get(loc)


def load_yaml(text: str, source: str) -> tuple[Any, Marks]:
    """Parse one YAML document with the safe loader; plain data plus its marks."""
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.MarkedYAMLError as err:
        raise _yaml_error(err, source) from None
    except yaml.YAMLError as err:
        raise SpecError(source, f"invalid YAML: {err}") from None
    if root is None:
        raise SpecError(source, "the file is empty; a job spec needs at least `name: my-job`")
    marks = Marks()
    return _Builder(source, marks).build(root, ()), marks


def _yaml_error(err: yaml.MarkedYAMLError, source: str) -> SpecError:
    mark = err.problem_mark or err.context_mark
    problem = str(err.problem or err.context or "cannot parse").removeprefix("but ")
    text = f"invalid YAML: {problem}"
    if err.context and err.context_mark is not None and err.problem:
        text += f" ({err.context}, line {err.context_mark.line + 1})"
    text += next((hint for words, hint in _YAML_HINTS if words in text), "")
    if mark is None:
        return SpecError(source, text)
    return SpecError(source, text, mark.line + 1, column=mark.column + 1)


_YAML_HINTS = (
    ("'\\t'", "; YAML does not allow tabs for indentation, use spaces"),
    ("another document", "; a job spec is one document: remove the `---` line"),
)


class _Builder:
    """Turns composed nodes into dicts, lists and scalars, recording each node's place."""

    def __init__(self, source: str, marks: Marks) -> None:
        self._source = source
        self._marks = marks
        self._scalars = SafeConstructor()
        self._open: set[int] = set()

    def build(self, node: yaml.Node, loc: Loc) -> Any:
        self._marks.values[loc] = node
        if isinstance(node, yaml.ScalarNode):
            return self._scalar(node)
        if id(node) in self._open:
            raise self._error(node, loc, "an alias refers to the value that contains it")
        if node.tag not in (_MAP_TAG, _SEQ_TAG):
            raise self._error(node, loc, f"unsupported YAML tag {node.tag!r}; write plain data")
        self._open.add(id(node))
        try:
            if isinstance(node, yaml.MappingNode):
                return self._mapping(node, loc)
            return [self.build(item, (*loc, i)) for i, item in enumerate(node.value)]
        finally:
            self._open.discard(id(node))

    def _mapping(self, node: yaml.MappingNode, loc: Loc) -> dict[Any, Any]:
        try:
            self._scalars.flatten_mapping(node)  # applies `<<: *anchor` merge keys
        except yaml.MarkedYAMLError as err:
            raise _yaml_error(err, self._source) from None
        out: dict[Any, Any] = {}
        for key_node, value_node in node.value:
            if not isinstance(key_node, yaml.ScalarNode):
                raise self._error(
                    key_node, loc, "a key must be a plain word, not a list or mapping"
                )
            key = self._scalar(key_node)
            if key in out:
                first = self._marks.keys[(*loc, key)].start_mark.line + 1
                text = f"duplicate key (first given at line {first}); keep one of them"
                raise self._error(key_node, (*loc, key), text)
            self._marks.keys[(*loc, key)] = key_node
            out[key] = self.build(value_node, (*loc, key))
        return out

    def _scalar(self, node: yaml.ScalarNode) -> Any:
        try:
            return self._scalars.construct_object(node, deep=True)
        except yaml.MarkedYAMLError as err:
            raise _yaml_error(err, self._source) from None

    def _error(self, node: yaml.Node, loc: Loc, text: str) -> SpecError:
        mark, field = node.start_mark, _path(loc, self._marks) or None
        return SpecError(self._source, text, mark.line + 1, field, column=mark.column + 1)


def problems_from(
    err: ValidationError, marks: Marks | None, model: type[BaseModel]
) -> list[SpecProblem]:
    """Each pydantic error as a SpecProblem with its field path and line, in file order."""
    problems = [_problem(dict(e), marks or Marks(), model) for e in err.errors()]
    return sorted(problems, key=lambda p: (p.line is None, p.line or 0))


def _problem(e: dict[str, Any], marks: Marks, model: type[BaseModel]) -> SpecProblem:
    loc: Loc = tuple(e["loc"])
    ctx = e.get("ctx") or {}
    if loc and loc[-1] == "[key]":  # a mapping key itself is wrong: point at the key
        loc = loc[:-1]
        return SpecProblem(_text(e, None, model, loc), marks.key_line(loc), _path(loc, marks))
    if "field" in ctx:  # a check across fields names the one to fix
        target: Loc = (*loc, *str(ctx["field"]).split("."))
        near = [target[:end] for end in range(len(target), len(loc), -1)]
        near += [(*loc, str(ctx["near"]))] if ctx.get("near") else []
        lines = [marks.key_line(place) for place in near]
        line = next((n for n in lines if n is not None), marks.value_line(loc))
        return SpecProblem(str(e["msg"]), line, _path(target, marks))
    if e["type"] in ("extra_forbidden", "invalid_key", "missing"):
        line = marks.key_line(loc) or marks.value_line(loc[:-1])
    else:
        line = marks.value_line(loc)
    return SpecProblem(_text(e, marks.node(loc), model, loc), line, _path(loc, marks) or None)


def _path(loc: Loc, marks: Marks | None = None) -> str:
    """`restart.backoff.max`, `command[2]`; an int is an index only where a list holds it."""
    out = ""
    for end, part in enumerate(loc):
        holder = marks.node(loc[:end]) if marks is not None else None
        index = isinstance(part, int) and not isinstance(holder, yaml.MappingNode)
        out += f"[{part}]" if index else (f".{part}" if out else str(part))
    return out


_EXPECTED = {
    "int_type": "expected an integer",
    "int_parsing": "expected an integer",
    "int_from_float": "expected an integer",
    "float_type": "expected a number",
    "float_parsing": "expected a number",
    "bool_type": "expected true or false",
    "bool_parsing": "expected true or false",
    "list_type": "expected a list such as [a, b]",
    "dict_type": "expected a mapping (key: value)",
    "model_type": "expected a mapping (key: value)",
    "model_attributes_type": "expected a mapping (key: value)",
}


def _text(e: dict[str, Any], node: yaml.Node | None, model: type[BaseModel], loc: Loc) -> str:
    kind, ctx, value = e["type"], e.get("ctx") or {}, e["input"]
    if kind in ("extra_forbidden", "invalid_key"):
        return _unknown_key(loc, model)
    if kind == "missing":
        return _missing(loc, model)
    if kind == "string_type":
        return _not_a_string(value, node)
    if kind == "value_error":
        return str(ctx.get("error", e["msg"]))
    if kind == "literal_error":
        return f"expected one of {ctx['expected']}, got {_got(value, node)}"
    if kind in ("greater_than_equal", "greater_than"):
        bound = f"at least {ctx['ge']}" if "ge" in ctx else f"greater than {ctx['gt']}"
        return f"must be {bound}, got {_got(value, node)}"
    if kind in _EXPECTED:
        return f"{_EXPECTED[kind]}, got {_got(value, node)}"
    return str(e["msg"])


def _unknown_key(loc: Loc, model: type[BaseModel]) -> str:
    owner = _model_at(model, loc[:-1])
    if owner is None:
        return "unknown key"
    allowed = sorted(owner.model_fields)
    text = f"unknown key (allowed: {', '.join(allowed)})"
    close = difflib.get_close_matches(str(loc[-1]), allowed, n=1)
    return f"{text}; did you mean {close[0]!r}?" if close else text


def _missing(loc: Loc, model: type[BaseModel]) -> str:
    owner = _model_at(model, loc[:-1])
    info = owner.model_fields.get(str(loc[-1])) if owner is not None else None
    example = info.examples[0] if info is not None and info.examples else "..."
    where = f"under {_path(loc[:-1])}" if len(loc) > 1 else "at the top level"
    return f"required key is missing; add `{loc[-1]}: {example}` {where}"


def _model_at(model: type[BaseModel], path: Loc) -> type[BaseModel] | None:
    current = model
    for part in path:
        info = current.model_fields.get(part) if isinstance(part, str) else None
        annotation = info.annotation if info is not None else None
        if not (isinstance(annotation, type) and issubclass(annotation, BaseModel)):
            return None
        current = annotation
    return current


def _not_a_string(value: Any, node: yaml.Node | None) -> str:
    if value is None:
        return 'expected a string, got nothing (null); write "" for an empty string'
    if isinstance(value, (list, dict)):
        return f"expected a string, got {_got(value, node)}"
    text = node.value if isinstance(node, yaml.ScalarNode) else json.dumps(value, default=str)
    return f'expected a string, got {_got(value, node)}; quote it: "{text}"'


def _got(value: Any, node: yaml.Node | None) -> str:
    """How a bad value reads to the person who wrote it (the YAML text where known)."""
    if value is None:
        return "nothing (null)"
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, str):
        return repr(value)
    kind = "a boolean" if isinstance(value, bool) else "a number"
    if not isinstance(value, (bool, int, float)):
        kind = f"a {type(value).__name__}"
    if isinstance(node, yaml.ScalarNode):
        return f"{node.value} ({kind})"
    return f"{json.dumps(value, default=str)} ({kind})"
