"""What is left of a key's limits, told as OpenAI tells it: `x-ratelimit-*` response headers.

`x-ratelimit-limit-requests` / `-remaining-requests` / `-reset-requests` describe the
requests-per-minute limit; the `-tokens` three describe whichever of the key's token limits
(per minute, per day, per month, in total) has the least left. A reset is the time until the
limit is whole again, in OpenAI's duration format (`1s`, `6m0s`, `20ms`); a budget that never
renews (`tokens_total`) has no reset header.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

__all__ = ["Quota", "duration", "quota_headers", "tightest"]


@dataclass(frozen=True)
class Quota:
    limit: int
    remaining: int
    reset: float | None
    """Seconds until the limit is whole again; None: it never renews by itself."""


def duration(seconds: float) -> str:
    """OpenAI's (Go's) duration format: `0s`, `250ms`, `1s`, `1.5s`, `6m0s`, `23h59m59s`."""
    millis = max(round(seconds * 1000), 0)
    if millis == 0:
        return "0s"
    if millis < 1000:
        return f"{millis}ms"
    hours, rest = divmod(millis, 3_600_000)
    minutes, rest = divmod(rest, 60_000)
    secs = f"{rest / 1000:.3f}".rstrip("0").rstrip(".")
    if hours:
        return f"{hours}h{minutes}m{secs}s"
    if minutes:
        return f"{minutes}m{secs}s"
    return f"{secs}s"


def tightest(quotas: Iterable[Quota]) -> Quota | None:
    """The quota with the least left (the first of equals)."""
    found: Quota | None = None
    for quota in quotas:
        if found is None or quota.remaining < found.remaining:
            found = quota
    return found


def quota_headers(requests: Quota | None, tokens: Quota | None) -> list[tuple[str, str]]:
    headers: list[tuple[str, str]] = []
    for kind, quota in (("requests", requests), ("tokens", tokens)):
        if quota is None:
            continue
        headers += [
            (f"x-ratelimit-limit-{kind}", str(quota.limit)),
            (f"x-ratelimit-remaining-{kind}", str(quota.remaining)),
        ]
        if quota.reset is not None:
            headers.append((f"x-ratelimit-reset-{kind}", duration(quota.reset)))
    return headers
