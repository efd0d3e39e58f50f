"""What OpenAI's endpoints share: the error envelope (written once, in `wire.openai_error`), SSE
framing, the usage shape and the sampling fields."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Annotated, Any, TypeVar

from pydantic import BaseModel, ConfigDict, Field, model_validator

from asgi_llm.core import (
    AdapterScale,
    InvalidRequest,
    LLMError,
    OutputFormat,
    Reasoning,
    SamplingParams,
    Unsupported,
    Usage,
)
from asgi_llm.wire import openai_chat as wire
from asgi_llm.wire import openai_error as error_envelope
from asgi_llm.wire.openai_error import ErrorBody

from ..base import Reply, refuse_unrecognized, stream_json, validate

__all__ = [
    "EFFORTS",
    "MAX_CHOICES",
    "SSE_DONE",
    "ErrorBody",
    "SamplingBody",
    "StreamOptions",
    "Wire",
    "WireLora",
    "adapter_scales",
    "effort_reasoning",
    "logit_bias",
    "refuse_service",
    "render_error",
    "sampling_params",
    "served_user",
    "sse",
    "stop_list",
    "stop_problem",
    "stream_flags",
    "tag_error",
    "texts_or_tokens_problem",
    "usage_dict",
    "validated",
]

SSE_DONE = b"data: [DONE]\n\n"
M = TypeVar("M", bound=BaseModel)


def render_error(error: LLMError) -> Reply:
    return error.status, error_envelope.error_body(error.status, error.message, error.param, error.code)


tag_error = error_envelope.tag_error


def sse(payload: Any) -> bytes:
    """One `data:` event; compact JSON keeps per-token overhead low (`stream_json`: no line break inside)."""
    return b"data: " + stream_json(payload).encode() + b"\n\n"


def usage_dict(usage: Usage) -> wire.Usage:
    return {
        "prompt_tokens": usage.prompt_tokens,
        "completion_tokens": usage.completion_tokens,
        "total_tokens": usage.total_tokens,
        "prompt_tokens_details": {"cached_tokens": usage.cached_tokens},
        "completion_tokens_details": {"reasoning_tokens": usage.reasoning_tokens},
    }


EFFORTS = ("none", "minimal", "low", "medium", "high")
"""OpenAI's reasoning efforts: the first two turn reasoning off, the rest on (a local model's
reasoning has no graded length, so low, medium and high ask the same)."""


def effort_reasoning(effort: str | None, param: str) -> Reasoning | None:
    if effort is None:
        return None
    if effort not in EFFORTS:
        raise InvalidRequest(f"'{param}' must be one of {', '.join(EFFORTS)}.", param=param)
    return Reasoning(enabled=effort not in ("none", "minimal"), param=param)


SERVICE_TIERS = ("auto", "default")
"""The `service_tier`s honoured: one tier serves every request here, which both of these name."""


def refuse_service(service_tier: str | None, cache_retention: str | None) -> None:
    """`service_tier` and `prompt_cache_retention` (chat and Responses): what this server does
    is honoured, another tier or retention refused."""
    if service_tier is not None and service_tier not in SERVICE_TIERS:
        raise Unsupported(
            f"'service_tier' '{service_tier}' is not offered: one tier serves every request here "
            "('auto' or 'default').",
            param="service_tier",
        )
    if cache_retention is not None and cache_retention != "in_memory":
        raise Unsupported(
            "'prompt_cache_retention' can only be 'in_memory': the prompt cache is held in memory, "
            "for as long as room allows.",
            param="prompt_cache_retention",
        )


def served_user(user: str | None, safety_identifier: str | None) -> str | None:
    """The request's user: `user`, or `safety_identifier` (the field OpenAI replaced it with)."""
    if user is not None and safety_identifier is not None and user != safety_identifier:
        raise InvalidRequest(
            "'safety_identifier' and 'user' name different users; send one.", param="safety_identifier"
        )
    return safety_identifier if user is None else user


def stop_list(stop: str | Sequence[str] | None) -> tuple[str, ...]:
    if stop is None:
        return ()
    return (stop,) if isinstance(stop, str) else tuple(stop)


