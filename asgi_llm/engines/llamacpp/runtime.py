"""One loaded GGUF model on the inference thread: its weights, batched context, scheduler,
prompts and embedder, and the jobs a request becomes. Everything here runs on that thread.

It is what the thread steps (a `Stepper`). A scheduler whose invariants failed after a fault
is not trusted again: the model restarts in place (unloaded and loaded anew), its requests in
flight ending with a 503, so the next request finds a consistent model.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from ...config import ModelConfig
from ...core.errors import InvalidRequest, ModelNotReady, Unsupported
from ...core.events import EmbeddingResult, TokenLogprob
from ...core.requests import ChatRequest, EmbeddingRequest, GenerationRequest, ImageInput
from ..decoding.constraints import Constraint, LazyCalls
from ..decoding.tool_detect import MARKERS
from ..memory_estimate import MemoryEstimate, prompt_cache_bytes
from .batching import Scheduler
from .buffers import measured_memory
from .choice import Output, Tally, TokenChoice
from .draft_model import DraftModel, with_draft
from .embedding import Embedder
from .jobs import BatchToken, Job, Ticket
from .lora import AdapterDefaults, AdapterGate, LoadedAdapters, Setting
from .native import Decoder, Model, backend_info, llama_log_lines, new_context, new_single_context
from .projector import MediaPrompt, Projector
from .prompt_cache import PromptCache
from .prompt_files import PromptFiles, fingerprint
from .prompts import THINK, Prompts
from .reranking import Reranker
from .sampling import Sampling, accepted_grammar, following, logprob
from .speculation import Drafting, SpeculationRules
from .threads import GovernedThreads

__all__ = ["Runtime"]

log = logging.getLogger("asgi_llm.engine")

_MakeChoice = Callable[[list[int], int, str | None, bool], TokenChoice]


class Runtime:
    """Loads at construction; `close` lets everything go."""

    def __init__(
        self, config: ModelConfig, progress: Callable[[float], None], tally: Tally, lora: AdapterDefaults | None = None
    ) -> None:
        self.config = config
        self.lora = lora or AdapterDefaults(config)  # kept across restarts in place
        self._progress = progress
        self.tally = tally
        self.restarts = 0
        self.faults = 0  # of schedulers before the last restart
        self.failed: str | None = None  # why it could not load again after a restart
        self.drafting: Drafting | None = None  # kept across restarts in place, with its tally
        self._load()

    def _load(self) -> None:
        cfg = self.config
        with llama_log_lines() as lines:
            self.model = model = Model(cfg, self._progress)
            self.adapters = LoadedAdapters(model.native.model, cfg) if cfg.lora else None
            context = new_context(model, cfg, sequences=cfg.parallel)
        measured = measured_memory(lines)
        self.memory = replace(measured, prompt_cache=prompt_cache_bytes(cfg)) if measured is not None else None
        governed = None
        if cfg.adapt_threads and cfg.threads > 1:
            governed = GovernedThreads(context.ctx, cfg.threads, cfg.n_threads_batch or cfg.threads)
        self.decoder = Decoder(context, governed)
        self.projector: Projector | None = None
        self.drafter: DraftModel | None = None
        try:
            if cfg.mmproj:
                self.projector, self.memory = _projector(cfg, model, self.decoder, self.memory)
            self.drafter = DraftModel(cfg, model) if cfg.draft_model else None
        except BaseException:  # the model and its context go with the failed load
            _close(self.projector, self.drafter, self.decoder, model)
            raise
        self.memory = with_draft(self.memory, self.drafter)
        self.cache = PromptCache(prompt_cache_bytes(cfg)) if cfg.prompt_cache_mib else None
        self.files = _prompt_files(cfg, self.decoder.per_sequence) if cfg.prompt_cache_dir else None
        if self.drafting is None:  # what a grammar forces is drafted always; the rest as set
            more, memory = cfg.speculative != "off", cfg.speculative_memory
            rules = SpeculationRules(
                cfg.speculative_draft, cfg.speculative_ngram, 2, cfg.speculative_step_tokens, more, memory
            )
            self.drafting = Drafting(rules, self.decoder.per_sequence, lambda t, text: following(self.model, t, text))
        self.drafting.use(self.drafter)
        self.scheduler = Scheduler(
            self.decoder,
            slots=cfg.parallel,
            batch=self.decoder.capacity,
            chunk=cfg.prefill_chunk,
            cache=self.cache,
            files=self.files,
            drafting=self.drafting,
        )
        if (adapters := self.adapters) is not None:
            self.scheduler.gate = AdapterGate(
                self.decoder, self.cache, lambda setting: adapters.apply(context.ctx, setting)
            )
        self.prompts = Prompts(model, cfg, self.decoder.per_sequence)
        self.reranker = Reranker(model, cfg, self.prompts, self.scheduler, self.decoder, lambda: self.lora.scales)
        if self.prompts.used.fallback and not self.restarts:
            log.warning(
                "model %s: its GGUF has no chat template, so chats are formatted with the %s fallback and end at %r; "
                "set `chat_template` in its config for the model's own format",
                cfg.id,
                self.prompts.used.name,
                self.prompts.used.end,
            )
        self._markers = self._control_markers(tuple(MARKERS))
        self._think_tokens = self._control_markers(THINK) if self.prompts.facts.thinks else {}
        self.embedder: Embedder | None = None
        self.decoder.warm_up(model.bos)  # the first request pays no allocation

    def close(self, error: BaseException | None = None) -> None:
        self.scheduler.abandon(error or ModelNotReady("The model was unloaded."))
        if self.files is not None:
            self.files.close()  # the saves already queued are written: the next load reads them
        if self.embedder is not None:
            self.embedder.close()
        self.reranker.close()
        _close(self.projector, self.drafter, self.decoder, self.model)

    def restart(self, why: str) -> None:
        """Unload and load again; requests in flight get a 503 naming `why`."""
        log.error("model %s restarts: %s", self.config.id, why)
        faults = self.faults + self.scheduler.faults
        self.close(ModelNotReady(f"The model '{self.config.id}' restarted ({why}); retry shortly."))
        self.faults, self.restarts = faults, self.restarts + 1
        try:
            self._load()
        except Exception as exc:
            log.exception("model %s failed to load again", self.config.id)
            self.failed = f"it failed to load again after a restart: {type(exc).__name__}"
            raise

    @property
    def context_length(self) -> int:
        return self.decoder.per_sequence

    # -- the Stepper the inference thread drives ---------------------------------------

    @property
    def active(self) -> bool:
        return self.failed is None and self.scheduler.active

    def step(self) -> bool:
        progressed = self.scheduler.step()
        if self.scheduler.broken:
            self.restart("its scheduler's bookkeeping failed after a fault")
            return True
        return progressed

    def abandon(self, error: BaseException) -> None:
        self.scheduler.abandon(error)

    # -- requests --------------------------------------------------------------------

    def check(self, request: GenerationRequest) -> Setting:
        """The refusals that need no prompt read, and the request's adapter setting. Safe off the
        inference thread too (it reads only what the load fixed): the engine asks before a
        schema is compiled, so these come first, as they always did."""
        self.usable()
        setting = self.lora.setting(request.adapters)
        self.prompts.check_bias(request.sampling)
        self._images(request)
        return setting

    def submit(self, request: GenerationRequest, ticket: Ticket, constraint: Constraint) -> bool:
        """Check the request and queue one job per choice under `constraint` (`constraint_for`'s,
        compiled off this thread); request errors raise here, before any event. True when it
        waits for a free sequence."""
        setting = self.check(request)
        prompts, media = self._prompts(request)  # first: a prompt that cannot fit costs no sampler
        for tokens, _ in prompts:
            self.prompts.check_fits(tokens, request)
        jobs = []
        make = self._choices(request, constraint)
        for p, (tokens, echo) in enumerate(prompts):
            group = object()
            for j in range(request.n):
                choice = make(tokens, p * request.n + j, echo, j == 0)
                lookup = self.drafting.index(tokens, request.sampling.speculative) if self.drafting else None
                jobs.append(Job(ticket, tokens, choice, group=group, setting=setting, media=media, lookup=lookup))
        ticket.open = len(jobs)
        return self.scheduler.submit(jobs)

    def _choices(self, request: GenerationRequest, constraint: Constraint) -> _MakeChoice:
        """Makes each choice of `request` (its prompt, index, echo, and whether it reports the
        prompt), sharing what its choices have in common."""
        model, params = self.model, constraint.sampling
        compiled = constraint.grammar
        grammar = accepted_grammar(model, compiled.gbnf, constraint.param, compiled.refusal) if compiled else None
        shape = compiled.shape if compiled is not None else None
        lazy = self._lazy(constraint.lazy) if constraint.lazy is not None else None
        chat = request if isinstance(request, ChatRequest) else None
        shown = chat is None or self.prompts.thinking(chat) is not False
        budget = chat.reasoning.budget if chat is not None and chat.reasoning is not None else None
        setting = self.lora.setting(request.adapters)
        end = self.prompts.used.end
        ends = (end,) if end is not None and chat is not None and not constraint.held else ()  # a grammar ends it
        begun = (chat.prefill or "", chat.prompt_param) if chat is not None and grammar is not None else ("", "")

        def choice(tokens: list[int], index: int, echo: str | None, first: bool) -> TokenChoice:
            read = self._prompt_logprobs(tokens, params.top_logprobs, setting) if echo and params.logprobs else ()
            sampling = Sampling(
                model,
                self.decoder.logits,
                params,
                index,
                grammar=grammar,
                shape=shape,
                distinct=constraint.distinct,
                lazy=lazy,
                control_pieces=self._think_tokens,
                call_markers=self._markers,
                begun=begun,
            )
            self.prompts.check_room(sampling, request.sampling)
            output = Output(
                index,
                params,
                self.prompts.limit(tokens, params),
                count_prompt=first,
                echo=echo,
                echo_logprobs=read,
                splitter=self.prompts.splitter(tokens) if not constraint.held else None,  # a grammar holds it all
                shown=shown,
                budget=budget,
                closing=lambda: model.tokenize(f"{THINK[1]}\n\n", add_bos=False),
                ends=ends,
            )
            wrap = constraint.wrap_for(sampling.held_call)
            return TokenChoice(model, self.decoder, tokens, sampling, output, wrap=wrap, tally=self.tally)

        return choice

    def _images(self, request: GenerationRequest) -> tuple[ImageInput, ...]:
        """A chat's images, in order; refused, naming the first, by a model without a projector."""
        if not isinstance(request, ChatRequest):
            return ()
        images = tuple(image for message in request.messages for image in message.images)
        if images and self.projector is None:
            raise InvalidRequest(
                f"The model '{self.config.id}' does not take images.", param=images[0].part or "messages"
            )
        return images

    def usable(self) -> None:
        if self.failed is not None:
            raise ModelNotReady(f"The model '{self.config.id}' cannot serve: {self.failed}.")

    def count(self, request: GenerationRequest) -> int:
        self.usable()
        prompts, media = self._prompts(request)
        if media is not None:
            media.close()
        return sum(len(tokens) for tokens, _ in prompts)

    def _prompts(self, request: GenerationRequest) -> tuple[list[tuple[list[int], str | None]], MediaPrompt | None]:
        """`Prompts.of`'s, or a chat's with images: its text tokenized with them by the projector
        (each image a run of stand-in ids), and what reads them into a sequence."""
        images = self._images(request)
        if not images or self.projector is None or not isinstance(request, ChatRequest):
            return self.prompts.of(request), None
        text = self.prompts.chat_text(request)
        media = self.projector.prompt(
            text, images, add_special=not text.startswith(self.prompts.template.bos_token or "\0")
        )
        if media.tail >= len(media.tokens):
            media.close()
            raise InvalidRequest("An image may not end the prompt: some text must follow it.", param=images[-1].part)
        return [(media.tokens, None)], media

    def embed(self, request: EmbeddingRequest) -> EmbeddingResult:
        self.usable()
        if self.embedder is None:
            with llama_log_lines() as lines:
                self.embedder = Embedder(self.model, self.config, self.context_length)
            self.memory = _plus(self.memory, measured_memory(lines))
        return self.embedder.embed(request, self.prompts.checked_ids)

    def _prompt_logprobs(self, tokens: list[int], top_n: int, setting: Setting) -> tuple[TokenLogprob, ...]:
        """Each prompt token's logprob given the tokens before it (the first has none; a BOS the
        tokenizer added is not shown), read in a context of its own, a chunk at a time: what an
        echoed completion reports, as scoring tools need."""
        model = self.model
        added_bos = model.adds_bos and tokens[0] == model.bos
        first = model.piece(tokens[0])
        read = [] if added_bos else [TokenLogprob(first.decode("utf-8", "replace"), None, first)]
        decoder = Decoder(new_single_context(model, self.config, size=len(tokens), batch=min(len(tokens), 256)))
        if self.adapters is not None:  # the request's adapters, as its output is decoded with
            self.adapters.apply(decoder.context.ctx, setting)
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
        if calls.grammar is None:
            return calls, None
        try:
            return calls, accepted_grammar(self.model, calls.grammar.gbnf, "tools", calls.grammar.refusal)
        except Unsupported:
            return calls, None

    def _control_markers(self, markers: tuple[str, ...]) -> dict[int, bytes]:
        """Those of `markers` this vocabulary has as single control tokens (Llama 3's
        `<|python_tag|>`, Mistral's `[TOOL_CALLS]`, a reasoning model's `<think>`): their pieces
        are empty in plain text, so outputs watch for their ids."""
        found = {}
        for marker in markers:
            ids = self.model.tokenize(marker, add_bos=False)
            if len(ids) == 1 and not self.model.piece(ids[0]):
                found[ids[0]] = marker.encode("utf-8")
        return found

    def describe(self) -> dict[str, Any]:
        described: dict[str, Any] = {"n_ctx": self.context_length, "n_params": self.model.n_params()}
        if self.cache is not None:
            described["prompt_cache"] = {
                "prompts": len(self.cache),
                "bytes": self.cache.size,
                "budget": self.cache.budget,
            }
        if self.files is not None:
            described["prompt_files"] = self.files.stats()
        if self.projector is not None:
            described["projector"] = {"images": self.projector.images, "encodes": self.projector.encodes}
        if self.drafting is not None:
            described["speculative"] = self.drafting.describe()
        return described


