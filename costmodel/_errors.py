"""One error type for bad user input, raised only at the boundary.

The message always names the argument, what was expected and what arrived, e.g.
``tp must divide heads=96: expected a divisor of 96, got tp=7``. The CLI turns it into
one line on stderr and exit code 2.
"""

from __future__ import annotations

# The most characters of a received list or mapping a message shows (a file's value may be a YAML alias chain whose
# expansion would not fit in memory: its repr is cut short, not built whole).
GOT_CHARS = 1000


def bounded_repr(value: object, limit: int = GOT_CHARS) -> str:
    """repr(value), but a list, tuple, set or dict is written only up to about ``limit`` characters (then "...")
    without building the rest; the same text as repr for those shorter than that."""
    if not isinstance(value, (list, tuple, dict, set, frozenset)):
        return repr(value)
    parts: list[str] = []
    size = 0

    class _Full(Exception):
        pass

    def put(text: str) -> None:
        nonlocal size
        parts.append(text)
        size += len(text)
        if size > limit:
            raise _Full

    def walk(v: object) -> None:
        if type(v) is dict:
            put("{")
            for i, (k, x) in enumerate(v.items()):
                put(", " if i else "")
                walk(k)
                put(": ")
                walk(x)
            put("}")
        elif type(v) in (list, tuple, set, frozenset):
            if isinstance(v, (set, frozenset)) and not v:
                put(repr(v))
                return
            opening, closing = {list: "[]", tuple: "()", set: "{}", frozenset: "{}"}[type(v)]
            put(("frozenset(" if type(v) is frozenset else "") + opening)
            for i, x in enumerate(v):
                put(", " if i else "")
                walk(x)
            put(("," if type(v) is tuple and len(v) == 1 else "") + closing + (")" if type(v) is frozenset else ""))
        else:
            put(repr(v))

    try:
        walk(value)
    except _Full:
        return "".join(parts)[:limit] + "..."
    return "".join(parts)


class InputError(ValueError):
    """Bad user input: names the argument, the expectation and the received value."""

    def __init__(self, argument: str, expected: str, got: object) -> None:
        self.argument = argument
        self.expected = expected
        self.got = got
        super().__init__(f"{argument}: expected {expected}, got {bounded_repr(got)}")
