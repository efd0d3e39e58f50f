"""Core requests as an OpenAI-compatible upstream's request bodies, and its model lists. Pure.

The bodies use only what every OpenAI-compatible server takes (llama.cpp's server, vLLM,
llama-cpp-python's server, OpenAI itself); llama.cpp's extra sampling fields (`top_k`, `min_p`,
`repeat_penalty`) go out only when a request sets them, so a strict server never sees them.
Generations always stream from the upstream, with `stream_options.include_usage`, so timeouts,
retries and cancellation work the same whether our own client streams or not.
"""

from __future__ import annotations

import base64
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ...core.errors import Unsupported
from ...core.requests import (
    IMAGE_MARKER,
    ChatRequest,
    CompletionRequest,
    EmbeddingRequest,
    GenerationRequest,
    ImageInput,
    Message,
    OutputFormat,
    SamplingParams,
    ToolChoice,
    ToolSpec,
)
from ...wire.openai_chat import ChatMessage, ContentPart, JsonSchemaFormat, ResponseFormat, Tool
from ...wire.openai_chat import ToolChoice as WireToolChoice

__all__ = [
    "UpstreamModel",
    "chat_body",
    "chat_from_completion",
    "choice_count",
    "completion_body",
    "count_body",
    "embedding_body",
    "estimate_prompt_tokens",
    "generation_body",
    "generation_path",
    "model_list",
]

_DEFAULTS = SamplingParams()


def generation_path(request: GenerationRequest) -> str:
    """Where a generation goes, below the upstream's base URL."""
    return "/chat/completions" if isinstance(request, ChatRequest) else "/completions"


def generation_body(request: GenerationRequest, model: str) -> dict[str, Any]:
    """A generation's streamed request body, for `generation_path`."""
    return chat_body(request, model) if isinstance(request, ChatRequest) else completion_body(request, model)


def choice_count(request: GenerationRequest) -> int:
    """The choices a generation asks for: `n` of each prompt."""
    return request.n * (len(request.prompts) if isinstance(request, CompletionRequest) else 1)


def chat_body(request: ChatRequest, model: str) -> dict[str, Any]:
    body: dict[str, Any] = {"model": model, "messages": [_message(m) for m in request.messages]}
    body.update(_sampling(request.sampling))
    if request.n != 1:
        body["n"] = request.n
    if request.user is not None:
        body["user"] = request.user
    if request.tools:
        body["tools"] = [_tool(t) for t in request.tools]
        body["tool_choice"] = _tool_choice(request.tool_choice)
        if not request.parallel_tool_calls:
            body["parallel_tool_calls"] = False
    return _streaming(body)


def completion_body(request: CompletionRequest, model: str) -> dict[str, Any]:
    prompts = [p if isinstance(p, str) else list(p) for p in request.prompts]
    body: dict[str, Any] = {"model": model, "prompt": prompts[0] if len(prompts) == 1 else prompts}
    body.update(_sampling(request.sampling))
    body.pop("response_format", None)  # completions have no response_format
    if request.n != 1:
        body["n"] = request.n
    if request.echo:
        body["echo"] = True
    if request.user is not None:
        body["user"] = request.user
    return _streaming(body)


def chat_from_completion(request: CompletionRequest) -> ChatRequest | None:
    """A one-prompt completion as a chat turn, for upstreams that only speak chat completions.

    Approximate by nature (the upstream applies its chat template to the prompt); None where
    it cannot stand in: several prompts, token-id prompts or `echo`.
    """
    if len(request.prompts) != 1 or not isinstance(request.prompts[0], str) or request.echo:
        return None
    message = Message(role="user", content=request.prompts[0])
    return ChatRequest(
        model=request.model, messages=(message,), sampling=request.sampling, n=request.n, user=request.user
    )


def count_body(request: GenerationRequest, model: str) -> dict[str, Any]:
    """A request for one token, whose reported `usage.prompt_tokens` is the prompt's exact size."""
    body = generation_body(request, model)
    for key in ("stream", "stream_options", "n", "logprobs", "top_logprobs", "echo"):
        body.pop(key, None)
    body.update(max_tokens=1, temperature=0.0)
    return body


def embedding_body(request: EmbeddingRequest, model: str) -> dict[str, Any]:
    inputs = [i if isinstance(i, str) else list(i) for i in request.inputs]
    body: dict[str, Any] = {"model": model, "input": inputs, "encoding_format": "float"}
    if request.user is not None:
        body["user"] = request.user
    return body


def _streaming(body: dict[str, Any]) -> dict[str, Any]:
    body.pop("stop", None)  # matched as the text arrives (stream.py): the upstream would not say which one
    body["stream"] = True
    body["stream_options"] = {"include_usage": True}
    return body


