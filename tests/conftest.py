"""Shared fixtures: the anyio backend and validation against OpenAI's own OpenAPI spec.

The spec lives in the shared folder beside the repository (`../shared/spec`), in CI too.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from jsonschema import Draft202012Validator
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT202012

SPEC_PATH = Path(__file__).resolve().parents[1].parent / "shared" / "spec" / "openai-openapi.yaml"
SPEC_URI = "urn:openai-openapi"

SpecValidate = Callable[[Any, str], None]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def _null_tolerant(node: Any) -> Any:
    """OpenAPI 3.0's `nullable: true` (still used in places) as JSON Schema 2020-12 understands it."""
    if isinstance(node, list):
        return [_null_tolerant(item) for item in node]
    if not isinstance(node, dict):
        return node
    converted = {key: _null_tolerant(value) for key, value in node.items() if not (key == "nullable" and value is True)}
    if node.get("nullable") is True:
        return {"anyOf": [converted, {"type": "null"}]}
    return converted


@pytest.fixture(scope="session")
def openai_spec() -> dict[str, Any]:
    """The official OpenAI OpenAPI document, loaded once per session (it is ~3 MB)."""
    if not SPEC_PATH.is_file():
        pytest.fail(f"OpenAI spec not found at {SPEC_PATH}")
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    with SPEC_PATH.open("rb") as f:
        spec: dict[str, Any] = yaml.load(f, Loader=loader)
    return _null_tolerant(spec)  # type: ignore[no-any-return]


@pytest.fixture(scope="session")
def spec_validate(openai_spec: dict[str, Any]) -> SpecValidate:
    """`spec_validate(instance, "CreateChatCompletionResponse")` raises `ValidationError` on a mismatch."""
    registry: Registry[Any] = Registry().with_resource(SPEC_URI, Resource(openai_spec, specification=DRAFT202012))
    validators: dict[str, Draft202012Validator] = {}

    def validate(instance: Any, name: str) -> None:
        if name not in openai_spec["components"]["schemas"]:
            raise KeyError(f"no schema {name!r} in the OpenAI spec")
        if name not in validators:
            schema = {"$ref": f"{SPEC_URI}#/components/schemas/{name}"}
            validators[name] = Draft202012Validator(schema, registry=registry)
        validators[name].validate(instance)

    return validate
