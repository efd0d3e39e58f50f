"""Choosing each next token: a sampler chain per choice, a grammar beside it when the output
is held to one, and the logprobs a client asked for. On the inference thread only."""

from __future__ import annotations

import ctypes
import logging
import math
import random
import weakref
from collections.abc import Callable, Mapping
from typing import Any

import llama_cpp
import numpy as np
from llama_cpp import _internals

from ...core.errors import Unsupported
from ...core.events import TokenLogprob, TopLogprob
from ...core.requests import SamplingParams
from ..decoding.closing import Closer
from ..decoding.compiled import readable
from ..decoding.constraints import LazyCalls
from ..decoding.gbnf import Grammar
from ..decoding.tool_calls import JsonValues, canonical_json
from ..decoding.tool_detect import CallDetector, call_level, trigger_grammar
from .grammar_pick import TOKEN_DATA, best_allowed, token_view
from .grammar_sampler import allows, continuing_grammar, primed_grammar
from .native import Model
from .picks import PENALTY_WINDOW, GreedyPick, bounded, fast_pick, penalized, top_k

__all__ = ["Sampling", "accepted_grammar", "following", "logprob", "readable", "spelling"]

log = logging.getLogger("asgi_llm.engine")
internals: Any = _internals  # untyped; only its sampler chain is used
Logits = Callable[[int], Any]  # batch row -> the ctypes float pointer of its logits


def accepted_grammar(model: Model, gbnf: str, param: str, refusal: str = "") -> str:
    """`gbnf`, once llama.cpp has built a sampler from it (a client's own grammar was read by
    `client_grammar` first, as strictly as llama.cpp reads it)."""
    sampler = llama_cpp.llama_sampler_init_grammar(model.vocab, gbnf.encode("utf-8"), b"root")
    if not sampler:
        log.warning("llama.cpp rejected the grammar for %s", param)
        raise Unsupported(refusal or f"llama.cpp cannot build the grammar in '{param}'.", param=param)
    llama_cpp.llama_sampler_free(sampler)
    return gbnf


def spelling(model: Model, text: str) -> list[int]:
    """Tokens that spell exactly `text` in the middle of an output. A tokenizer that puts a space
    before a text's first word (SentencePiece) is given a newline to start with, and its tokens dropped."""
    tokens = model.tokenize(text, add_bos=False, special=False)
    if b"".join(model.piece(t) for t in tokens) == text.encode("utf-8"):
        return tokens
    marked = model.tokenize("\n" + text, add_bos=False, special=False)
    for start in (1, 2):
        if b"".join(model.piece(t) for t in marked[start:]) == text.encode("utf-8"):
            return marked[start:]
    return tokens


def following(model: Model, token: int, text: str) -> list[int]:
    """The tokens that spell `text` after `token`, as the vocabulary writes the two together
    (speculation.py's `Spell`): none where `token`'s own tokens would not come out unchanged (the
    text's start merges with it) or the rest would not spell `text` exactly."""
    try:
        last = model.piece(token).decode("utf-8")
    except UnicodeDecodeError:  # the end of a character cut across tokens: no text to join
        return []
    own = model.tokenize(last, add_bos=False, special=False) if last else []
    tokens = model.tokenize(last + text, add_bos=False, special=False)
    rest = tokens[len(own) :]
    if tokens[: len(own)] != own or b"".join(model.piece(t) for t in rest) != text.encode("utf-8"):
        return []
    return rest


def logprob(model: Model, logits: Any, token: int, piece: bytes, top_n: int) -> TokenLogprob:
    values = np.ctypeslib.as_array(logits, shape=(model.n_vocab,))
    peak = float(values.max())
    log_total = peak + math.log(float(np.exp(values - peak).sum()))
    top: tuple[TopLogprob, ...] = ()
    top_n = min(top_n, model.n_vocab)
    if top_n:
        best = np.argpartition(-values, top_n - 1)[:top_n]
        best = best[np.argsort(-values[best])]
        top = tuple(_top_entry(model, int(t), float(values[t]) - log_total) for t in best)
    return TokenLogprob(
        token=piece.decode("utf-8", "replace"), logprob=float(values[token]) - log_total, bytes=piece, top=top
    )


