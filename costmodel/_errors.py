"""One error type for bad user input, raised only at the boundary.

The message always names the argument, what was expected and what arrived, e.g.
``tp must divide heads=96: expected a divisor of 96, got tp=7``. The CLI turns it into
one line on stderr and exit code 2.
"""

from __future__ import annotations


class InputError(ValueError):
    """Bad user input: names the argument, the expectation and the received value."""

    def __init__(self, argument: str, expected: str, got: object) -> None:
        self.argument = argument
        self.expected = expected
        self.got = got
        super().__init__(f"{argument}: expected {expected}, got {got!r}")
