"""What Ollama's endpoints share: wire options, model names, NDJSON framing, timestamps, errors."""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Annotated, Any, TypedDict

from pydantic import BaseModel, ConfigDict, Field

from asgi_llm.core import (
    IMAGE_MARKER,
    FinishReason,
    ImageInput,
    InvalidRequest,
    LLMError,
    OutputFormat,
    Reasoning,
    SamplingParams,
)

from ..base import ContextNeed, Reply, refuse_unrecognized, stream_json
from ..images import base64_image
from ..json_output import json_object, json_schema

__all__ = [
    "NDJSON",
    "Clock",
    "Durations",
    "GenerateFields",
    "Started",
    "Wire",
    "WireOptions",
    "context_need",
    "done_reason",
    "durations_since",
    "keep_alive_seconds",
    "model_name",
    "ndjson",
    "output_format",
    "render_error",
    "rfc3339",
    "sampling",
    "tag_error",
    "think_reasoning",
    "with_images",
]

NDJSON = "application/x-ndjson"
Clock = Callable[[], int]
"""Nanoseconds on one monotonic clock (`time.perf_counter_ns`): a reply's durations are differences of two."""


@dataclass(frozen=True)
class Started:
    """An Ollama request's wire-only option: when it began (its parse, as the body is read), on
    the `Clock`; every duration its reply reports counts from here, as Ollama's do from its
    handler's start."""

    ns: int

    @classmethod
    def now(cls, clock: Clock = time.perf_counter_ns) -> Started:
        return cls(clock())


class Wire(BaseModel):
    """Tolerant of unknown fields (visible in `model_extra`), strict about the types of known ones."""

    model_config = ConfigDict(extra="allow", strict=True)


class WireOptions(Wire):
    """Ollama's runtime `options`. Any other key (mirostat, typical_p, num_gpu...) is refused,
    naming it: Ollama ignores keys it does not know, but an option that changes nothing here
    must not look honoured."""

    num_ctx: int | None = None
    num_predict: Annotated[int, Field(ge=-2)] | None = None
    temperature: Annotated[float, Field(ge=0)] | None = None
    top_k: Annotated[int, Field(ge=0)] | None = None
    top_p: Annotated[float, Field(ge=0, le=1)] | None = None
    min_p: Annotated[float, Field(ge=0, le=1)] | None = None
    seed: int | None = None
    stop: str | list[str] | None = None
    repeat_penalty: Annotated[float, Field(gt=0)] | None = None
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    speculative: bool | None = None  # ours: false, no drafted tokens (prompt lookup, grammar jump-forward)


class GenerateFields(Wire):
    """The fields `/api/chat` and `/api/generate` share."""

    model: Annotated[str, Field(min_length=1)]
    format: str | dict[str, Any] | None = None
    options: WireOptions | None = None
    stream: bool = True
    keep_alive: float | str | None = None
    think: bool | str | None = None
    logprobs: bool | None = None
    top_logprobs: Annotated[int, Field(ge=0, le=20)] | None = None


class Durations(TypedDict):
    total_duration: int
    load_duration: int
    prompt_eval_duration: int
    eval_duration: int


def render_error(error: LLMError) -> Reply:
    return error.status, {"error": error.message}


def tag_error(body: Any, request_id: str) -> Any:
    """A `request_id` beside `error`: Ollama's clients read `error` and ignore the rest."""
    return {**body, "request_id": request_id} if isinstance(body, dict) else body


def ndjson(payload: Any) -> bytes:
    """One line of newline-delimited JSON; compact, and nothing inside that any reader takes
    for a line break (`stream_json`)."""
    return stream_json(payload).encode() + b"\n"


def model_name(name: str) -> str:
    """Ollama clients add the default tag; our catalog names models without it."""
    return name.removesuffix(":latest")


def with_images(text: str, images: list[str] | None, where: str) -> tuple[str, tuple[ImageInput, ...]]:
    """A message's (or a prompt's) `images`, base64, each named `{where}images[k]`: their markers
    stand before the text, in order, as Ollama puts its images before the prompt."""
    prefix = f"{where}." if where else ""
    read = tuple(base64_image(data, f"{prefix}images[{k}]") for k, data in enumerate(images or ()))
    return IMAGE_MARKER * len(read) + text, read


