"""Prices per resource-hour (docs/usage.md, *Prices*): parsed and checked before a job is submitted,
applied after it ended. Keys are Ray resource names and ``memory_gib``; ``groups`` overrides the
top-level prices for one worker group's nodes. No Airflow imports.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from airflow_ray_provider.exceptions import RayInvalidInputError

#: The record's name for Ray's ``memory`` resource (bytes there, GiB here).
MEMORY = "memory_gib"
_SYMBOLS = {"USD": "$", "EUR": "€", "GBP": "£"}


def resource_name(ray_name: str) -> str | None:
    """The record's name of a Ray resource: ``memory`` -> ``memory_gib``; ``None`` for bookkeeping ones
    (``node:<ip>``, ``object_store_memory``, accelerator-type markers) that are never priced."""
    if ray_name == "memory":
        return MEMORY
    if ray_name.startswith(("node:", "accelerator_type:")) or ray_name == "object_store_memory":
        return None
    return ray_name


@dataclass(frozen=True)
class Prices:
    """A checked price table: ``default`` for every node, ``groups`` overriding it per worker group;
    ``source`` names where it came from, for messages."""

    default: dict[str, float] = field(default_factory=dict)
    groups: dict[str, dict[str, float]] = field(default_factory=dict)
    currency: str = "USD"
    source: str = "prices"

    def for_group(self, group: str | None) -> dict[str, float]:
        """The prices of one worker group's nodes."""
        return {**self.default, **self.groups.get(group or "", {})}

    def format(self, amount: float) -> str:
        """``~$0.13`` (``~0.13 CHF`` for a currency without a symbol here)."""
        text = f"{amount:.2f}" if amount >= 0.01 else f"{amount:.2g}"
        symbol = _SYMBOLS.get(self.currency)
        return f"~{symbol}{text}" if symbol else f"~{text} {self.currency}"

    def to_dict(self) -> dict[str, Any]:
        """The table as given (for the record)."""
        return {
            **self.default,
            "currency": self.currency,
            "groups": {g: dict(t) for g, t in self.groups.items()},
        }


def _table(value: Any, where: str) -> dict[str, float]:
    if not isinstance(value, Mapping):
        raise RayInvalidInputError(f"{where} must be a mapping of resource name to price, got {value!r}")
    for name, price in value.items():
        if not isinstance(name, str) or not name or name == "memory" or resource_name(name) is None:
            hint = " (price Ray's memory as memory_gib, per GiB-hour)" if name == "memory" else ""
            raise RayInvalidInputError(f"{where} has a bad resource name {name!r}{hint}")
        if isinstance(price, bool) or not isinstance(price, int | float) or not 0 < price < math.inf:
            raise RayInvalidInputError(
                f"{where}[{name!r}] must be a positive number (a price per resource-hour), got {price!r}"
            )
    return {name: float(price) for name, price in value.items()}


def parse_prices(value: Any, *, source: str = "prices") -> Prices | None:
    """Check a price table's shape and numbers (no cluster needed), before anything starts; ``None``
    for no prices (the record shows no cost).

    :param source: where it came from (``"connection 'ray_default' extra 'prices'"``).
    :raises RayInvalidInputError: naming the field.
    """
    if value is None or isinstance(value, Prices):
        return value
    if not isinstance(value, Mapping):
        raise RayInvalidInputError(f"{source} must be a mapping such as {{'CPU': 0.05}}, got {value!r}")
    rest = dict(value)
    currency = rest.pop("currency", "USD")
    if not isinstance(currency, str) or not currency.strip():
        raise RayInvalidInputError(
            f"{source}['currency'] must be a currency code such as 'USD', got {currency!r}"
        )
    groups = rest.pop("groups", {}) or {}
    if not isinstance(groups, Mapping):
        raise RayInvalidInputError(f"{source}['groups'] must map worker-group names to price tables")
    by_group = {str(g): _table(t, f"{source}['groups'][{g!r}]") for g, t in groups.items()}
    prices = Prices(_table(rest, source), by_group, currency.strip().upper(), source)
    if not prices.default and not any(prices.groups.values()):
        raise RayInvalidInputError(f"{source} names no resource to price; e.g. {{'CPU': 0.05}}")
    return prices


def check_against_cluster(prices: Prices, groups: Mapping[str, Iterable[str]]) -> None:
    """Fail before submit on a price for a resource the cluster does not have.

    :param groups: the record's resource names of each worker group that has nodes now; a group's own
        prices are checked only when it has nodes (an autoscaled group may have none yet).
    :raises RayInvalidInputError: naming the field and the resources the cluster has.
    """
    checks = [(prices.source, prices.default, set().union(*groups.values()), "the cluster")]
    checks += [(f"{prices.source}['groups'][{group!r}]", table, set(groups[group]), f"worker group {group!r}")
               for group, table in prices.groups.items() if groups.get(group)]  # fmt: skip
    for where, table, have, whose in checks:
        if lacking := sorted(set(table) - have):
            raise RayInvalidInputError(
                f"{where} prices {lacking}, which {whose} does not have (it has {sorted(have)}); "
                "drop those prices or fix their names"
            )