class Wire(BaseModel):
    """Tolerant of unknown vendor fields (kept in `model_extra`), strict about types. A null
    counts as not sent (docs/protocols.md): dropped before validation, so the field's default
    applies, and a required field given as null is a missing one."""

    model_config = ConfigDict(extra="allow", strict=True)

    @model_validator(mode="before")
    @classmethod
    def _nulls_not_sent(cls, data: Any) -> Any:
        return {k: v for k, v in data.items() if v is not None} if isinstance(data, dict) else data


class StreamOptions(Wire):
    include_usage: bool = False
    include_obfuscation: bool | None = None
    """False, or left out: no obfuscation is what this server streams; true is refused."""


MAX_CHOICES = 16
"""The most choices one request decodes: chat's `n`, and prompts × `n` on `/completions`."""

MAX_STOP = 16
"""The most stop sequences a request may give (OpenAI takes 4; llama.cpp's clients send more)."""

INT64 = (-(2**63), 2**63 - 1)
"""The spec's range of a `seed`."""


def _json_kind(value: Any) -> str:
    if isinstance(value, bool):
        return "a boolean"
    kinds = {str: "a string", int: "an integer", float: "a number", list: "a list", dict: "an object"}
    return next((name for t, name in kinds.items() if isinstance(value, t)), "null")


def _item_kind(value: Any) -> str:
    """A prompt item's kind: a text, a token id, a list of token ids, or what it wrongly is."""
    if isinstance(value, str):
        return "a string"
    if isinstance(value, int) and not isinstance(value, bool):
        return "a token id"
    if isinstance(value, list):
        return "a list of token ids"
    return _json_kind(value)


def _texts_or_tokens_problem(value: Any) -> str:
    if not isinstance(value, list):
        return f"got {_json_kind(value)}"
    kinds = [_item_kind(x) for x in value]
    for i, kind in enumerate(kinds):
        if kind not in ("a string", "a token id", "a list of token ids"):
            return f"item {i} is {kind}"
        if kind != kinds[0]:
            return f"item {i} is {kind} but item 0 is {kinds[0]}; the items must all be of one kind"
        if isinstance(value[i], list):
            for j, token in enumerate(value[i]):
                if _item_kind(token) != "a token id":
                    return f"item [{i}][{j}] is {_json_kind(token)}, not a token id"
    return "its items are of no form this field takes"


def stop_problem(value: Any) -> str:
    if isinstance(value, list) and len(value) > MAX_STOP:
        return f"at most {MAX_STOP} stop sequences are taken; got {len(value)}"
    if isinstance(value, list):
        i = next((i for i, x in enumerate(value) if not isinstance(x, str)), 0)
        return f"expected a string or a list of strings; item {i} is {_json_kind(value[i]) if value else 'missing'}"
    return f"expected a string or a list of strings; got {_json_kind(value)}"


def texts_or_tokens_problem(value: Any) -> str:
    """What is wrong with a `prompt` or an `input`."""
    forms = "expected a string, a list of strings, a list of token ids (integers) or a list of lists of token ids"
    return f"{forms}; {_texts_or_tokens_problem(value)}"


def validated(model: type[M], body: Any, **explain: Callable[[Any], str]) -> M:
    """`validate`, with the error of a field named in `explain` said by it: pydantic's first
    error on a union is its first branch's ("Input should be a valid string"), which does not
    say what is wrong with a list."""
    try:
        return validate(model, body)
    except InvalidRequest as exc:
        param = exc.param or ""
        if param not in explain or not isinstance(body, dict) or body.get(param) is None:
            raise
        raise InvalidRequest(f"Invalid value for '{param}': {explain[param](body[param])}.", param=param) from None


class WireLora(Wire):
    """llama-server's per-request `lora` entry: a configured adapter's id and its scale."""

    id: str
    scale: float


def adapter_scales(lora: list[WireLora] | None, param: str = "lora") -> tuple[AdapterScale, ...] | None:
    """A request's adapters (those it does not name are off, as in llama-server); None: the defaults."""
    if lora is None:
        return None
    for i, entry in enumerate(lora):
        refuse_unrecognized(entry, prefix=f"{param}[{i}].")
    return tuple(AdapterScale(entry.id, entry.scale) for entry in lora)


