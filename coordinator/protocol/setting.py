"""The form of a settings table: each setting once, with its type, default, accepted range and help (the
pattern of Celery's app/defaults.py).

Two tables have this form: the coordinator's (coordinator/conf.py) and the members' (consumers/conf.py,
which may import this package but not the coordinator's Django layer). What derives from a table: the
defaults a host project does not define (``apply_defaults``), the typed, frozen view code reads
(``read``), the system checks' ranges, config/settings.py's environment variables and docs/plugin.md's
settings table (tests/test_plugin.py). Pure: each conf module hands Django's settings to ``read`` itself.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, make_dataclass
from typing import Any, Literal


@dataclass(frozen=True, slots=True)
class Setting:
    """One setting: its name, type, default, help, and accepted range (inclusive; None: unbounded).

    ``check`` names the system check that validates it (coordinator/checks.py): ``"ms"`` a positive
    integer of milliseconds (rsc.E001, and rsc.E005 for its range), ``"count"`` an integer in its range
    (rsc.E006); None: not range-checked there. ``what`` is what the range is the range of, for the
    messages. ``help`` is the text of docs/plugin.md's table (Markdown).
    """

    name: str
    type: type
    default: Any
    help: str
    low: int | None = None
    high: int | None = None
    what: str = ""
    check: Literal["ms", "count"] | None = None

    def fresh_default(self) -> Any:
        """The default, a list or dict copied: a host mutating its setting changes no other's default
        (tests configure several settings objects in one interpreter)."""
        value = self.default
        return value.copy() if isinstance(value, list | dict) else value


class SettingsTable:
    """The settings of one app, and what derives from them."""

    def __init__(self, values_name: str, settings: Iterable[Setting]) -> None:
        self.settings: tuple[Setting, ...] = tuple(settings)
        self.by_name: dict[str, Setting] = {s.name: s for s in self.settings}
        if len(self.by_name) != len(self.settings):
            raise ValueError("a setting is listed twice")
        # name -> default (the table's own objects: copy before handing one out, see fresh_default).
        self.defaults: dict[str, Any] = {s.name: s.default for s in self.settings}
        # The typed, frozen view of the settings: one attribute per setting, of the setting's type.
        self.values: type = make_dataclass(
            values_name, [(s.name, s.type) for s in self.settings], frozen=True, slots=True
        )

    def default(self, name: str) -> Any:
        """The default of ``name`` (a fresh copy of a list or dict)."""
        return self.by_name[name].fresh_default()

    def apply_defaults(self, target: object) -> list[str]:
        """Set every setting of the table that ``target`` lacks to its default; return the names set.

        Idempotent: a second call finds them all present and sets nothing. A setting present is never
        touched (the pattern of django-appconf).
        """
        missing = [s for s in self.settings if not hasattr(target, s.name)]
        for setting in missing:
            setattr(target, setting.name, setting.fresh_default())
        return [s.name for s in missing]

    def read(self, source: object) -> Any:
        """The frozen view of ``source``'s settings (an instance of ``values``), a missing one at its
        default. The values are taken as they are: the system checks say what is wrong with them."""
        return self.values(**{s.name: getattr(source, s.name, s.fresh_default()) for s in self.settings})