def _close(*parts: Projector | DraftModel | Decoder | Model | None) -> None:
    for part in parts:
        if part is not None:
            part.close()


def _prompt_files(cfg: ModelConfig, per_sequence: int) -> PromptFiles:
    """The model's saved prompts on disk, in the directory its fingerprint names: the model file,
    and every setting that changes what a sequence's saved state holds or how it is laid out."""
    assert cfg.prompt_cache_dir is not None
    digest = fingerprint(
        cfg.resolved_path(),
        {
            "llama.cpp": backend_info()["llama_cpp_python"],
            "n_ctx": per_sequence,
            "kv_unified": cfg.kv_unified,
            "type_k": cfg.type_k,
            "type_v": cfg.type_v,
            "flash_attn": cfg.flash_attn,
            "offload_kqv": cfg.offload_kqv,
            "lora": [(adapter.id, adapter.path) for adapter in cfg.lora],
            "mmproj": _file_identity(cfg.mmproj),
        },
    )
    budget = cfg.prompt_cache_disk_mib * 1024 * 1024
    return PromptFiles(cfg.prompt_cache_dir, budget, digest, pending=max(prompt_cache_bytes(cfg), 64 << 20))


def _projector(
    cfg: ModelConfig, model: Model, decoder: Decoder, memory: MemoryEstimate | None
) -> tuple[Projector, MemoryEstimate | None]:
    """The model's projector, loaded; and its memory added: what its load logged (compute
    buffers) and its file's size as weights, on the main GPU where the model offloads."""
    assert cfg.mmproj is not None
    with llama_log_lines() as lines:
        projector = Projector(model, cfg, decoder)
    size = os.path.getsize(cfg.mmproj)
    gpu = (0,) * cfg.main_gpu + (size,) if cfg.n_gpu_layers != 0 and backend_info()["gpu_offload"] else ()
    return projector, _plus(memory, _plus(MemoryEstimate(weights=size, gpu=gpu), measured_memory(lines)))


def _file_identity(path: str | None) -> str | None:
    """A projector file as saved prompts depend on it: its path, size and time (a prompt's
    images were read through it)."""
    if path is None:
        return None
    stat = os.stat(path)
    return f"{path}:{stat.st_size}:{stat.st_mtime_ns}"


def _plus(a: MemoryEstimate | None, b: MemoryEstimate | None) -> MemoryEstimate | None:
    return a + b if a is not None and b is not None else a or b
