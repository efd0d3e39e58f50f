"""Grammar jump-forward with the packaged model: a structured output's forced text (its keys)
is drafted and taken, several tokens a decode, and the output is the same token for token as
without drafts, and still a document of its schema at any budget."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Sequence

import jsonschema
import pytest

from asgi_llm import ModelConfig
from asgi_llm.core import ChatRequest, Message, OutputFormat, SamplingParams
from asgi_llm.engines.llamacpp import LlamaCppEngine
from asgi_llm.engines.llamacpp.jobs import BatchToken
from asgi_llm.engines.llamacpp.speculation import Drafting

from .local_engine import local_engine, written

pytestmark = [pytest.mark.anyio, pytest.mark.model]

PROMPT = (  # as benchmarks/constrained_decoding.py asks
    "Describe a fictional person as a JSON object with the fields name, age, city, occupation and hobbies "
    "(a list of strings). Reply with the JSON object only."
)
PERSON = {
    "type": "object",
    "properties": {
        "name": {"type": "string"},
        "age": {"type": "integer"},
        "city": {"type": "string"},
        "occupation": {"type": "string"},
        "hobbies": {"type": "array", "items": {"type": "string"}},
    },
    "required": ["name", "age", "city", "occupation", "hobbies"],
}


@pytest.fixture(scope="module")
async def counted() -> AsyncIterator[tuple[LlamaCppEngine, list[int]]]:
    """An engine whose model has no lookup drafting (jump-forward is always on), and its decode calls."""
    async with local_engine(ModelConfig(n_ctx=2048)) as engine:
        runtime = engine.runtime
        assert runtime is not None
        decoder, calls = runtime.decoder, [0]
        decode = decoder.decode

        def counting(batch: Sequence[BatchToken]) -> None:
            calls[0] += 1
            decode(batch)

        decoder.decode = counting  # type: ignore[method-assign]
        yield engine, calls


async def person(engine: LlamaCppEngine, tokens: int, *, speculative: bool = True) -> tuple[str, str, int]:
    fmt = OutputFormat(kind="json_schema", param="response_format", schema=PERSON)
    params = SamplingParams(max_tokens=tokens, temperature=0, output_format=fmt, speculative=speculative)
    return await written(engine, ChatRequest(model="m", messages=(Message("user", PROMPT),), sampling=params))


async def test_the_keys_are_drafted_and_taken_in_fewer_decodes_with_the_same_output(
    counted: tuple[LlamaCppEngine, list[int]],
) -> None:
    engine, calls = counted
    drafting = engine.runtime.drafting if engine.runtime is not None else None
    assert drafting is not None and not drafting.rules.lookup
    # Once first, so that both runs read the cached prompt's last token alone: read with its whole
    # prompt the first time, llama.cpp sums its attention in another order (docs/performance.md).
    await person(engine, 120)
    before, drafted, accepted, refused = calls[0], drafting.drafted, drafting.accepted, _refused(drafting)
    written = await person(engine, 120)
    decodes, drafted, accepted = calls[0] - before, drafting.drafted - drafted, drafting.accepted - accepted
    refused = _refused(drafting) - refused
    before, total = calls[0], drafting.drafted
    assert await person(engine, 120, speculative=False) == written
    assert drafting.drafted == total  # the request opted out: none drafted
    assert accepted >= 5 and decodes == calls[0] - before - accepted  # each key's first token came early
    # what a grammar forces, spelled as the model spells it, is all taken but where the model wrote
    # a forced text's last token merged with what followed (` ` and a string's `"` as one ` "`)
    assert drafted - accepted == refused and refused <= accepted // 8
    jsonschema.validate(json.loads(written[0]), PERSON)


@pytest.mark.parametrize("tokens", [20, 23, 29, 36, 44])
async def test_every_budget_still_ends_inside_the_schema(
    counted: tuple[LlamaCppEngine, list[int]], tokens: int
) -> None:
    engine, calls = counted
    await person(engine, tokens)  # as above: both runs read the cached prompt's last token alone
    before = calls[0]
    written = await person(engine, tokens)
    drafted, before = calls[0] - before, calls[0]
    assert written == await person(engine, tokens, speculative=False)
    assert written[2] <= tokens
    jsonschema.validate(json.loads(written[0]), PERSON)
    if written[1] == "length":  # cut: the closing's ending is drafted too, so fewer decodes write it
        assert drafted < calls[0] - before - 2


def _refused(drafting: Drafting) -> int:
    """Forced texts' last tokens the model did not take as spelled, so far."""
    return sum(tail.refused for tail in drafting.tails.values())
