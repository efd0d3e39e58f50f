"""Fallback chains between models, read as plain data: what a request falls back to, and the
chains the settings must refuse (a loop, an unknown name). Imports nothing of ours."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

__all__ = ["fallback_chain"]


def fallback_chain(start: str, fallbacks: Mapping[str, Sequence[str]], ids: Mapping[str, str]) -> list[str]:
    """The model ids a request for `start` (an id) tries, in order: itself, then each of its
    `fallbacks` followed, depth first, by that model's own; a model reached twice is tried once.
    `ids` maps every name and alias to its id. Raises `ValueError` naming a loop (a model that
    falls back, through the chain, to itself) or a name no model has."""
    chain: list[str] = []

    def visit(model: str, path: tuple[str, ...]) -> None:
        if model not in chain:
            chain.append(model)
        for name in fallbacks.get(model, ()):
            target = ids.get(name)
            if target is None:
                raise ValueError(f"model {model!r} falls back to {name!r}, which no model is named")
            if target in path or target == model:
                loop = " -> ".join((*path, model, target))
                raise ValueError(f"model fallbacks loop: {loop}")
            visit(target, (*path, model))

    visit(start, ())
    return chain