def _top_entry(model: Model, token: int, value: float) -> TopLogprob:
    piece = model.piece(token)
    return TopLogprob(token=piece.decode("utf-8", "replace"), logprob=value, bytes=piece)


def _seed(params: SamplingParams, index: int) -> int:
    """Choice `index`'s seed: the request's plus the index, so choices differ but repeat; an int64
    folded to llama.cpp's 32 bits, its high half (times Knuth's constant) XORed into the low one."""
    seed = (params.seed + index) % 2**64 if params.seed is not None else random.getrandbits(32)
    return (seed ^ (seed >> 32) * 0x9E3779B1) & 0xFFFFFFFF


def _chain(params: SamplingParams, seed: int, n_vocab: int) -> Any:
    """llama.cpp's chain for `params`, held to the bounds where its float arithmetic stays finite."""
    params = bounded(params)
    chain = internals.LlamaSampler()
    if params.logit_bias:
        chain.add_logit_bias(n_vocab, dict(params.logit_bias))
    if penalized(params):
        chain.add_penalties(
            n_vocab, PENALTY_WINDOW, params.repeat_penalty, params.frequency_penalty, params.presence_penalty
        )
    if params.temperature <= 0:
        chain.add_greedy()
        return chain
    if top_k(params, n_vocab):
        chain.add_top_k(params.top_k)
    if params.top_p < 1.0:
        chain.add_top_p(params.top_p, 1)
    if params.min_p > 0:
        chain.add_min_p(params.min_p, 1)
    chain.add_temp(params.temperature)
    chain.add_dist(seed)
    return chain


