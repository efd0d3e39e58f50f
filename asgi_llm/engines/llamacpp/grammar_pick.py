"""The greedy pick under a grammar that refused the model's favourite, from the row's top tokens
instead of the whole vocabulary.

Where the grammar refuses the top token, the pick is the highest-rated token it allows. Putting
the whole vocabulary (49,152 tokens for SmolLM2) through llama.cpp's grammar costs about 5 ms, most
of a CPU step; a model the prompt did not tell of the schema is refused at every other token, and
that was 8% of a reply's time. The best the grammar allows among the `TOP` highest is the best of
all, as long as it rates above every token left out: so it is taken from the top alone, and where
the grammar allows none of them, or the one it allows ties with the tokens left out, the caller
goes to the whole vocabulary as before. Greedy on the raw logits only (no bias or penalties).
"""

from __future__ import annotations

import ctypes
from typing import Any

import llama_cpp
import numpy as np

__all__ = ["TOP", "best_allowed"]

TOP = 64
"""Tokens put through the grammar before the whole vocabulary is."""

_TOKEN_DATA = np.dtype([("id", np.int32), ("logit", np.float32), ("p", np.float32)])  # llama_token_data


def best_allowed(logits: np.ndarray, grammar: Any) -> int | None:
    """The token of highest logit (the lowest id among equals, as llama.cpp's greedy pick) that
    `grammar` allows, where it is among the row's `TOP` and rates above all the others; else None."""
    if len(logits) <= TOP:
        return None
    top = np.argpartition(logits, -TOP)[-TOP:]
    top = top[np.lexsort((top, -logits[top]))]  # highest first; equals by id
    candidates = np.zeros(TOP, dtype=_TOKEN_DATA)
    candidates["id"] = top
    candidates["logit"] = logits[top]
    view = llama_cpp.llama_token_data_array(
        data=candidates.ctypes.data_as(llama_cpp.llama_token_data_p), size=TOP, selected=-1, sorted=False
    )
    llama_cpp.llama_sampler_apply(grammar, ctypes.byref(view))  # sets the refused to -inf, in place
    allowed = np.flatnonzero(np.isfinite(candidates["logit"]))
    if not len(allowed):
        return None
    best = int(top[allowed[0]])
    return best if logits[best] > logits[top[-1]] else None  # a token left out may rate the same
