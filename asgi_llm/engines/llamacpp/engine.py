"""`LlamaCppEngine`: one GGUF model, its choices decoded together by a continuous-batching scheduler."""

from __future__ import annotations

import asyncio
import codecs
import logging
from collections.abc import AsyncGenerator, Generator, Sequence
from dataclasses import replace
from typing import Any

from ...config import ModelConfig
from ...core.errors import ContextOverflow, InvalidRequest, ModelNotReady, Overloaded, Unsupported
from ...core.events import (
    EmbeddingResult,
    EngineEvent,
    Finish,
    FinishReason,
    GenerationEvent,
    PromptRead,
    ReasoningDelta,
    TextDelta,
    TokenLogprob,
    Usage,
)
from ...core.requests import ChatRequest, EmbeddingRequest, GenerationRequest, Message, SamplingParams
from ..batching import END, BatchToken, Job, Scheduler, Ticket
from ..chat_template import CHATML, ChatTemplate
from ..decoding.constraints import LazyCalls, constraint_for, offers_tools
from ..inference_thread import Channel, InferenceThread
from ..decoding.reasoning import Reasoned, ReasoningSplitter
from ..decoding.stops import StopMatcher
from ..decoding.tool_calls import with_tools_note
from ..decoding.tool_detect import MARKERS
from ..memory_estimate import MemoryEstimate, prompt_cache_bytes
from ..prompt_cache import PromptCache
from .embedding import Embedder
from .buffers import measured_memory
from .native import Decoder, Model, backend_info, llama_log_lines, new_context, new_single_context
from .prompt_bound import TooLong, at_least, bounded_tokens
from .waiting import waiting
from .sampling import Sampling, checked_grammar, logprob, readable
from .threads import GovernedThreads

__all__ = ["LlamaCppEngine"]

log = logging.getLogger("asgi_llm.engine")

_THINK = ("<think>", "</think>")  # the reasoning block's markers, for models whose template or vocabulary has them