def rfc3339(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


# Ollama's defaults (its Modelfile parameter docs), not OpenAI's: clients of this protocol expect them.
_DEFAULTS = SamplingParams(temperature=0.8, top_k=40, top_p=0.9, repeat_penalty=1.1)


def context_need(options: WireOptions | None) -> ContextNeed | None:
    """`options.num_ctx`: the model must have at least that context (it is set per model, in
    the server's config, not per request)."""
    if options is None or options.num_ctx is None:
        return None
    if options.num_ctx < 1:
        raise InvalidRequest("'options.num_ctx' must be at least 1.", param="options.num_ctx")
    return ContextNeed(options.num_ctx, "options.num_ctx")


def think_reasoning(think: bool | str | None) -> Reasoning | None:
    """`think`: true or a level (`high`, `medium`, `low`, as gpt-oss takes) turns reasoning on,
    false turns it off."""
    if think is None:
        return None
    if isinstance(think, str) and think not in ("high", "medium", "low"):
        raise InvalidRequest("'think' must be true, false, or 'high', 'medium' or 'low'.", param="think")
    return Reasoning(enabled=think is not False, param="think")


def sampling(
    options: WireOptions | None,
    *,
    logprobs: bool | None,
    top_logprobs: int | None,
    fmt: str | dict[str, Any] | None = None,
) -> SamplingParams:
    if top_logprobs and not logprobs:
        raise InvalidRequest("'top_logprobs' requires 'logprobs' to be true.", param="top_logprobs")
    o = options or WireOptions()
    refuse_unrecognized(o, prefix="options.")
    predict = o.num_predict
    stop = o.stop
    return SamplingParams(
        max_tokens=predict if predict is not None and predict >= 0 else None,
        max_tokens_param="options.num_predict",
        temperature=_DEFAULTS.temperature if o.temperature is None else o.temperature,
        top_p=_DEFAULTS.top_p if o.top_p is None else o.top_p,
        top_k=_DEFAULTS.top_k if o.top_k is None else o.top_k,
        min_p=o.min_p or 0.0,
        stop=(stop,) if isinstance(stop, str) else tuple(stop or ()),
        seed=o.seed if o.seed is not None and o.seed >= 0 else None,
        presence_penalty=o.presence_penalty or 0.0,
        frequency_penalty=o.frequency_penalty or 0.0,
        repeat_penalty=_DEFAULTS.repeat_penalty if o.repeat_penalty is None else o.repeat_penalty,
        logprobs=bool(logprobs),
        top_logprobs=(top_logprobs or 0) if logprobs else 0,
        output_format=output_format(fmt),
        speculative=o.speculative is not False,
    )


def output_format(fmt: str | dict[str, Any] | None) -> OutputFormat | None:
    """`"json"` (any JSON object, as Ollama's own grammar has it) or a JSON schema; `""` means
    none. `{}` is a schema like any other, as Ollama reads it: any JSON value, constrained."""
    if fmt is None or fmt == "":
        return None
    if fmt == "json":
        return json_object("format")
    if isinstance(fmt, str):
        raise InvalidRequest(f'Invalid format {fmt!r}: use "json" or a JSON schema object.', param="format")
    return json_schema(fmt, "format")


_DURATION = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|ms|s|m|h)")
_UNIT_SECONDS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}


def keep_alive_seconds(value: float | str | None) -> float | None:
    """A number of seconds, or a Go duration string like `"5m"`, `"1h30m"` or `"-1"`; negative = forever."""
    if value is None or isinstance(value, float):
        return value
    text = value.strip()
    sign = -1.0 if text.startswith("-") else 1.0
    body = text.lstrip("+-")
    try:
        return sign * float(body)
    except ValueError:
        pass
    parts = _DURATION.findall(body)
    if not body or "".join(number + unit for number, unit in parts) != body:
        raise InvalidRequest(f"Invalid duration for 'keep_alive': {value!r}.", param="keep_alive")
    return sign * sum(float(number) * _UNIT_SECONDS[unit] for number, unit in parts)


def durations_since(
    started: Started, end_ns: int, first_ns: int | None = None, last_ns: int | None = None
) -> Durations:
    """A reply's durations, all on `Started`'s clock: the total from the request's start to
    `end_ns`; with the instants its first and last events came, the prompt's evaluation (start
    to first: a wait for the model counts in it) and the output's (first to last; a whole-body
    reply's from `Meta.decoded`). Without them the whole time counts as the output's. No load
    is timed apart: `load_duration` is 0."""
    total = max(0, end_ns - started.ns)
    if first_ns is None:
        return {"total_duration": total, "load_duration": 0, "prompt_eval_duration": 0, "eval_duration": total}
    prompt = min(total, max(0, first_ns - started.ns))
    output = max(0, (end_ns if last_ns is None else last_ns) - first_ns)
    return {"total_duration": total, "load_duration": 0, "prompt_eval_duration": prompt, "eval_duration": output}


def done_reason(reason: FinishReason | None) -> str:
    return "length" if reason == "length" else "stop"
