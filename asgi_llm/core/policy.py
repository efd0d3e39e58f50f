"""Who a key belongs to and what it may do: the identity the auth layer (or the host, in
process) hands to the layers inside, kept in the request's `RequestContext`."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, fields

__all__ = ["KeyInfo", "Limits"]


@dataclass(frozen=True)
class Limits:
    """Per-key limits; None means unlimited. Budgets are tokens (prompt + completion) per UTC
    day, per UTC month, and in total; they count real usage after each request."""

    requests_per_minute: int | None = None
    tokens_per_minute: int | None = None
    max_concurrent: int | None = None
    tokens_per_day: int | None = None
    tokens_per_month: int | None = None
    tokens_total: int | None = None
    max_tokens: int | None = None
    """Generated tokens per request: the default when a request names none, a 400 above it."""

    @property
    def unlimited(self) -> bool:
        return all(getattr(self, f.name) is None for f in fields(self))


@dataclass(frozen=True)
class KeyInfo:
    """An authenticated caller. `name` is what logs, records and metrics show — never the key.

    `models` and `protocols` are allow-lists (None = all); `limits` replaces the default limits.
    `operator` keys may also read what spans every key (`/metrics`); other keys serve inference only.
    """

    name: str
    models: frozenset[str] | None = None
    protocols: frozenset[str] | None = None
    limits: Limits | None = None
    operator: bool = False

    def may_use(self, model: str, resolve: Callable[[str], str | None]) -> bool:
        """Whether `model` (an id or alias) is one this key may use: named in `models` itself, or
        naming the same model as an entry there (`resolve` maps a name to the model's id)."""
        if self.models is None or model in self.models:
            return True
        canonical = resolve(model)
        return canonical is not None and canonical in {resolve(name) for name in self.models}
