"""Model prices, so a run can report ``cost_usd`` and stop at ``--evolve-max-usd``.

Prices are USD per million tokens, input and output separately, as the providers
publish them.  The defaults cover the current Anthropic and OpenAI models; they
go stale, so the ini key ``evolve_prices`` overrides or adds entries with lines
``model = input_usd_per_mtok output_usd_per_mtok`` (see :func:`parse_price_lines`).

A model with no price (a local Ollama model, a brand-new release) costs ``None``,
never a guess: the budget check then knows it cannot enforce ``--evolve-max-usd``.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from agentdescent_core.proposers.models import Usage


@dataclass(frozen=True)
class Price:
    """USD per million input tokens and per million output tokens."""

    input_per_mtok: float
    output_per_mtok: float

    def __post_init__(self) -> None:
        for name in ("input_per_mtok", "output_per_mtok"):
            value = getattr(self, name)
            if not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
                raise ValueError(f"price {name}={value!r} must be a finite number >= 0 (USD/Mtok)")


#: Published list prices (USD per million tokens: input, output) as of late 2025.
DEFAULT_PRICES: Mapping[str, Price] = {
    # Anthropic
    "claude-opus-4-5": Price(5.0, 25.0),
    "claude-opus-4-1": Price(15.0, 75.0),
    "claude-opus-4-0": Price(15.0, 75.0),
    "claude-opus-4": Price(15.0, 75.0),
    "claude-sonnet-4-5": Price(3.0, 15.0),
    "claude-sonnet-4-0": Price(3.0, 15.0),
    "claude-sonnet-4": Price(3.0, 15.0),
    "claude-3-7-sonnet": Price(3.0, 15.0),
    "claude-3-5-sonnet": Price(3.0, 15.0),
    "claude-haiku-4-5": Price(1.0, 5.0),
    "claude-3-5-haiku": Price(0.8, 4.0),
    "claude-3-haiku": Price(0.25, 1.25),
    # OpenAI
    "gpt-5": Price(1.25, 10.0),
    "gpt-5-mini": Price(0.25, 2.0),
    "gpt-5-nano": Price(0.05, 0.4),
    "gpt-4.1": Price(2.0, 8.0),
    "gpt-4.1-mini": Price(0.4, 1.6),
    "gpt-4.1-nano": Price(0.1, 0.4),
    "gpt-4o": Price(2.5, 10.0),
    "gpt-4o-mini": Price(0.15, 0.6),
    "o3": Price(2.0, 8.0),
    "o3-mini": Price(1.1, 4.4),
    "o4-mini": Price(1.1, 4.4),
}

# A dated snapshot ("claude-haiku-4-5-20251001", "gpt-4o-2024-08-06") or an alias
# suffix ("-latest") costs what its base model costs.  Only these suffixes are
# stripped: a prefix match would price "o3-pro" as "o3".
_SNAPSHOT_SUFFIX = re.compile(r"-(?:\d{8}|\d{4}-\d{2}-\d{2}|latest)$")


def _normalise(model: str) -> str:
    return model.strip().lower()


class PriceTable:
    """Looks up a model's price; immutable, so one table can serve every thread."""

    def __init__(self, prices: Mapping[str, Price] | None = None) -> None:
        source = DEFAULT_PRICES if prices is None else prices
        self._prices: dict[str, Price] = {_normalise(k): v for k, v in source.items()}

    @classmethod
    def default(cls) -> PriceTable:
        return cls()

    def with_overrides(self, overrides: Mapping[str, Price | tuple[float, float]]) -> PriceTable:
        """A new table where ``overrides`` replace or add entries (ini ``evolve_prices``)."""
        merged = dict(self._prices)
        for model, price in overrides.items():
            if not model.strip():
                raise ValueError("a price override needs a model name")
            merged[_normalise(model)] = price if isinstance(price, Price) else Price(*price)
        return PriceTable(merged)

    def price(self, model: str) -> Price | None:
        """The price of ``model`` (exact name, else its base name without a date suffix)."""
        name = _normalise(model)
        found = self._prices.get(name)
        if found is None:
            found = self._prices.get(_SNAPSHOT_SUFFIX.sub("", name))
        return found

    def cost(self, model: str, usage: Usage) -> float | None:
        """USD for ``usage`` tokens of ``model``; None when the model has no price."""
        price = self.price(model)
        if price is None:
            return None
        return (
            usage.input_tokens * price.input_per_mtok + usage.output_tokens * price.output_per_mtok
        ) / 1_000_000

    def __contains__(self, model: object) -> bool:
        return isinstance(model, str) and self.price(model) is not None

    def as_dict(self) -> dict[str, tuple[float, float]]:
        return {k: (v.input_per_mtok, v.output_per_mtok) for k, v in sorted(self._prices.items())}


def parse_price_lines(lines: Iterable[str]) -> dict[str, Price]:
    """Parse ini ``evolve_prices`` lines: ``model = input_usd_per_mtok output_usd_per_mtok``.

    Blank lines and ``#`` comments are skipped.  A malformed line is a ValueError
    that quotes it and shows the expected form, so the plugin can turn it into a
    usage error.
    """
    parsed: dict[str, Price] = {}
    for raw in lines:
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        model, sep, numbers = line.partition("=")
        fields = numbers.split()
        if not sep or not model.strip() or len(fields) != 2:
            raise ValueError(
                f"evolve_prices line {raw.strip()!r} is not "
                "'MODEL = INPUT_USD_PER_MTOK OUTPUT_USD_PER_MTOK' (e.g. 'gpt-4o-mini = 0.15 0.60')"
            )
        try:
            parsed[model.strip()] = Price(float(fields[0]), float(fields[1]))
        except ValueError as exc:
            raise ValueError(f"evolve_prices line {raw.strip()!r}: {exc}") from None
    return parsed