class LlamaCppEngine:
    """One GGUF model. Up to `config.parallel` choices decode at once; the rest wait in FIFO order."""

    def __init__(self, config: ModelConfig, thread: InferenceThread) -> None:
        self.config = config
        self._thread = thread
        self.progress = 0.0
        """Fraction of the weights read while loading (llama.cpp's progress callback), for /health."""
        self._model: Model | None = None
        self._decoder: Decoder | None = None
        self._scheduler: Scheduler | None = None
        self._embedder: Embedder | None = None
        self._template: ChatTemplate | None = None
        self._template_has_tools = False  # whether the chat template renders the tools it is given
        self._template_thinks = False  # whether the chat template mentions the reasoning block's markers
        self._thinks = False  # whether outputs are split into reasoning and answer
        self._think_tokens: dict[int, bytes] = {}  # reasoning markers that are control tokens, by id
        self._marker_tokens: dict[int, bytes] = {}  # tool-call markers that are control tokens, by id
        self._pending = 0  # requests submitted and not finished (event loop side)
        self.memory: MemoryEstimate | None = None
        """What llama.cpp allocated for it (weights, KV cache, compute buffers, per GPU) once loaded,
        with the prompt cache's budget (host memory it may fill)."""
        self.decoded_tokens = 0  # tokens sampled since load; read by metrics and tests
        self._prompt_cache: PromptCache | None = None

    @property
    def supports_embeddings(self) -> bool:
        return self.config.embeddings

    @property
    def context_length(self) -> int:
        """Positions one choice may use (prompt and output)."""
        return self._decoder.per_sequence if self._decoder is not None else self.config.n_ctx

    @property
    def waiting(self) -> int:
        """Requests waiting for a free sequence (read by metrics and the queue bound)."""
        running = self._scheduler.running if self._scheduler is not None else 0
        return max(self._pending - running, 0)

    def describe(self) -> dict[str, Any]:
        if self._model is None:
            return {}
        return {
            **backend_info(),
            "n_ctx": self.context_length,
            "parallel": self.config.parallel,
            "n_gpu_layers": self.config.n_gpu_layers,
            "n_threads": self.config.threads,
            "threads_now": self._threads_now(),
            "n_params": self._model.n_params(),
            **({"prompt_cache": self._prompt_cache_use()} if self._prompt_cache is not None else {}),
            **({"memory": self.memory.as_dict()} if self.memory is not None else {}),
        }

    def _prompt_cache_use(self) -> dict[str, int]:
        cache = self._prompt_cache
        assert cache is not None
        return {"prompts": len(cache), "bytes": cache.size, "budget": cache.budget}

    def _threads_now(self) -> int:
        """What decoding runs on now: fewer than `n_threads` while other work crowds the cores."""
        governed = self._decoder.threads if self._decoder is not None else None
        return governed.threads if governed is not None else self.config.threads

    async def load(self) -> None:
        await self._thread.call(self._load)
        assert self._scheduler is not None
        await self._thread.attach(self._scheduler)

    async def close(self) -> None:
        if self._scheduler is not None:
            await self._thread.detach(self._scheduler)
        await self._thread.call(self._close)

    def generate(self, request: GenerationRequest) -> AsyncGenerator[EngineEvent, None]:
        return self._generate(request)

    async def embed(self, request: EmbeddingRequest) -> EmbeddingResult:
        if self._model is None:
            raise ModelNotReady("The model is not loaded yet.")
        if not request.truncate:
            for i, item in enumerate(request.inputs):
                if isinstance(item, str) and (surely := self._surely_too_long(len(item), self._embed_size)):
                    raise ContextOverflow(
                        f"Input {i} is at least {surely.tokens} tokens; this model embeds at most {self._embed_size}.",
                        param="input",
                    )
        return await self._thread.call(lambda: self._embed(request))

    async def count_tokens(self, request: GenerationRequest) -> int:
        if self._model is None:
            raise ModelNotReady("The model is not loaded yet.")
        self._refuse_surely_too_long(request)
        return await self._thread.call(lambda: sum(len(tokens) for tokens, _ in self._prompts(request)))

    async def _generate(self, request: GenerationRequest) -> AsyncGenerator[EngineEvent, None]:
        if self._model is None:
            raise ModelNotReady("The model is not loaded yet.")
        self._refuse_surely_too_long(request)
        if self._queue_full():
            raise Overloaded("Too many requests are waiting for this model; retry shortly.")
        channel: Channel[object] = self._thread.channel(asyncio.get_running_loop())
        ticket = Ticket(channel.send, choices=0)
        self._pending += 1
        try:
            if await self._thread.call(lambda: self._submit(request, ticket)):
                async for beat in waiting(channel, ticket, timeout=self.config.queue_timeout, model=self.config.id):
                    yield beat
            async for item in channel.until(END):
                yield item  # type: ignore[misc]
        finally:
            ticket.cancelled = True
            self._pending -= 1

    @property
    def _embed_size(self) -> int:
        return min(self.context_length, 2048)  # the Embedder's context

    def _surely_too_long(self, characters: int, limit: int) -> TooLong | None:
        return at_least(characters, limit=limit, longest=self._model.longest_piece if self._model else None)

    def _refuse_surely_too_long(self, request: GenerationRequest) -> None:
        """A prompt whose text alone surely cannot fit is refused here, on the event loop, so it
        never waits for the inference thread or holds it up (templates and the rest are checked
        there). A chat counts the text of the turns every template renders, not the assistant's
        own (templates may drop an old turn's reasoning)."""
        if isinstance(request, ChatRequest):
            texts = [sum(len(m.content) for m in request.messages if m.role != "assistant")]
        else:
            texts = [len(prompt) for prompt in request.prompts if isinstance(prompt, str)]
        for characters in texts:
            if (surely := self._surely_too_long(characters, self._room)) is not None:
                raise self._overflow(f"at least {surely.tokens}", request)

    @property
    def _room(self) -> int:
        """The most tokens a prompt may have with no room for output; the bound is this, not what
        the request's `max_tokens` leaves, so that a `max_tokens` too large is judged with the
        exact count, after the request's other checks, as before (`_check_fits`)."""
        return max(self.context_length - 1, 0)

    def _queue_full(self) -> bool:
        """Whether a request arriving now would wait behind `max_queue` others (a snapshot: the
        free sequences take the first of those waiting)."""
        free = self._scheduler.free_slots if self._scheduler is not None else 0
        return self.waiting + 1 > self.config.max_queue + free

    # -- on the inference thread -------------------------------------------------

    def _loading(self, fraction: float) -> None:
        self.progress = fraction

    def _load(self) -> None:
        cfg = self.config
        with llama_log_lines() as lines:
            self._model = model = Model(cfg, self._loading)
            context = new_context(model, cfg, sequences=cfg.parallel)
        measured = measured_memory(lines)
        self.memory = replace(measured, prompt_cache=prompt_cache_bytes(cfg)) if measured is not None else None
        governed = None
        if cfg.adapt_threads and cfg.threads > 1:
            governed = GovernedThreads(context.ctx, cfg.threads, cfg.n_threads_batch or cfg.threads)
        self._decoder = Decoder(context, governed)
        cache = PromptCache(prompt_cache_bytes(cfg)) if cfg.prompt_cache_mib else None
        self._prompt_cache = cache
        self._scheduler = Scheduler(
            self._decoder, slots=cfg.parallel, batch=self._decoder.capacity, chunk=cfg.prefill_chunk, cache=cache
        )
        self._template = self._chat_template()
        self._marker_tokens = self._control_markers()
        self._thinks, self._think_tokens = self._reasoning_markers()
        self._decoder.warm_up(model.bos)  # the first request pays no allocation
        log.info("loaded %s: %s", cfg.id, self.describe())
        if cfg.n_gpu_layers and not backend_info()["gpu_offload"]:
            log.warning(
                "n_gpu_layers=%s asked for, but this llama-cpp-python build has no GPU offload", cfg.n_gpu_layers
            )

    def _close(self) -> None:
        if self._scheduler is not None:
            self._scheduler.abandon(ModelNotReady("The model was unloaded."))
        if self._decoder is not None:
            self._decoder.close()
        for owner in (self._embedder, self._model):
            if owner is not None:
                owner.close()
        self._model = self._decoder = self._scheduler = self._embedder = None
        self._prompt_cache = None

    def _control_markers(self) -> dict[int, bytes]:
        """Tool-call markers this vocabulary has as single control tokens (Llama 3's `<|python_tag|>`,
        Mistral's `[TOOL_CALLS]`): their pieces are empty in plain text, so calls watch for their ids."""
        model = self._loaded()
        found = {}
        for marker in MARKERS:
            ids = model.tokenize(marker, add_bos=False)
            if len(ids) == 1 and not model.piece(ids[0]):
                found[ids[0]] = marker.encode("utf-8")
        return found

    def _reasoning_markers(self) -> tuple[bool, dict[int, bytes]]:
        """Whether this model writes `<think>` blocks (its chat template mentions the marker, or its
        vocabulary has it as one token), and those markers that are control tokens, by id."""
        model = self._loaded()
        single = {}
        for marker in _THINK:
            ids = model.tokenize(marker, add_bos=False)
            if len(ids) == 1:
                single[ids[0]] = marker.encode("utf-8")
        thinks = self._template_thinks or _THINK[0].encode("utf-8") in single.values()
        if not thinks:
            return False, {}
        return True, {token: marker for token, marker in single.items() if not model.piece(token)}

    def _splitter(self, prompt: list[int]) -> ReasoningSplitter | None:
        """A reasoning splitter for an output after `prompt`, which starts inside the block if the
        prompt opened it (as some templates do); None for models that do not reason in blocks."""
        if not self._thinks:
            return None
        tail = self._loaded().detokenize(prompt[-8:], special=True)
        return ReasoningSplitter(*_THINK, inside=tail.rstrip().endswith(_THINK[0]))

    def _chat_template(self) -> ChatTemplate:
        model = self._loaded()
        source = self.config.chat_template or model.metadata.get("tokenizer.chat_template") or CHATML
        self._template_has_tools = "tools" in source
        self._template_thinks = _THINK[0] in source
        self._template_switch = "enable_thinking" in source
        return ChatTemplate(source, bos_token=model.token_text(model.bos), eos_token=model.token_text(model.eos))

    def _thinking(self, request: ChatRequest) -> bool | None:
        """Whether this request's output reasons first: as it asks, else as the model's config
        says (None: as its template does). Asking a model that cannot reason to is refused."""
        if request.reasoning is None:
            return {"auto": None, "on": True, "off": False}[self.config.reasoning] if self._thinks else None
        if request.reasoning.enabled and not self._thinks:
            raise Unsupported(
                f"The model '{self.config.id}' does not reason, so its reasoning cannot be turned on.",
                param=request.reasoning.param,
            )
        return request.reasoning.enabled

    def _loaded(self) -> Model:
        if self._model is None:
            raise ModelNotReady("The model is not loaded.")
        return self._model

    def _prompts(self, request: GenerationRequest) -> list[tuple[list[int], str | None]]:
        """Each prompt's tokens, and the text to echo before its output (completions only)."""
        model = self._loaded()
        if isinstance(request, ChatRequest):
            assert self._template is not None
            messages, prefill = _prefill(request.messages)
            if offers_tools(request) and not self._template_has_tools:
                messages = with_tools_note(messages, request.tools)
            thinking = self._thinking(request)
            text = self._template.render(messages, tools=request.tools, enable_thinking=thinking)
            if thinking is False and self._thinks and not self._template_switch:
                text = _closed_block(text)
            text += prefill
            return [(self._tokens(text, request, add_bos=not text.startswith(self._template.bos_token or "\0")), None)]
        prompts = []
        for i, prompt in enumerate(request.prompts):
            if isinstance(prompt, str):
                prompts.append((self._tokens(prompt, request, add_bos=True), prompt if request.echo else None))
            else:
                tokens = self._checked_ids(prompt, f"prompt[{i}]")
                prompts.append((tokens, model.detokenize(tokens) if request.echo else None))
        return prompts

    def _tokens(self, text: str, request: GenerationRequest, *, add_bos: bool) -> list[int]:
        """A prompt's tokens; one that cannot fit the context with its output is refused after
        reading about a context's worth of it (see `prompt_bound`)."""
        model = self._loaded()
        tokens = bounded_tokens(
            text,
            lambda t, bos: model.tokenize(t, add_bos=bos),
            limit=self._room,
            longest=model.longest_piece,
            add_bos=add_bos,
        )
        if isinstance(tokens, TooLong):
            raise self._overflow(tokens.tokens if tokens.exact else f"at least {tokens.tokens}", request)
        return tokens

    def _overflow(self, needs: int | str, request: GenerationRequest) -> ContextOverflow:
        limit = request.sampling.max_tokens
        asked = f" and {limit} for the output" if limit is not None else ""
        return ContextOverflow(
            f"This model's maximum context length is {self.context_length} tokens; the prompt needs {needs}{asked}.",
            param="messages" if isinstance(request, ChatRequest) else "prompt",
        )

    def _checked_ids(self, ids: Sequence[int], param: str) -> list[int]:
        n_vocab = self._loaded().n_vocab
        for i, token in enumerate(ids):
            if not 0 <= token < n_vocab:
                raise InvalidRequest(
                    f"Token id {token} is outside this model's vocabulary (0..{n_vocab - 1}).", param=f"{param}[{i}]"
                )
        return list(ids)

    def _submit(self, request: GenerationRequest, ticket: Ticket) -> bool:
        """Check the request and queue one job per choice; request errors raise here, before any
        event. True when it waits for a free sequence."""
        model = self._loaded()
        assert self._scheduler is not None and self._decoder is not None
        constraint = constraint_for(request)
        prompts = self._prompts(request)  # first: a prompt that cannot fit costs no grammar
        for tokens, _ in prompts:
            self._check_fits(tokens, request)
        grammar = checked_grammar(model, constraint.schema, constraint.param) if constraint.schema is not None else None
        shape = readable(grammar) if grammar is not None else None
        lazy = self._lazy(constraint.lazy) if constraint.lazy is not None else None
        chat = request if isinstance(request, ChatRequest) else None
        shown = chat is None or self._thinking(chat) is not False
        budget = chat.reasoning.budget if chat is not None and chat.reasoning is not None else None
        scores_echo = constraint.sampling.logprobs
        jobs = []
        for p, (tokens, echo) in enumerate(prompts):
            read = self._prompt_logprobs(tokens, constraint.sampling.top_logprobs) if echo and scores_echo else ()
            group = object()
            for j in range(request.n):
                index = p * request.n + j
                job = Job(ticket, tokens, group=group)
                sampling = Sampling(
                    model,
                    self._decoder.logits,
                    constraint.sampling,
                    index,
                    grammar=grammar,
                    shape=shape,
                    distinct=constraint.distinct,
                    lazy=lazy,
                    control_pieces=self._think_tokens,
                    call_markers=self._marker_tokens,
                )
                events = self._choice(
                    job,
                    constraint.sampling,
                    index,
                    sampling,
                    echo=echo,
                    echo_logprobs=read,
                    count_prompt=j == 0,
                    reasoning=constraint.schema is None,  # a grammar holds the whole output, from its start
                    shown=shown,
                    budget=budget,
                )
                self._check_room(sampling, request.sampling)
                job.events = iter(constraint.wrap(events))
                jobs.append(job)
        ticket.open = len(jobs)
        return self._scheduler.submit(jobs)

    def _prompt_logprobs(self, tokens: list[int], top_n: int) -> tuple[TokenLogprob, ...]:
        """Each prompt token's logprob given the tokens before it (the first has none; a BOS the
        tokenizer added is not shown), read in a context of its own, a chunk at a time: what an
        echoed completion reports, as scoring tools need."""
        model = self._loaded()
        added_bos = model.adds_bos and tokens[0] == model.bos
        first = model.piece(tokens[0])
        read = [] if added_bos else [TokenLogprob(first.decode("utf-8", "replace"), None, first)]
        decoder = Decoder(new_single_context(model, self.config, size=len(tokens), batch=min(len(tokens), 256)))
        try:
            for start in range(0, len(tokens) - 1, decoder.capacity):
                part = tokens[start : start + decoder.capacity]
                decoder.decode([BatchToken(token, start + i, 0, True) for i, token in enumerate(part)])
                for row, following in enumerate(tokens[start + 1 : start + 1 + len(part)]):
                    read.append(logprob(model, decoder.logits(row), following, model.piece(following), top_n))
        finally:
            decoder.close()
        return tuple(read)

    def _lazy(self, calls: LazyCalls) -> tuple[LazyCalls, str | None]:
        """`auto` calls, with the grammar of one call if decoding can hold calls to it."""
        if calls.schema is None:
            return calls, None
        try:
            return calls, checked_grammar(self._loaded(), calls.schema, "tools")
        except Unsupported:
            return calls, None

    def _check_room(self, sampling: Sampling, params: SamplingParams) -> None:
        """An output held to a grammar needs room for its shortest complete form: a smaller
        `max_tokens` could only give a broken document, so it is refused."""
        least = sampling.least()
        if params.max_tokens is not None and params.max_tokens < least:
            raise InvalidRequest(
                f"'{params.max_tokens_param}' is {params.max_tokens}, but the shortest output the requested "
                f"format or tool call allows takes {least} tokens.",
                param=params.max_tokens_param,
            )

    def _check_fits(self, tokens: list[int], request: GenerationRequest) -> None:
        if not tokens:
            raise InvalidRequest("The prompt is empty.", param="prompt")
        n_ctx = self.context_length
        limit = request.sampling.max_tokens
        if len(tokens) >= n_ctx or (limit is not None and len(tokens) + limit > n_ctx):
            raise self._overflow(len(tokens), request)

    def _choice(
        self,
        job: Job,
        params: SamplingParams,
        index: int,
        sampling: Sampling,
        *,
        echo: str | None,
        echo_logprobs: tuple[TokenLogprob, ...] = (),
        count_prompt: bool,
        reasoning: bool,
        shown: bool = True,
        budget: int | None = None,
    ) -> Generator[GenerationEvent | None, None, None]:
        """One choice, advanced by the scheduler each time its logits are ready; `None` hands it
        the next token to decode. With `reasoning`, a model's `<think>` block goes out as
        `ReasoningDelta`s (unless not `shown`: reasoning turned off, a block the model writes
        anyway is dropped; a thinking `budget` closes the block once that many tokens are spent);
        stop sequences, logprobs and the watch for tool calls apply to the answer text only."""
        model = self._loaded()
        decoder = self._decoder
        assert decoder is not None
        prompt = job.prompt
        if count_prompt:  # read by now: the prompt's size goes out before its first token
            job.ticket.send(PromptRead(len(prompt), job.cached, index))
        if echo:
            yield TextDelta(echo, index=index, logprobs=echo_logprobs)
        utf8 = codecs.getincrementaldecoder("utf-8")("replace")
        splitter = self._splitter(prompt) if reasoning else None
        stops = StopMatcher(params.stop)
        room = self.context_length - len(prompt)
        limit = min(params.max_tokens, room) if params.max_tokens is not None else room
        pending: list[TokenLogprob] = []
        produced = 0
        reasoned = Reasoned()
        closing: list[int] = []  # the block's closing marker, forced once the thinking budget is spent
        reason: FinishReason = "length"
        while produced < limit:
            if closing:
                token = sampling.force(closing.pop(0))
            else:
                token = sampling.sample(job.logits, decoder.context, limit - produced)
            if model.is_end(token):
                reason = "length" if sampling.cut else "stop"  # closed early for its budget: still cut
                break
            produced += 1
            self.decoded_tokens += 1
            piece = sampling.piece(token)
            if params.logprobs:
                pending.append(logprob(model, decoder.logits(job.logits), token, piece, params.top_logprobs))
            text = utf8.decode(piece)
            if splitter is not None:
                thought, text = splitter.feed(text)
                reasoned.count(splitter)
                if budget is not None and splitter.reasoning and reasoned.tokens >= budget and not closing:
                    closing = model.tokenize(f"{_THINK[1]}\n\n", add_bos=False)
                if thought and shown:
                    yield ReasoningDelta(thought, index=index)
                if splitter.in_block:
                    pending = []  # the tokens of reasoning and its markers have no logprobs to report
            sampling.saw(text)
            text = stops.feed(text)
            if stops.matched is not None:
                reason = "stop"
                if text or pending:
                    yield TextDelta(text, index=index, logprobs=tuple(pending))
                break
            if text:
                yield TextDelta(text, index=index, logprobs=tuple(pending))
                pending = []
            if produced < limit:
                job.token = token
                yield None
        if stops.matched is None:
            rest = utf8.decode(b"", final=True)
            if splitter is not None:
                thought, rest = splitter.feed(rest)
                last = splitter.finish()
                thought, rest = thought + last.reasoning, rest + last.answer
                if thought and shown:
                    yield ReasoningDelta(thought, index=index)
            rest = stops.feed(rest)
            if stops.matched is None:
                rest += stops.flush()
            if rest or pending:
                yield TextDelta(rest, index=index, logprobs=tuple(pending))
        yield Finish(
            reason,
            Usage(
                prompt_tokens=len(prompt) if count_prompt else 0,
                completion_tokens=produced,
                cached_tokens=job.cached if count_prompt else 0,
                reasoning_tokens=reasoned.tokens,
            ),
            index=index,
            stop_sequence=stops.matched,
        )

    def _embed(self, request: EmbeddingRequest) -> EmbeddingResult:
        if self._embedder is None:
            with llama_log_lines() as lines:
                self._embedder = Embedder(self._loaded(), self.config, self.context_length)
            self.memory = _plus(self.memory, measured_memory(lines))
        return self._embedder.embed(request, self._checked_ids)


