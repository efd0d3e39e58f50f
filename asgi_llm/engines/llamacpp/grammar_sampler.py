"""llama.cpp's grammar sampler as sampling.py uses it: built from GBNF, asked whether it takes a
token, and primed with text an output already holds (a call begun in free text, a prefill the
reply continues), one token at a time, each checked first."""

from __future__ import annotations

import ctypes
import logging
import math
from typing import Any

import llama_cpp

from ...core.errors import InternalError, InvalidRequest
from .native import Model

__all__ = ["allows", "continuing_grammar", "new_grammar", "primed_grammar"]

log = logging.getLogger("asgi_llm.engine")


def new_grammar(model: Model, gbnf: str) -> Any:
    """A grammar sampler of its own, not in any chain yet; the caller frees it or hands it on."""
    sampler = llama_cpp.llama_sampler_init_grammar(model.vocab, gbnf.encode("utf-8"), b"root")
    if not sampler:
        raise InternalError("The output grammar could not be built.")
    return sampler


def allows(grammar: Any, token: int) -> bool:
    """Whether `grammar` takes `token` next (asked of one token, not the vocabulary)."""
    data = (llama_cpp.llama_token_data * 1)(llama_cpp.llama_token_data(token, 0.0, 0.0))
    candidates = llama_cpp.llama_token_data_array(data=data, size=1, selected=-1, sorted=False)
    llama_cpp.llama_sampler_apply(grammar, ctypes.byref(candidates))
    return math.isfinite(data[0].logit)


def primed_grammar(model: Model, gbnf: str, text: str) -> tuple[Any, str] | None:
    """A grammar sampler that has taken `text` already, and the text as its tokens spell it;
    None where it would not.

    A token the grammar does not allow must never reach `llama_sampler_accept`: llama.cpp
    throws from there, and an exception cannot cross into Python. Each is checked first.
    """
    try:
        grammar = new_grammar(model, gbnf)
    except InternalError:
        log.warning("llama.cpp rejected a tool-call grammar")
        return None
    tokens = model.tokenize(text, add_bos=False, special=False) if text else []
    spelled = b"".join(model.piece(t) for t in tokens).decode("utf-8", "replace")
    primed = spelled in (text, " " + text)
    for token in tokens if primed else ():
        if not allows(grammar, token):
            primed = False
            break
        llama_cpp.llama_sampler_accept(grammar, token)
    if not primed:
        llama_cpp.llama_sampler_free(grammar)
        return None
    return grammar, spelled


def continuing_grammar(model: Model, gbnf: str, text: str, param: str) -> tuple[Any, str]:
    """A grammar sampler for an output that continues `text` (an assistant's prefill), having
    taken it already, and the text as taken: the prefill and the reply make one document. A
    prefill the grammar cannot begin with is refused, naming `param`."""
    if not text:
        return new_grammar(model, gbnf), ""
    primed = primed_grammar(model, gbnf, text)
    if primed is None:
        raise InvalidRequest(
            "The assistant's last message is a prefill the reply must continue, and the requested "
            "format or tool call cannot begin with it: send a start of a valid output, or no prefill.",
            param=param,
        )
    return primed
