"""The one error type for bad input.

Every validation failure names the field (``section.key`` for scenario fields, a
file path for files) so the CLI can print one line and exit with status 2.
"""

from __future__ import annotations

import math


class ConfigError(ValueError):
    """Bad user input: a scenario field, a file, a profile name."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


def check_number(field: str, value: object, *, integer: bool = False, minimum: float | None = None,
                 maximum: float | None = None, positive: bool = False) -> float:
    """The one number validator: a finite number (an integer when ``integer``) within bounds.

    Returns the value unchanged (an ``int`` stays an ``int``). A bool is not a number here,
    and a float is never rounded into an integer: ``2.0`` for an integer field is an error.
    """
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        kind = "an integer" if integer else "a number"
        raise ConfigError(field, f"must be {kind}, got {value!r}")
    if integer and not isinstance(value, int):
        raise ConfigError(field, f"must be an integer, got {value!r}")
    if not math.isfinite(value):
        raise ConfigError(field, f"must be a finite number, got {value!r}")
    if positive and not value > 0:
        raise ConfigError(field, f"must be positive, got {value!r}")
    if minimum is not None and value < minimum:
        raise ConfigError(field, f"must be >= {minimum}, got {value!r}")
    if maximum is not None and value > maximum:
        raise ConfigError(field, f"must be <= {maximum:,}, got {value!r}")
    return value


def require_positive(field: str, value: float) -> None:
    check_number(field, value, positive=True)


def require_int(field: str, value: object, minimum: int = 1, maximum: int | None = None) -> int:
    return int(check_number(field, value, integer=True, minimum=minimum, maximum=maximum))
