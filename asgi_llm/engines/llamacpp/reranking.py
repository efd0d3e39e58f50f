"""`/rerank` on one loaded model, on the inference thread, in one of two ways (`RerankKind`):

- `rank`: a reranker GGUF (`rerank = true`: bge-reranker, Qwen3-Reranker...) reads each
  query-document pair in a context of its own opened for llama.cpp's rank pooling, and its
  classifier gives the score, as llama-server's `--rerank` does (the GGUF's `rerank` template if it
  has one, else `[BOS] query [EOS] [SEP] document [EOS]` as its vocabulary asks). A classifier's
  logit goes through a sigmoid, as vLLM and Cohere give scores; Qwen3's head gives a probability.
- `judge`: any chat model judges each document in a fixed prompt (Qwen3-Reranker's), and the
  score is P(yes) / (P(yes) + P(no)) over its next token. The documents are one batch of jobs
  through the scheduler (a `Verdict` each), so they decode together and share the prompt's prefix.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import llama_cpp
import numpy as np

from ...config import ModelConfig
from ...core.errors import ContextOverflow, Unsupported
from ...core.events import EngineEvent
from ...core.ranking import RerankKind, RerankRequest, RerankResult
from ...core.requests import ChatRequest, Message, Reasoning
from .batching import Scheduler
from .jobs import BatchToken, Job, Ticket, Turn
from .native import Decoder, Model, new_single_context
from .prompts import Prompts

__all__ = ["INSTRUCT", "SYSTEM", "Reranker", "Verdict", "judge_messages"]

SYSTEM = (
    "Judge whether the Document meets the requirements based on the Query and the Instruct provided. "
    'Note that the answer can only be "yes" or "no".'
)
INSTRUCT = "Given a web search query, retrieve relevant passages that answer the query"
_YES = ("yes", "Yes", " yes", " Yes", "YES")
_NO = ("no", "No", " no", " No", "NO")
_RANK = 4  # LLAMA_POOLING_TYPE_RANK
_SOFTMAX_HEADS = ("qwen3", "qwen3vl")  # whose rank pooling ends in a softmax (llama-graph.cpp)


def judge_messages(query: str, document: str) -> tuple[Message, ...]:
    """Qwen3-Reranker's judging prompt, in the model's own chat template."""
    asked = f"<Instruct>: {INSTRUCT}\n<Query>: {query}\n<Document>: {document}"
    return (Message("system", SYSTEM), Message("user", asked))


class Verdict:
    """One document's judgement as a scheduler `Choice`: one step, reading the logits of the
    prompt's last token, and done (no token is sampled)."""

    def __init__(self, decoder: Decoder, n_vocab: int, yes: Sequence[int], no: Sequence[int], prompt: int) -> None:
        self._decoder = decoder
        self._n_vocab = n_vocab
        self._yes, self._no = list(yes), list(no)
        self.prompt_tokens = prompt
        self.score: float | None = None  # set on the inference thread before the request's END

    greedy = False  # it reads its logits; it picks no token

    def begin(self, cached: int) -> Sequence[EngineEvent]:
        return ()

    def forced(self) -> str:
        return ""  # nothing to draft: it picks no token

    def step(self, row: int, top: int | None = None) -> Turn:
        logits = np.ctypeslib.as_array(self._decoder.logits(row), shape=(self._n_vocab,))
        self.score = yes_share(logits[self._yes], logits[self._no])
        return Turn((), None)

    def close(self) -> None:
        pass


def yes_share(yes: Any, no: Any) -> float:
    """P(yes) / (P(yes) + P(no)) from the logits of the tokens that spell each, computed stably."""
    top = float(max(np.max(yes), np.max(no)))
    p_yes, p_no = float(np.exp(yes - top).sum()), float(np.exp(no - top).sum())
    return p_yes / (p_yes + p_no)