class SamplingBody(Wire):
    """The fields chat and completions bodies share."""

    model: str
    temperature: Annotated[float, Field(ge=0, le=2)] | None = None
    top_p: Annotated[float, Field(gt=0, le=1)] | None = None
    n: Annotated[int, Field(ge=1, le=MAX_CHOICES)] | None = None
    stream: bool | None = None
    stream_options: StreamOptions | None = None
    stop: str | Annotated[list[str], Field(max_length=MAX_STOP)] | None = None
    seed: Annotated[int, Field(ge=INT64[0], le=INT64[1])] | None = None
    """An int64, as the spec says; the engine folds it to its own width (llama.cpp: 32 bits)."""
    presence_penalty: Annotated[float, Field(ge=-2, le=2)] | None = None
    frequency_penalty: Annotated[float, Field(ge=-2, le=2)] | None = None
    logit_bias: dict[str, Annotated[float, Field(ge=-100, le=100)]] | None = None
    user: str | None = None
    # llama.cpp-style extras many clients send
    top_k: Annotated[int, Field(ge=0)] | None = None
    min_p: Annotated[float, Field(ge=0, le=1)] | None = None
    repeat_penalty: Annotated[float, Field(gt=0)] | None = None
    lora: list[WireLora] | None = None
    """llama-server's per-request LoRA adapters and scales."""
    grammar: str | None = None
    """llama.cpp's GBNF grammar the output must be a sentence of (empty: none, as in llama-server)."""
    speculative: bool | None = None
    """Ours: false, no drafted tokens for this request (prompt lookup, grammar jump-forward)."""


def stream_flags(wire: SamplingBody) -> tuple[bool, bool]:
    """Whether to stream, and whether the stream ends with a usage chunk; `stream_options`
    without `stream` would be ignored, so it is refused (as OpenAI does)."""
    if wire.stream_options is not None and not wire.stream:
        raise InvalidRequest("'stream_options' is only allowed when 'stream' is true.", param="stream_options")
    if wire.stream_options is not None and wire.stream_options.include_obfuscation:
        param = "stream_options.include_obfuscation"
        raise Unsupported("Stream obfuscation is not supported; send false or leave it out.", param=param)
    return bool(wire.stream), bool(wire.stream_options and wire.stream_options.include_usage)


def sampling_params(
    wire: SamplingBody,
    *,
    max_tokens: int | None,
    logprobs: bool,
    top_logprobs: int,
    output_format: OutputFormat | None = None,
    max_tokens_param: str = "max_tokens",
) -> SamplingParams:
    """OpenAI's defaults (temperature 1, top_p 1) for whatever the body leaves out."""
    return SamplingParams(
        max_tokens=max_tokens,
        temperature=1.0 if wire.temperature is None else wire.temperature,
        top_p=1.0 if wire.top_p is None else wire.top_p,
        top_k=wire.top_k or 0,
        min_p=wire.min_p or 0.0,
        stop=stop_list(wire.stop),
        seed=wire.seed,
        presence_penalty=wire.presence_penalty or 0.0,
        frequency_penalty=wire.frequency_penalty or 0.0,
        repeat_penalty=wire.repeat_penalty or 1.0,
        logit_bias=logit_bias(wire.logit_bias),
        logprobs=logprobs,
        top_logprobs=top_logprobs,
        output_format=_with_grammar(wire.grammar, output_format),
        max_tokens_param=max_tokens_param,
        speculative=wire.speculative is not False,
    )


def _with_grammar(grammar: str | None, other: OutputFormat | None) -> OutputFormat | None:
    """llama.cpp's `grammar` as the output's form, which nothing else may also shape."""
    if not grammar:
        return other
    if other is not None:
        raise InvalidRequest("Give 'grammar' or 'response_format', not both.", param="grammar")
    return OutputFormat(kind="grammar", param="grammar", grammar=grammar)


def logit_bias(bias: dict[str, float] | None) -> tuple[tuple[int, float], ...]:
    if not bias:
        return ()
    pairs = []
    for key, value in bias.items():
        if not (key.isascii() and key.isdigit()):  # not "²" or "٣", which `isdigit` also takes
            raise InvalidRequest(
                f"logit_bias keys must be token ids (ASCII decimal digits); got {key!r}.", param="logit_bias"
            )
        pairs.append((int(key), value))
    return tuple(pairs)