def _plus(a: MemoryEstimate | None, b: MemoryEstimate | None) -> MemoryEstimate | None:
    if a is None or b is None:
        return a or b
    devices = max(len(a.gpu), len(b.gpu))
    return MemoryEstimate(
        weights=a.weights + b.weights,
        kv_cache=a.kv_cache + b.kv_cache,
        compute=a.compute + b.compute,
        gpu=tuple(a.on_gpu(i) + b.on_gpu(i) for i in range(devices)),
        prompt_cache=a.prompt_cache + b.prompt_cache,
    )


def _closed_block(prompt: str) -> str:
    """The prompt with an empty reasoning block after it, so the answer comes at once: for a
    model that reasons and a template with no switch to say not to (Qwen3's own switch does
    the same). A block the template opened is closed instead."""
    opened = prompt.rstrip().endswith(_THINK[0])
    return prompt + ("\n\n" if opened else f"{_THINK[0]}\n\n") + f"{_THINK[1]}\n\n"


def _prefill(messages: tuple[Message, ...]) -> tuple[tuple[Message, ...], str]:
    """A conversation that ends in the assistant's own words (no tool calls) is continued, not
    answered by a new turn: the turns before it, and the start the reply must continue from (how
    Anthropic and llama.cpp's server take a prefill). The reply carries the continuation only."""
    if messages and messages[-1].role == "assistant" and not messages[-1].tool_calls:
        return messages[:-1], messages[-1].content
    return messages, ""
