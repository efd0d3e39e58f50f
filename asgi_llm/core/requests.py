"""What a client asks for, once its wire format has been stripped away."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from .ranking import AdapterScale

__all__ = [
    "IMAGE_MARKER",
    "ChatRequest",
    "CompletionRequest",
    "DetokenizeRequest",
    "EmbeddingRequest",
    "GenerationRequest",
    "ImageInput",
    "Message",
    "OutputFormat",
    "Reasoning",
    "Role",
    "SamplingParams",
    "TemplateRequest",
    "TokenIds",
    "TokenizeRequest",
    "TokenizerRequest",
    "ToolCall",
    "ToolChoice",
    "ToolSpec",
]

Role = Literal["system", "user", "assistant", "tool"]
TokenIds = tuple[int, ...]


@dataclass(frozen=True)
class ToolCall:
    """A call the assistant made in an earlier turn; `arguments` is a JSON object as text."""

    id: str
    name: str
    arguments: str


@dataclass(frozen=True)
class ToolSpec:
    """A function the model may call; `parameters` is a JSON Schema object."""

    name: str
    description: str | None = None
    parameters: Mapping[str, Any] = field(default_factory=dict)


ToolChoice = Literal["auto", "none", "required"] | str
"""`auto`, `none`, `required` (some tool), or the name of the one tool to call."""


IMAGE_MARKER = "<__media__>"
"""Where each of a message's `images` stands in its `content`, in order: llama.cpp's multimodal
library's default marker, which its tokenizer replaces with the image's own chunk."""


@dataclass(frozen=True)
class ImageInput:
    """One image a client sent, as every protocol's form comes down to: its bytes (decoded from
    base64, or fetched from an allowed host), their media type where known, and `part`, the
    request path that names it in errors (`messages[1].content[0]`). `url` is the client's own
    URL (`data:` or `http(s)`) where it sent one, so that an upstream gets the image as sent;
    `detail` is OpenAI's (`auto`, `low`, `high`), kept for an upstream.

    An adapter does no I/O and decodes nothing: it leaves `data` empty and gives the `url`, or
    `encoded`, the base64 text of a protocol that sends bare base64 (Anthropic, Ollama). The
    server reads them (serving/images.py: decoded off the event loop, fetched from an allowed
    host, the format and size checked) before any engine sees the request, so an engine always
    gets `data` filled, `media_type` the format the bytes are, and `encoded` None."""

    data: bytes = field(repr=False)
    media_type: str | None = None
    part: str = ""
    url: str | None = field(default=None, repr=False)
    detail: str | None = None
    encoded: str | None = field(default=None, repr=False)


@dataclass(frozen=True)
class Message:
    """One turn. `tool_calls` on assistant turns; `tool_call_id` answers one on tool turns.
    `images` stand in `content` where `IMAGE_MARKER` is, one marker each, in order."""

    role: Role
    content: str
    name: str | None = None
    tool_calls: tuple[ToolCall, ...] = ()
    tool_call_id: str | None = None
    reasoning: str | None = None
    images: tuple[ImageInput, ...] = ()


@dataclass(frozen=True)
class OutputFormat:
    """The output must be one JSON document: any object (`json_object`), or one valid under `schema`;
    or (`grammar`) a sentence of `grammar`, a GBNF text (llama.cpp's `grammar` field).

    `schema` is a JSON Schema (checked with `jsonschema` when parsed); `param` is the request
    field it came from, so an engine that cannot enforce it can say where the problem is.
    `name` and `strict` are kept as the client sent them; an engine enforces the schema either way.
    """

    kind: Literal["json_object", "json_schema", "grammar"]
    param: str
    schema: Mapping[str, Any] = field(default_factory=dict)
    name: str | None = None
    strict: bool = False
    grammar: str = ""


@dataclass(frozen=True)
class SamplingParams:
    """Decoding controls; defaults follow OpenAI's documented defaults."""

    max_tokens: int | None = None
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    min_p: float = 0.0
    stop: tuple[str, ...] = ()
    seed: int | None = None
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    repeat_penalty: float = 1.0
    logit_bias: tuple[tuple[int, float], ...] = ()
    logprobs: bool = False
    top_logprobs: int = 0
    output_format: OutputFormat | None = None
    max_tokens_param: str = "max_tokens"
    """The request field `max_tokens` came from, for a refusal that names it."""
    speculative: bool = True
    """Whether the model may draft tokens to verify (by lookup where its `speculative` setting is
    on, and what a grammar forces next); a request opts out with the protocol's extension field,
    say to time plain decoding."""


@dataclass(frozen=True)
class Reasoning:
    """Whether the model reasons before it answers, as the request asks; `param` names the field
    that asked, for the refusal a model that cannot reason gives when asked to."""

    enabled: bool
    param: str
    budget: int | None = None
    """The most tokens it may spend reasoning (Anthropic's `budget_tokens`): the block is closed there."""


@dataclass(frozen=True)
class ChatRequest:
    model: str
    messages: tuple[Message, ...]
    sampling: SamplingParams = field(default_factory=SamplingParams)
    n: int = 1
    user: str | None = None
    tools: tuple[ToolSpec, ...] = ()
    tool_choice: ToolChoice = "auto"
    parallel_tool_calls: bool = True
    reasoning: Reasoning | None = None
    """None: the model's configured default (its template's own, unless the config says)."""
    adapters: tuple[AdapterScale, ...] | None = None
    """LoRA adapters and scales for this request (llama-server's `lora`; those not named: 0);
    None: the model's default scales."""
    prompt_size_first: bool = False
    """The stream opens with the prompt's size (Anthropic's `message_start`): an engine that
    learns it only at the end (an upstream) finds it out first, or holds its events until then."""
    prompt_param: str = "messages"
    """The request field the prompt came from (Responses' `input`), for a refusal that names it."""

    @property
    def prefill(self) -> str | None:
        """The start the reply continues, where the conversation ends in the assistant's own words
        (no tool calls), as Anthropic and llama.cpp's server take a prefill; None for a new turn.
        The reply carries the continuation only."""
        last = self.messages[-1] if self.messages else None
        return last.content if last is not None and last.role == "assistant" and not last.tool_calls else None


@dataclass(frozen=True)
class CompletionRequest:
    """Raw-prompt completions: `n` choices for each prompt; `echo` puts the prompt before the output.

    Choice `index` for prompt `p`, sample `j` is `p * n + j`.
    """

    model: str
    prompts: tuple[str | TokenIds, ...]
    sampling: SamplingParams = field(default_factory=SamplingParams)
    n: int = 1
    echo: bool = False
    user: str | None = None
    adapters: tuple[AdapterScale, ...] | None = None
    """As `ChatRequest.adapters`."""


@dataclass(frozen=True)
class EmbeddingRequest:
    """`truncate` cuts inputs longer than the model embeds at once; otherwise they are a 400.
    `dimensions` asks for shorter vectors, of a size the model lists (`embedding_sizes.py`)."""

    model: str
    inputs: tuple[str | TokenIds, ...]
    user: str | None = None
    truncate: bool = False
    dimensions: int | None = None


GenerationRequest = ChatRequest | CompletionRequest


@dataclass(frozen=True)
class TokenizeRequest:
    """Text to token ids, nothing decoded. `add_special` adds what the model's tokenizer adds at
    the ends (a BOS, where its vocabulary says to); `parse_special` reads control tokens written in
    the text (`<|im_start|>`) as themselves; `pieces` asks for each token's bytes too. A `model`
    of None is the first model the caller may use."""

    model: str | None
    text: str
    add_special: bool = False
    parse_special: bool = True
    pieces: bool = False


@dataclass(frozen=True)
class DetokenizeRequest:
    """Token ids back to text (control tokens written out); `model` as in `TokenizeRequest`."""

    model: str | None
    tokens: TokenIds


@dataclass(frozen=True)
class TemplateRequest:
    """The prompt `chat` would be decoded from, rendered by the model's chat template and not
    decoded; `model` as in `TokenizeRequest` (the chat's own is not read)."""

    model: str | None
    chat: ChatRequest


TokenizerRequest = TokenizeRequest | DetokenizeRequest | TemplateRequest
"""What a model's tokenizer and chat template answer without decoding."""