class Reranker:
    """What `/rerank` runs on one loaded model; opened with the model, closed with it."""

    def __init__(
        self,
        model: Model,
        config: ModelConfig,
        prompts: Prompts,
        scheduler: Scheduler,
        decoder: Decoder,
        defaults: Callable[[], tuple[float, ...]],
    ) -> None:
        self.kind: RerankKind = "rank" if config.rerank else "judge"
        self._model, self._config, self._prompts = model, config, prompts
        self._scheduler, self._decoder, self._defaults = scheduler, decoder, defaults
        self._ranker: Decoder | None = None
        self._answers: tuple[list[int], list[int]] | None = None

    def close(self) -> None:
        if self._ranker is not None:
            self._ranker.close()

    # -- judge -------------------------------------------------------------------------

    def judge(self, request: RerankRequest, ticket: Ticket) -> tuple[list[Verdict], bool]:
        """A `Verdict` job per document, queued; and whether they wait for a free sequence."""
        yes, no = self._answers or self._spellings()
        jobs, verdicts = [], []
        for i, document in enumerate(request.documents):
            chat = ChatRequest(
                request.model, judge_messages(request.query, document), reasoning=Reasoning(False, "model")
            )
            try:
                ((tokens, _),) = self._prompts.of(chat)
                self._prompts.check_fits(tokens, chat)
            except ContextOverflow as overflow:
                raise _overflowing(i, overflow) from None
            verdict = Verdict(self._decoder, self._model.n_vocab, yes, no, len(tokens))
            verdicts.append(verdict)
            jobs.append(Job(ticket, tokens, verdict, setting=self._defaults()))
        ticket.open = len(jobs)
        return verdicts, self._scheduler.submit(jobs)

    def _spellings(self) -> tuple[list[int], list[int]]:
        """The tokens that alone spell "yes" and "no" (any case, with or without a space)."""

        def single(words: tuple[str, ...]) -> list[int]:
            ids = (self._model.tokenize(word, add_bos=False, special=False) for word in words)
            return sorted({tokens[0] for tokens in ids if len(tokens) == 1})

        self._answers = single(_YES), single(_NO)
        if not all(self._answers):
            raise Unsupported(
                "This model's vocabulary has no single token for 'yes' or 'no' to judge with.", param="model"
            )
        return self._answers

    # -- rank pooling ------------------------------------------------------------------

    def rank(self, request: RerankRequest) -> RerankResult:
        """Each pair read alone in the rank-pooled context; its classifier's first output is the score."""
        if self._ranker is None:
            size = self._prompts.context_length
            self._ranker = Decoder(new_single_context(self._model, self._config, size=size, batch=size, pooling=_RANK))
        decoder, size = self._ranker, self._ranker.capacity
        softmax = self._model.metadata.get("general.architecture") in _SOFTMAX_HEADS
        scores, read = [], 0
        for i, tokens in enumerate(self._pair(request.query, d) for d in request.documents):
            if len(tokens) > size:
                raise _overflowing(
                    i, ContextOverflow(f"Document {i} and the query are {len(tokens)} tokens; this model reads {size}.")
                )
            decoder.clear()
            decoder.decode([BatchToken(token, position, 0, True) for position, token in enumerate(tokens)])
            score = float(llama_cpp.llama_get_embeddings_seq(decoder.context.ctx, 0)[0])
            scores.append(score if softmax else 1 / (1 + math.exp(-score)))
            read += len(tokens)
        decoder.clear()
        return RerankResult(tuple(scores), read)

    def _pair(self, query: str, document: str) -> list[int]:
        model = self._model
        template = llama_cpp.llama_model_chat_template(model.native.model, b"rerank")
        if template:
            text = template.decode("utf-8").replace("{query}", query).replace("{document}", document)
            return model.tokenize(text, add_bos=False, special=True)
        vocab = model.vocab
        eos = model.eos if model.eos >= 0 else int(llama_cpp.llama_vocab_sep(vocab))
        tokens = [model.bos] if model.adds_bos else []
        tokens += model.tokenize(query, add_bos=False, special=False)
        tokens += [eos] if llama_cpp.llama_vocab_get_add_eos(vocab) else []
        tokens += [int(llama_cpp.llama_vocab_sep(vocab))] if llama_cpp.llama_vocab_get_add_sep(vocab) else []
        tokens += model.tokenize(document, add_bos=False, special=False)
        tokens += [eos] if llama_cpp.llama_vocab_get_add_eos(vocab) else []
        return tokens


def _overflowing(index: int, overflow: ContextOverflow) -> ContextOverflow:
    return ContextOverflow(
        f"Document {index} does not fit this model's context: {overflow.message}", param=f"documents[{index}]"
    )