class Sampling:
    """One choice's sampling: the sampler chain, and a grammar beside it when the output is held to one.

    The grammar is checked against the token the chain picks, and only when it refuses that token
    is it applied to the whole vocabulary and the pick made again (llama.cpp's own server does the
    same): most tokens cost one check instead of a pass over every token. Where the client's bias
    and the penalties leave none of the tokens the grammar allows, the model's own favourite among
    them is taken; where the grammar allows none at all, the output ends. With `lazy` calls the
    text is watched, and the grammar joins once a call begins, primed with the call so far; where
    the budget left has room for the call's shortest ending, the call is `held_call`: it will end
    inside its grammar, so its arguments can stream and no stop sequence may cut it.

    A held grammar first takes `begun`, the prefill the output continues (and the field it came
    in, named where the grammar cannot begin with it). A grammar comes with a `Closer`, which ends
    the output inside the grammar before its token budget runs out; with `distinct` set, a complete JSON value at that nesting level (a call)
    that repeats an earlier one ends the output too, and so does a repeated call after a lazy one
    began, where parallel calls are allowed.
    """

    def __init__(
        self,
        model: Model,
        logits: Logits,
        params: SamplingParams,
        index: int,
        *,
        grammar: str | None = None,
        shape: Grammar | None = None,
        distinct: int | None = None,
        lazy: tuple[LazyCalls, str | None] | None = None,
        control_pieces: Mapping[int, bytes] = {},
        call_markers: Mapping[int, bytes] = {},
        begun: tuple[str, str] = ("", ""),
    ) -> None:
        self._model = model
        self._logits = logits
        params = bounded(params)
        seed = _seed(params, index)
        self._chain = _chain(params, seed, model.n_vocab)
        self._fast = fast_pick(params, model.n_vocab, seed)
        self._plain = isinstance(self._fast, GreedyPick) and self._fast.plain
        self._remembers = penalized(params)
        self._control_pieces = control_pieces  # reasoning markers that are control tokens
        self._call_markers = call_markers  # tool-call markers that are control tokens
        self._grammar: Any = None
        self._candidates: Any = None
        self._closer: Closer | None = None
        if grammar is not None:
            held, spelled = continuing_grammar(model, grammar, *begun)
            self._hold(held, shape, spelled)
        self._values = JsonValues(distinct) if distinct is not None else None
        self._seen: set[str] = set()
        self._watching = lazy is not None  # for calls in free text
        self._lazy = lazy if lazy is not None and lazy[1] is not None else None
        self._trigger = CallDetector(self._lazy[0].checks) if self._lazy is not None else None
        self._held_call = False

    def _hold(self, grammar: Any, shape: Grammar | None, primed: str = "") -> None:
        self._grammar = grammar
        weakref.finalize(self, llama_cpp.llama_sampler_free, grammar)
        if shape is not None:
            model = self._model
            self._closer = Closer(shape, lambda text: spelling(model, text), model.piece, model.is_end, model.eos)
            self._closer.took(primed)

    def least(self) -> int:
        """The fewest tokens this choice's output can take under its grammar (0 without one)."""
        return self._closer.least() if self._closer is not None else 0

    def forced(self) -> str:
        """The text its grammar allows alone next (`Closer.forced`); '' with no grammar held."""
        return self._closer.forced() if self._closer is not None else ""

    @property
    def cut(self) -> bool:
        """Whether the output was closed early because its budget was running out."""
        return self._closer is not None and self._closer.cut

    def piece(self, token: int) -> bytes:
        """The token's bytes; a reasoning marker's, and while calls are watched for a call marker's,
        though it is a control token."""
        piece = self._model.piece(token)
        if not piece and token in self._control_pieces:
            return self._control_pieces[token]
        if not piece and self._watching:
            return self._call_markers.get(token, piece)
        return piece

    @property
    def greedy(self) -> bool:
        """Whether the next pick is the plain top logit: greedy, with no bias, penalties or grammar."""
        return self._plain and self._grammar is None

    def take_top(self, token: int) -> int:
        """The top of the row, picked with others' in one pass (only while `greedy`): taken as
        `sample` takes its pick."""
        self._took(token)
        return token

    def sample(self, row: int, context: Any, remaining: int) -> int:
        """The next token from batch row `row` of the last decode on `context`, `remaining` tokens
        being left to the output (this one included)."""
        if self._fast is None and self._grammar is None:
            return int(self._chain.sample(context, row))  # llama.cpp picks, and its chain takes the token
        if self._fast is not None:
            token = self._fast.pick(self._logits(row))
        elif self._remembers:
            token = self._pick(row, None)
        else:  # llama.cpp's own pass is faster than ours, and accepting into this chain changes nothing
            token = int(self._chain.sample(context, row))
        grammar = self._grammar
        if grammar is not None:
            if not allows(grammar, token):
                allowed = self._allowed(row, grammar)
                if allowed is None:
                    return self._stranded()
                token = allowed
            if self._closer is not None:
                token = self._closer.choose(token, remaining, lambda t: allows(grammar, t))
            llama_cpp.llama_sampler_accept(grammar, token)
        self._took(token)
        return token

    def _took(self, token: int) -> None:
        """The penalties' history, in the numpy pick and in the chain (which picks under a grammar)."""
        if self._fast is not None:
            self._fast.took(token)
        if self._remembers:
            llama_cpp.llama_sampler_accept(self._chain.sampler, token)

    def force(self, token: int) -> int:
        """A token the engine decides instead (a thinking budget's closing marker): the chain
        and the grammar take it as if sampled, so penalties and structure stay in step."""
        self._took(token)
        if self._grammar is not None:
            llama_cpp.llama_sampler_accept(self._grammar, token)
        if self._closer is not None:
            self._closer.took(self._model.piece(token))
        return token

    def _pick(self, row: int, grammar: Any) -> int:
        """What the chain picks from row `row`'s logits, after `grammar` (if any) has ruled; nothing accepted."""
        candidates, view = self._filled(np.ctypeslib.as_array(self._logits(row), shape=(self._model.n_vocab,)))
        if grammar is not None:
            llama_cpp.llama_sampler_apply(grammar, ctypes.byref(view))
        llama_cpp.llama_sampler_apply(self._chain.sampler, ctypes.byref(view))
        return int(candidates["id"][view.selected])

    def _allowed(self, row: int, grammar: Any) -> int | None:
        """The chain's pick among the tokens `grammar` allows. Where the client's bias and the
        penalties rule out every one of those, the one the model itself rates highest; None where
        the grammar allows no token at all. Plain greedy looks among the row's top first."""
        logits = np.ctypeslib.as_array(self._logits(row), shape=(self._model.n_vocab,))
        if self._plain and (best := best_allowed(logits, grammar)) is not None:
            return best
        token = self._pick(row, grammar)
        if allows(grammar, token):
            return token
        candidates, view = self._filled(0.0)
        llama_cpp.llama_sampler_apply(grammar, ctypes.byref(view))
        allowed = np.flatnonzero(candidates["logit"] == 0)  # the grammar sets the rest to -inf
        return int(allowed[logits[allowed].argmax()]) if len(allowed) else None

    def _filled(self, logits: np.ndarray | float) -> tuple[np.ndarray, Any]:
        """The candidates array with every token in order at `logits`, and llama.cpp's view of it."""
        n_vocab = self._model.n_vocab
        if self._candidates is None:
            self._candidates = np.zeros(n_vocab, dtype=TOKEN_DATA)
        candidates = self._candidates
        candidates["id"] = np.arange(n_vocab, dtype=np.int32)
        candidates["logit"] = logits
        candidates["p"] = 0.0
        return candidates, token_view(candidates)

    def _stranded(self) -> int:
        """The grammar allows no token here (its next character is in no token): the output ends,
        outside its grammar. The end token is not offered to the grammar, which would abort on it."""
        log.warning("the output's grammar allows no token; the output ends unfinished")
        token = self._model.eos
        self._took(token)
        return token

    @property
    def closing(self) -> bool:
        """Whether the output is being ended where its grammar allows (a repeated call, or the budget)."""
        return self._closer is not None and self._closer.closing

    def held_call(self) -> bool:
        """Whether a call begun in free text is held to its grammar, with room to end inside it."""
        return self._held_call

    def saw(self, text: str, left: int) -> None:
        """The output's next text (its answer's: no reasoning), `left` tokens being left after it."""
        self._watch_repeats(text)
        trigger = self._trigger
        if trigger is None or self._lazy is None:
            return
        trigger.feed(text)
        if not trigger.in_call:
            return
        self._trigger = None
        calls, call_gbnf = self._lazy
        assert call_gbnf is not None
        gbnf = trigger_grammar(call_gbnf, trigger.marker or "", trigger.call_text, calls.parallel)
        primed = primed_grammar(self._model, gbnf, trigger.call_text)
        if primed is not None:
            grammar, spelled = primed
            shape = calls.shapes[gbnf] if gbnf in calls.shapes else readable(gbnf)  # read before, off this thread
            self._hold(grammar, shape, spelled)
            self._held_call = self._closer is not None and self._closer.least() <= left
            if calls.parallel:  # calls after this one: a repeat ends the output, as for forced calls
                self._values = JsonValues(call_level(trigger.marker or "", trigger.call_text))
                self._watch_repeats(trigger.call_text)

    def _watch_repeats(self, text: str) -> None:
        if self._values is None or self._closer is None:
            return
        for value in self._values.feed(text):
            canonical = _canonical(value)
            if canonical in self._seen:
                self._closer.close()
            self._seen.add(canonical)


def _canonical(value: str) -> str:
    try:
        return canonical_json(value)
    except ValueError:
        return value
