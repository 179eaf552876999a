"""The one error type for bad input.

Every validation failure names the field (``section.key`` for scenario fields, a
file path for files) so the CLI can print one line and exit with status 2.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence


class ConfigError(ValueError):
    """Bad user input: a scenario field, a file, a profile name."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


class NoSamplesError(ConfigError):
    """A profile has no samples for an operator kind (``kind``, the operator kind's value), so it
    cannot price it; a caller with a stated stand-in for that kind may catch it."""

    def __init__(self, field: str, message: str, kind: str) -> None:
        super().__init__(field, message)
        self.kind = kind


def show(value: object, limit: int = 60) -> str:
    """``repr(value)`` for an error message: one short line, whatever the value.

    A huge integer is given by its size (``repr`` of an int beyond 4,300 digits raises), a long
    repr is cut; a container is never walked deeper than its first few items.
    """
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 10**18:
        return f"{'-' if value < 0 else ''}an integer of about 10^{int(math.log10(abs(value)))}"
    if isinstance(value, (list, tuple, dict, set)):
        items = list(value.items() if isinstance(value, dict) else value)[:4]
        if isinstance(value, dict):
            inner = ", ".join(f"{show(k, 20)}: {show(v, 20)}" for k, v in items)
            text = "{" + inner + (", ..." if len(value) > 4 else "") + "}"
        else:
            inner = ", ".join(show(v, 20) for v in items)
            text = "[" + inner + (", ..." if len(value) > 4 else "") + "]"
    else:
        try:
            text = repr(value)
        except Exception:  # noqa: BLE001 - a message must never fail
            text = f"<{type(value).__name__}>"
    return text if len(text) <= limit else text[:limit - 3] + "..."


def check_keys(section: str, mapping: Iterable[object], known: Sequence[str]) -> None:
    """Refuse a key of ``mapping`` (the ``section`` of a scenario; iterating it gives its keys) that is
    not in ``known``, naming it and listing ``known`` in the order given."""
    for key in mapping:
        if key not in known:
            raise ConfigError(f"{section}.{key}", f"unknown key; known: {', '.join(known)}")


def check_number(field: str, value: object, *, integer: bool = False, minimum: float | None = None,
                 maximum: float | None = None, positive: bool = False, reason: str | None = None) -> float:
    """The one number validator: a finite number (an integer when ``integer``) within bounds.

    Returns the value unchanged (an ``int`` stays an ``int``). A bool is not a number here,
    and a float is never rounded into an integer: ``2.0`` for an integer field is an error.
    ``reason`` (why ``maximum`` is what it is) is added to the message when the value exceeds it.
    Nothing is ever clamped.
    """
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        kind = "an integer" if integer else "a number"
        raise ConfigError(field, f"must be {kind}, got {show(value)}")
    if integer and not isinstance(value, int):
        raise ConfigError(field, f"must be an integer, got {show(value)}")
    if not math.isfinite(value):
        raise ConfigError(field, f"must be a finite number, got {show(value)}")
    if positive and not value > 0:
        raise ConfigError(field, f"must be positive, got {show(value)}")
    if minimum is not None and value < minimum:
        raise ConfigError(field, f"must be >= {minimum}, got {show(value)}")
    if maximum is not None and value > maximum:
        why = f" ({reason})" if reason else ""
        raise ConfigError(field, f"must be <= {maximum:,}, got {show(value)}{why}")
    return value


def require_positive(field: str, value: float) -> None:
    check_number(field, value, positive=True)


def require_int(field: str, value: object, minimum: int = 1, maximum: int | None = None,
                reason: str | None = None) -> int:
    return int(check_number(field, value, integer=True, minimum=minimum, maximum=maximum, reason=reason))
