"""A request made ready for decoding: the chat template rendered (with the tools note, the
thinking switch and a prefill), the prompt tokenized within the context's bounds, and the
checks a prompt must pass before it costs a sequence. On the inference thread, but for the
cheap character-count bound, which runs on the event loop."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ...config import ModelConfig
from ...core.errors import ContextOverflow, InvalidRequest, Unsupported
from ...core.requests import ChatRequest, GenerationRequest, Message, SamplingParams
from ...core.templates import template_in_use
from ..decoding.constraints import offers_tools
from ..decoding.reasoning import ReasoningSplitter
from ..decoding.tool_calls import with_calls_as_text, with_tools_note
from .chat_template import ChatTemplate
from .native import Model
from .prompt_bound import TooLong, at_least, bounded_tokens
from .sampling import Sampling

__all__ = ["THINK", "Prompts", "TemplateFacts"]

THINK = ("<think>", "</think>")  # the reasoning block's markers, for models whose template or vocabulary has them


@dataclass(frozen=True)
class TemplateFacts:
    """What the chat template and vocabulary say about tools and reasoning."""

    has_tools: bool = False  # the template renders the tools it is given
    thinks: bool = False  # outputs are split into reasoning and answer
    switch: bool = False  # the template has an `enable_thinking` switch


class Prompts:
    """Prompts for one loaded model, whose context gives each choice `context_length` positions."""

    def __init__(self, model: Model, config: ModelConfig, context_length: int) -> None:
        self._model = model
        self._config = config
        self.context_length = context_length
        self.used = template_in_use(config.chat_template, model.metadata)
        source = self.used.source
        self.template = ChatTemplate(
            source, bos_token=model.token_text(model.bos), eos_token=model.token_text(model.eos)
        )
        thinks = THINK[0] in source or self._one_token(THINK[0])
        self.facts = TemplateFacts(has_tools="tools" in source, thinks=thinks, switch="enable_thinking" in source)

    @property
    def room(self) -> int:
        """The most tokens a prompt may have with no room for output; the bound is this, not what
        the request's `max_tokens` leaves, so that a `max_tokens` too large is judged with the
        exact count, after the request's other checks (`check_fits`)."""
        return max(self.context_length - 1, 0)

    def _one_token(self, marker: str) -> bool:
        return len(self._model.tokenize(marker, add_bos=False)) == 1

    # -- on the event loop ---------------------------------------------------------

    def refuse_surely_too_long(self, request: GenerationRequest) -> None:
        """A prompt whose text alone surely cannot fit is refused on the event loop, so it never
        waits for the inference thread or holds it up. A chat counts the text of the turns every
        template renders, not the assistant's own (templates may drop an old turn's reasoning)."""
        if isinstance(request, ChatRequest):
            texts = [sum(len(m.content) for m in request.messages if m.role != "assistant")]
        else:
            texts = [len(prompt) for prompt in request.prompts if isinstance(prompt, str)]
        for characters in texts:
            if (surely := at_least(characters, limit=self.room, longest=self._model.longest_piece)) is not None:
                raise self.overflow(f"at least {surely.tokens}", request)

    # -- on the inference thread -----------------------------------------------------

    def thinking(self, request: ChatRequest) -> bool | None:
        """Whether this request's output reasons first: as it asks, else as the model's config
        says (None: as its template does). Asking a model that cannot reason to is refused."""
        if request.reasoning is None:
            return {"auto": None, "on": True, "off": False}[self._config.reasoning] if self.facts.thinks else None
        if request.reasoning.enabled and not self.facts.thinks:
            raise Unsupported(
                f"The model '{self._config.id}' does not reason, so its reasoning cannot be turned on.",
                param=request.reasoning.param,
            )
        return request.reasoning.enabled

    def splitter(self, prompt: list[int]) -> ReasoningSplitter | None:
        """A reasoning splitter for an output after `prompt`, which starts inside the block if the
        prompt opened it (as some templates do); None for models that do not reason in blocks."""
        if not self.facts.thinks:
            return None
        tail = self._model.detokenize([t for t in prompt[-8:] if t >= 0], special=True)  # no image's stand-ins
        return ReasoningSplitter(*THINK, inside=tail.rstrip().endswith(THINK[0]))

    def of(self, request: GenerationRequest) -> list[tuple[list[int], str | None]]:
        """Each prompt's tokens, and the text to echo before its output (completions only)."""
        model = self._model
        if isinstance(request, ChatRequest):
            text = self.chat_text(request)
            return [(self._tokens(text, request, add_bos=not text.startswith(self.template.bos_token or "\0")), None)]
        prompts = []
        for i, prompt in enumerate(request.prompts):
            if isinstance(prompt, str):
                prompts.append((self._tokens(prompt, request, add_bos=True), prompt if request.echo else None))
            else:
                tokens = self.checked_ids(prompt, f"prompt[{i}]")
                prompts.append((tokens, model.detokenize(tokens) if request.echo else None))
        return prompts

    def chat_text(self, request: ChatRequest) -> str:
        """The text a chat's prompt is tokenized from (what `/apply-template` shows)."""
        messages, prefill = _prefill(request)
        if offers_tools(request) and not self.facts.has_tools:
            messages = with_tools_note(messages, request.tools)
        elif not self.facts.has_tools:  # no tools now, yet the calls made earlier stay in the prompt
            messages = with_calls_as_text(messages)
        thinking = self.thinking(request)
        text = self.template.render(messages, tools=request.tools, enable_thinking=thinking)
        if thinking is False and self.facts.thinks and not self.facts.switch:
            text = _closed_block(text)
        return text + prefill

    def _tokens(self, text: str, request: GenerationRequest, *, add_bos: bool) -> list[int]:
        """A prompt's tokens; one that cannot fit the context with its output is refused after
        reading about a context's worth of it (see `prompt_bound`)."""
        model = self._model
        tokens = bounded_tokens(
            text,
            lambda t, bos: model.tokenize(t, add_bos=bos),
            limit=self.room,
            longest=model.longest_piece,
            add_bos=add_bos,
        )
        if isinstance(tokens, TooLong):
            raise self.overflow(tokens.tokens if tokens.exact else f"at least {tokens.tokens}", request)
        return tokens

    def overflow(self, needs: int | str, request: GenerationRequest, param: str | None = None) -> ContextOverflow:
        """The prompt (or, with `param`, the output asked for) does not fit the context."""
        limit = request.sampling.max_tokens
        asked = f" and {limit} for the output" if limit is not None else ""
        return ContextOverflow(
            f"This model's maximum context length is {self.context_length} tokens; the prompt needs {needs}{asked}.",
            param=param or (request.prompt_param if isinstance(request, ChatRequest) else "prompt"),
        )

    def checked_ids(self, ids: Sequence[int], param: str) -> list[int]:
        n_vocab = self._model.n_vocab
        for i, token in enumerate(ids):
            if not 0 <= token < n_vocab:
                raise InvalidRequest(
                    f"Token id {token} is outside this model's vocabulary (0..{n_vocab - 1}).", param=f"{param}[{i}]"
                )
        return list(ids)

    def check_bias(self, params: SamplingParams) -> None:
        """A bias on a token id this vocabulary lacks is refused (it would index past the logits)."""
        n_vocab = self._model.n_vocab
        for token, _ in params.logit_bias:
            if not 0 <= token < n_vocab:
                raise InvalidRequest(
                    f"logit_bias names token id {token}, outside this model's vocabulary (0..{n_vocab - 1}).",
                    param="logit_bias",
                )

    def check_fits(self, tokens: list[int], request: GenerationRequest) -> None:
        if not tokens:
            raise InvalidRequest("The prompt is empty.", param="prompt")
        limit = request.sampling.max_tokens
        if len(tokens) >= self.context_length:
            raise self.overflow(len(tokens), request)
        if limit is not None and len(tokens) + limit > self.context_length:  # the prompt fits, its output not
            raise self.overflow(len(tokens), request, param=request.sampling.max_tokens_param)

    def limit(self, prompt: list[int], params: SamplingParams) -> int:
        """The tokens an output after `prompt` may take."""
        room = self.context_length - len(prompt)
        return min(params.max_tokens, room) if params.max_tokens is not None else room

    @staticmethod
    def check_room(sampling: Sampling, params: SamplingParams) -> None:
        """An output held to a grammar needs room for its shortest complete form: a smaller
        `max_tokens` could only give a broken document, so it is refused."""
        least = sampling.least()
        if params.max_tokens is not None and params.max_tokens < least:
            raise InvalidRequest(
                f"'{params.max_tokens_param}' is {params.max_tokens}, but the shortest output the requested "
                f"format or tool call allows takes {least} tokens.",
                param=params.max_tokens_param,
            )


def _closed_block(prompt: str) -> str:
    """The prompt with an empty reasoning block after it, so the answer comes at once: for a
    model that reasons and a template with no switch to say not to (Qwen3's own switch does
    the same). A block the template opened is closed instead."""
    opened = prompt.rstrip().endswith(THINK[0])
    return prompt + ("\n\n" if opened else f"{THINK[0]}\n\n") + f"{THINK[1]}\n\n"


def _prefill(request: ChatRequest) -> tuple[tuple[Message, ...], str]:
    """A conversation that ends in a prefill (`ChatRequest.prefill`) is continued, not answered by
    a new turn: the turns before it, and the start the reply must continue from."""
    prefill = request.prefill
    return (request.messages, "") if prefill is None else (request.messages[:-1], prefill)