def _message(message: Message) -> ChatMessage:
    out: ChatMessage = {"role": message.role, "content": _content(message) if message.images else message.content}
    if message.name is not None:
        out["name"] = message.name
    if message.tool_calls:
        out["content"] = message.content or None
        out["tool_calls"] = [
            {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
            for c in message.tool_calls
        ]
    if message.tool_call_id is not None:
        out["tool_call_id"] = message.tool_call_id
    return out


def _content(message: Message) -> list[ContentPart]:
    """A message with images as OpenAI chat's parts: its text between them, each image where its
    marker stood."""
    parts: list[ContentPart] = []
    for k, text in enumerate(message.content.split(IMAGE_MARKER)):
        if text:
            parts.append({"type": "text", "text": text})
        if k < len(message.images):
            parts.append(_image_part(message.images[k]))
    return parts


def _image_part(image: ImageInput) -> ContentPart:
    """The image as the client sent it: its own URL (`data:` or `http(s)`), else a `data:` URL
    of its bytes (a protocol that sends bare base64); its `detail` where it gave one."""
    url = image.url
    if url is None:
        url = f"data:{image.media_type or 'application/octet-stream'};base64,{base64.b64encode(image.data).decode()}"
    part: ContentPart = {"type": "image_url", "image_url": {"url": url}}
    if image.detail is not None:
        part["image_url"]["detail"] = image.detail
    return part


def _tool(tool: ToolSpec) -> Tool:
    parameters = dict(tool.parameters) or {"type": "object"}
    out: Tool = {"type": "function", "function": {"name": tool.name, "parameters": parameters}}
    if tool.description is not None:
        out["function"]["description"] = tool.description
    return out


def _tool_choice(choice: ToolChoice) -> WireToolChoice:
    if choice in ("auto", "none", "required"):
        return choice
    return {"type": "function", "function": {"name": choice}}


def _sampling(params: SamplingParams) -> dict[str, Any]:
    out: dict[str, Any] = {"temperature": params.temperature, "top_p": params.top_p}
    if params.max_tokens is not None:
        out["max_tokens"] = params.max_tokens
    if params.stop:
        out["stop"] = list(params.stop)
    if params.seed is not None:
        out["seed"] = params.seed
    for name in ("presence_penalty", "frequency_penalty", "top_k", "min_p", "repeat_penalty"):
        if getattr(params, name) != getattr(_DEFAULTS, name):
            out[name] = getattr(params, name)
    if params.logit_bias:
        out["logit_bias"] = {str(token): bias for token, bias in params.logit_bias}
    if params.logprobs:
        out["logprobs"] = True
        if params.top_logprobs:
            out["top_logprobs"] = params.top_logprobs
    if params.output_format is not None:
        out["response_format"] = _response_format(params.output_format)
    return out


def _response_format(output: OutputFormat) -> ResponseFormat:
    if output.kind == "grammar":  # GBNF is llama.cpp's own; vLLM and OpenAI would not hold the output to it
        raise Unsupported(
            "A model served upstream takes no 'grammar'; the output would not be held to it.", param=output.param
        )
    if output.kind == "json_object":
        return {"type": "json_object"}
    spec: JsonSchemaFormat = {"name": output.name or "output", "schema": dict(output.schema), "strict": output.strict}
    return {"type": "json_schema", "json_schema": spec}


@dataclass(frozen=True)
class UpstreamModel:
    """One model an upstream lists; `context_length` where it says (vLLM, llama.cpp's server)."""

    id: str
    context_length: int | None = None


def model_list(body: Any) -> list[UpstreamModel]:
    """The models in a `/v1/models` answer: OpenAI's `{"data": [...]}`, a bare list (of objects
    or names), or Ollama's `{"models": [...]}`. Entries without a name are skipped."""
    entries = body.get("data", body.get("models", [])) if isinstance(body, Mapping) else body
    models = []
    for entry in entries if isinstance(entries, list) else []:
        if isinstance(entry, str):
            models.append(UpstreamModel(entry))
        elif isinstance(entry, Mapping):
            name = entry.get("id") or entry.get("name") or entry.get("model")
            if isinstance(name, str) and name:
                models.append(UpstreamModel(name, _context_length(entry)))
    return models


def _context_length(entry: Mapping[str, Any]) -> int | None:
    meta = entry.get("meta")
    for value in (
        entry.get("max_model_len"),
        entry.get("context_length"),
        meta.get("n_ctx_train") if isinstance(meta, Mapping) else None,
    ):
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return None


def estimate_prompt_tokens(request: GenerationRequest) -> int:
    """A rough prompt size (4 characters a token, plus a few per chat turn) for upstreams that
    report no usage; never used where the upstream reports it."""
    if isinstance(request, ChatRequest):
        text = sum(len(m.content) + sum(len(c.arguments) + len(c.name) for c in m.tool_calls) for m in request.messages)
        return math.ceil(text / 4) + 4 * len(request.messages) + 2
    return sum(math.ceil(len(p) / 4) if isinstance(p, str) else len(p) for p in request.prompts)
