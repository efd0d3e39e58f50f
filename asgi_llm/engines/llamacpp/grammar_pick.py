"""The greedy pick under a grammar that refused the model's favourite, from the row's top tokens
instead of the whole vocabulary.

Where the grammar refuses the top token, the pick is the highest-rated token it allows. Putting
the whole vocabulary (49,152 tokens for SmolLM2) through llama.cpp's grammar costs about 5 ms, most
of a CPU step; a model the prompt did not tell of the schema is refused at every other token, and
that was 8% of a reply's time. The best the grammar allows among the row's highest tokens is the
best of all, as long as it rates above every token left out: so it is taken from the top 64, or,
where the grammar allows none of those (the model wants prose where a key must go), from the top
4,096; only where neither decides, or the one allowed ties with the tokens left out, does the
caller go to the whole vocabulary as before. Greedy on the raw logits only (no bias or penalties).
"""

from __future__ import annotations

import ctypes
from typing import Any

import llama_cpp
import numpy as np

__all__ = ["TIERS", "TOKEN_DATA", "best_allowed", "token_view"]

TIERS = (64, 4096)
"""The tokens put through the grammar, the highest first, before the whole vocabulary is."""

TOKEN_DATA = np.dtype([("id", np.int32), ("logit", np.float32), ("p", np.float32)])  # llama_token_data


def token_view(candidates: np.ndarray) -> Any:
    """llama.cpp's view of an array of `TOKEN_DATA` (unsorted, nothing selected), for its samplers
    to rule on in place."""
    data = candidates.ctypes.data_as(llama_cpp.llama_token_data_p)
    return llama_cpp.llama_token_data_array(data=data, size=len(candidates), selected=-1, sorted=False)


def best_allowed(logits: np.ndarray, grammar: Any) -> int | None:
    """The token of highest logit (the lowest id among equals, as llama.cpp's greedy pick) that
    `grammar` allows, where one of `TIERS` of the row's top holds it above all the tokens it leaves
    out; else None."""
    for size in TIERS:
        if len(logits) <= size:
            return None
        best = _best_of_top(logits, grammar, size)
        if best is not None:
            return best
    return None


def _best_of_top(logits: np.ndarray, grammar: Any, size: int) -> int | None:
    top = np.argpartition(logits, -size)[-size:]
    top = top[np.lexsort((top, -logits[top]))]  # highest first; equals by id
    candidates = np.zeros(size, dtype=TOKEN_DATA)
    candidates["id"] = top
    candidates["logit"] = logits[top]
    llama_cpp.llama_sampler_apply(grammar, ctypes.byref(token_view(candidates)))  # sets the refused to -inf
    allowed = np.flatnonzero(np.isfinite(candidates["logit"]))
    if not len(allowed):
        return None
    best = int(top[allowed[0]])
    return best if logits[best] > logits[top[-1]] else None  # a token left out may rate the same
