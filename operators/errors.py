"""The one error type for bad input.

Every validation failure names the field (``section.key`` for scenario fields, a
file path for files) so the CLI can print one line and exit with status 2.
"""

from __future__ import annotations


class ConfigError(ValueError):
    """Bad user input: a scenario field, a file, a profile name."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


def require_positive(field: str, value: float) -> None:
    if not value > 0:  # also rejects NaN
        raise ConfigError(field, f"must be positive, got {value!r}")


def require_int(field: str, value: object, minimum: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(field, f"must be an integer, got {value!r}")
    if value < minimum:
        raise ConfigError(field, f"must be >= {minimum}, got {value}")
    return value
