"""Reading and checking workload config values: one set of rules and messages for every workload.

A :class:`ConfigSection` wraps the config mapping, or one nested mapping of it (``batching``,
``scoring``, ``models.champion``), and reads typed values out of it. Every problem raises a
:class:`~.errors.ConfigError` that names the key by its full dotted path and says what it must be,
for example ``config key 'batching.max_in_flight' must be an integer >= 1, got 0``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from airflow_ray_provider.workloads.common.errors import ConfigError

_MISSING = object()


class ConfigSection:
    """Typed, checked access to the keys of one config mapping.

    :param raw: the mapping (as loaded from JSON or YAML).
    :param path: its dotted path in the config (``""`` for the whole config).
    """

    def __init__(self, raw: Mapping[str, Any], path: str = "") -> None:
        self.raw = raw
        self.path = path

    @classmethod
    def root(cls, raw: Any, what: str) -> ConfigSection:
        """The whole config.

        :param what: how messages name it (``"the evaluation config"``).
        :raises ConfigError: when ``raw`` is not a mapping.
        """
        if not isinstance(raw, dict):
            raise ConfigError(f"{what} must be a mapping (JSON object), got {type(raw).__name__}")
        return cls(raw)

    def section(self, name: str, *, example: str = "") -> ConfigSection:
        """The nested mapping at ``name`` (missing or null: an empty one, so every default applies).

        :param example: a short example of the mapping, quoted in the error.
        """
        value = self.raw.get(name)
        if value is None:
            return ConfigSection({}, self.key(name))
        if not isinstance(value, dict):
            like = f" like {example}" if example else ""
            raise ConfigError(
                f"config key {self.key(name)!r} must be a mapping{like}, got {type(value).__name__}"
            )
        return ConfigSection(value, self.key(name))

    def key(self, name: str) -> str:
        """The dotted path of ``name`` in the config (``batching.probe_zones``)."""
        return f"{self.path}.{name}" if self.path else name

    def __contains__(self, name: object) -> bool:
        return name in self.raw

    def reject_unknown(self, known: Iterable[str]) -> None:
        """Refuse keys that are not in ``known`` (a typo would otherwise be silently ignored)."""
        valid = set(known)
        unknown = sorted(set(self.raw) - valid)
        if unknown:
            where = f"{self.path!r}" if self.path else "config"
            raise ConfigError(f"unknown {where} key(s) {unknown}; valid keys: {sorted(valid)} (typo?)")

    def require(self, *names: str, hint: str = "") -> None:
        """Refuse a config that lacks any of ``names``."""
        for name in names:
            if name not in self.raw:
                raise ConfigError(f"config key {self.key(name)!r} is required{_paren(hint)}")

    def required_str(self, name: str, *, hint: str = "") -> str:
        """A non-empty string that must be there.

        :param hint: what the value is (``"a path or URI"``), quoted in the error.
        """
        value = self.raw.get(name, _MISSING)
        if value is _MISSING or value is None:
            raise ConfigError(f"config key {self.key(name)!r} is required{_paren(hint)}")
        return self._str(name, value, hint)

    def optional_str(self, name: str, *, hint: str = "") -> str | None:
        """A non-empty string, or ``None`` when missing or null."""
        value = self.raw.get(name)
        return None if value is None else self._str(name, value, hint)

    def number(
        self,
        name: str,
        default: float,
        *,
        low: float | None = None,
        high: float | None = None,
        low_open: bool = False,
    ) -> float:
        """A number within bounds (``low_open``: strictly above ``low``)."""
        value = self.raw.get(name, default)
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ConfigError(f"config key {self.key(name)!r} must be a number, got {value!r}")
        too_low = low is not None and (value <= low if low_open else value < low)
        if too_low or (high is not None and value > high):
            bounds = [f"{'>' if low_open else '>='} {low}"] if low is not None else []
            bounds += [f"<= {high}"] if high is not None else []
            raise ConfigError(f"config key {self.key(name)!r} must be {' and '.join(bounds)}, got {value!r}")
        return float(value)

    def optional_number(self, name: str, *, low: float, low_open: bool = False) -> float | None:
        """A number above ``low``, or ``None`` when missing or null."""
        if self.raw.get(name) is None:
            return None
        return self.number(name, 0.0, low=low, low_open=low_open)

    def integer(self, name: str, default: int, *, low: int = 0) -> int:
        """An integer ``>= low`` (``true``/``false`` are not integers here)."""
        value = self.raw.get(name, default)
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise ConfigError(f"config key {self.key(name)!r} must be an integer >= {low}, got {value!r}")
        return value

    def boolean(self, name: str, default: bool) -> bool:
        """``true`` or ``false``."""
        value = self.raw.get(name, default)
        if not isinstance(value, bool):
            raise ConfigError(f"config key {self.key(name)!r} must be true or false, got {value!r}")
        return value

    def mapping(self, name: str) -> dict[str, Any]:
        """A free-form mapping (copied), empty when missing or null."""
        value = self.raw.get(name)
        if value is None:
            return {}
        if not isinstance(value, dict):
            raise ConfigError(f"config key {self.key(name)!r} must be a mapping, got {type(value).__name__}")
        return dict(value)

    def names(
        self, name: str, *, noun: str = "column names", non_empty: bool = False, single_ok: bool = False
    ) -> tuple[str, ...] | None:
        """A list of non-empty strings, or ``None`` when missing or null.

        :param noun: what the strings are, for the error (``"metric names"``).
        :param non_empty: refuse an empty list.
        :param single_ok: accept one string as a list of one.
        """
        value = self.raw.get(name)
        if value is None:
            return None
        if single_ok and isinstance(value, str):
            value = [value]
        valid = isinstance(value, list | tuple) and all(isinstance(v, str) and v for v in value)
        if not valid or (non_empty and not value):
            kind = "non-empty list" if non_empty else "list"
            raise ConfigError(f"config key {self.key(name)!r} must be a {kind} of {noun}, got {value!r}")
        return tuple(value)

    def _str(self, name: str, value: Any, hint: str) -> str:
        if not isinstance(value, str) or not value.strip():
            raise ConfigError(
                f"config key {self.key(name)!r} must be a non-empty string{_paren(hint)}, got {value!r}"
            )
        return value


def _paren(hint: str) -> str:
    return f" ({hint})" if hint else ""
