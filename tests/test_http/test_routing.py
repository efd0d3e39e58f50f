"""Relative, slash-tolerant route matching below whatever prefix the host mounts us at."""

from __future__ import annotations

from typing import Any

import pytest

from asgi_llm.http.routing import Router, route_path


@pytest.mark.parametrize(
    ("scope", "expected"),
    [
        ({"path": "/v1/chat/completions", "root_path": "/v1"}, "/chat/completions"),
        ({"path": "/api/llm/v1/models", "root_path": "/api/llm/v1"}, "/models"),
        ({"path": "/v1/models/", "root_path": "/v1"}, "/models"),  # trailing slash, no redirect
        ({"path": "/v1", "root_path": "/v1"}, "/"),
        ({"path": "/v1/", "root_path": "/v1"}, "/"),
        ({"path": "/models", "root_path": "/v1"}, "/models"),  # a server that already stripped the prefix
        ({"path": "/models/"}, "/models"),
        ({"path": "/models", "root_path": ""}, "/models"),
        ({}, "/"),
    ],
)
def test_route_path(scope: dict[str, Any], expected: str) -> None:
    assert route_path(scope) == expected


ROUTES: list[tuple[str, tuple[str, ...], str, str | None]] = [
    ("/chat/completions", ("POST",), "chat", None),
    ("/models", ("GET",), "anthropic-list", "anthropic-version"),
    ("/models", ("GET",), "list", None),
    ("/models/{model:path}", ("GET",), "get", None),
    ("/files/{name}", ("GET",), "file", None),
    ("/files/{name}", ("DELETE",), "delete", None),
]


@pytest.fixture
def router() -> Router[str]:
    return Router(ROUTES)


def test_plain_match(router: Router[str]) -> None:
    match = router.match("/chat/completions", "POST")
    assert match is not None
    assert (match.target, match.params) == ("chat", {})


def test_path_param_keeps_slashes(router: Router[str]) -> None:
    match = router.match("/models/org/some-model.Q4_K_M", "GET")
    assert match is not None
    assert (match.target, match.params) == ("get", {"model": "org/some-model.Q4_K_M"})


def test_plain_param_stops_at_slash(router: Router[str]) -> None:
    match = router.match("/files/a.txt", "GET")
    assert match is not None and match.params == {"name": "a.txt"}
    assert router.match("/files/a/b", "GET") is None


def test_list_is_not_taken_for_get_and_vice_versa(router: Router[str]) -> None:
    listed = router.match("/models", "GET")
    assert listed is not None and listed.target == "list"
    assert router.match("/models/", "GET") is None  # route_path strips the slash before matching


def test_head_is_served_by_get(router: Router[str]) -> None:
    match = router.match("/models", "HEAD")
    assert match is not None and match.target == "list"


def test_wrong_method_lists_allowed(router: Router[str]) -> None:
    match = router.match("/chat/completions", "GET")
    assert match is not None
    assert match.target is None
    assert match.allowed == ("POST",)


def test_allowed_collects_every_route_on_the_path(router: Router[str]) -> None:
    match = router.match("/files/a.txt", "PUT")
    assert match is not None and match.target is None
    assert sorted(match.allowed) == ["DELETE", "GET"]


def test_second_route_on_same_path_matches_its_method(router: Router[str]) -> None:
    match = router.match("/files/a.txt", "DELETE")
    assert match is not None and match.target == "delete"


@pytest.mark.parametrize("path", ["/nope", "/chat", "/chat/completions/x", "/modelsx", ""])
def test_unknown_path_is_none(router: Router[str], path: str) -> None:
    assert router.match(path, "GET") is None
    assert router.match(path, "POST") is None


def test_template_text_is_literal() -> None:
    router = Router([("/a.b", ("GET",), "dot", None)])
    assert router.match("/a.b", "GET") is not None
    assert router.match("/axb", "GET") is None


def test_route_with_required_header_matches_only_with_it(router: Router[str]) -> None:
    plain = router.match("/models", "GET")
    assert plain is not None and plain.target == "list"
    marked = router.match("/models", "GET", {"anthropic-version", "x-api-key"})
    assert marked is not None and marked.target == "anthropic-list"
