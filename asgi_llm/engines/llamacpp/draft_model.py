"""A smaller model that drafts for the running sequences (`speculative = "draft"`).

It is loaded beside the model it drafts for, with a context of as many sequences and positions,
and keeps in each of its sequences the tokens it has read of the matching slot. Before a step,
every sequence that drafts brings its copy up to date in one batched decode (what the slot
gained since: the picks of the last step, or a prompt, `prefill_chunk` tokens a step as the
model reads it; what the target did not keep is dropped first), then the draft model writes its
greedy guess a token at a time, all sequences in one decode per token. The scheduler verifies the guesses as it does any draft (speculation.py):
the output is the target's own, whatever the draft model writes. Its vocabulary must be the
target's, token for token, or its guesses would be other tokens: that is checked at load.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Sequence
from dataclasses import replace

from ...config import ModelConfig
from ...core.memory import MemoryEstimate
from .buffers import measured_memory
from .jobs import BatchToken
from .native import Decoder, Model, llama_log_lines, new_context
from .prompt_cache import common_prefix
from .speculation import DraftRequest

__all__ = ["DraftModel", "with_draft"]

log = logging.getLogger("asgi_llm.engine")


class DraftModel:
    """The draft model's weights, context and per-sequence books, on the inference thread."""

    def __init__(self, config: ModelConfig, target: Model) -> None:
        assert config.draft_model is not None
        drafting = config.model_copy(update={"path": config.draft_model, "lora": (), "mmproj": None})
        with llama_log_lines() as lines:
            self.model = Model(drafting)
            try:
                _same_vocabulary(self.model, target, config)
                self.decoder = Decoder(new_context(self.model, drafting, sequences=config.parallel))
            except BaseException:
                self.model.close()
                raise
        self.memory = measured_memory(lines)
        self._held: list[list[int]] = [[] for _ in range(config.parallel)]  # each sequence's cells, as read
        self._chunk = max(config.prefill_chunk, 1)  # the most tokens caught up a step, besides the guesses

    def close(self) -> None:
        self.decoder.close()
        self.model.close()

    def draft(self, requests: Sequence[DraftRequest]) -> list[list[int]]:
        """Each request's greedy guess, up to its most; where the draft model fails, none (and
        its books start over: every sequence is read again from its start next time)."""
        try:
            return self._draft(requests)
        except Exception as exc:  # drafts are optional: the step goes on without
            log.error("the draft model failed; this step drafts nothing from it: %r", exc, exc_info=exc)
            with contextlib.suppress(Exception):
                self.decoder.clear()
            self._held = [[] for _ in self._held]
            return [[] for _ in requests]

    def _draft(self, requests: Sequence[DraftRequest]) -> list[list[int]]:
        rows = self._catch_up(requests)
        guesses: list[list[int]] = [[] for _ in requests]
        live = [i for i in rows if requests[i][2] > 0]
        while live:
            tops = self.decoder.top([rows[i] for i in live])
            for i, token in zip(live, tops, strict=True):
                guesses[i].append(int(token))
            live = [i for i in live if len(guesses[i]) < requests[i][2]]
            if not live:
                break
            self.decoder.decode([self._read(requests[i][0], guesses[i][-1], True) for i in live])
            rows = {i: row for row, i in enumerate(live)}
        return guesses

    def _catch_up(self, requests: Sequence[DraftRequest]) -> dict[int, int]:
        """The drafting sequences' cells made their histories': what they lack read, up to
        `chunk` tokens in all a step (a sequence that lags more, a new prompt's, reads on in the
        next steps and guesses once it has caught up), then each caught-up one's last token in one
        decode with logits. Request index -> its batch row in that decode."""
        lacking: list[tuple[int, int]] = []  # (sequence, token) to read without logits
        last: list[tuple[int, int, int]] = []  # (request index, sequence, token) read with logits
        for i, (sequence, history, most) in enumerate(requests):
            if most <= 0:
                continue
            held = self._held[sequence]
            keep = min(common_prefix(held, list(history)), len(history) - 1)  # the last is read again for its logits
            if keep < len(held):
                self.decoder.forget(sequence, keep)
                del held[keep:]
            behind = history[keep:-1]
            room = max(0, self._chunk - len(lacking))
            lacking += [(sequence, token) for token in behind[:room]]
            if len(behind) <= room:
                last.append((i, sequence, history[-1]))
        for start in range(0, len(lacking), self.decoder.capacity):
            self.decoder.decode(
                [
                    self._read(sequence, token, False)
                    for sequence, token in lacking[start : start + self.decoder.capacity]
                ]
            )
        if last:
            self.decoder.decode([self._read(sequence, token, True) for _, sequence, token in last])
        return {i: row for row, (i, _, _) in enumerate(last)}

    def _read(self, sequence: int, token: int, logits: bool) -> BatchToken:
        """`token` placed after what `sequence` holds, and counted as held."""
        held = self._held[sequence]
        held.append(token)
        return BatchToken(token, len(held) - 1, sequence, logits)


def _same_vocabulary(draft: Model, target: Model, config: ModelConfig) -> None:
    """Refuse a draft model whose tokens are not the target's, naming the first that differs."""
    if draft.n_vocab != target.n_vocab:
        raise ValueError(
            f"model {config.id!r}: draft_model has {draft.n_vocab} tokens where the model has {target.n_vocab}: "
            "a draft model must share the model's vocabulary"
        )
    for token in range(target.n_vocab):
        if draft.piece(token, special=True) != target.piece(token, special=True):
            raise ValueError(
                f"model {config.id!r}: draft_model's token {token} is {draft.piece(token, special=True)!r} where "
                f"the model's is {target.piece(token, special=True)!r}: a draft model must share the model's "
                "vocabulary"
            )


def with_draft(memory: MemoryEstimate | None, draft: DraftModel | None) -> MemoryEstimate | None:
    """A model's measured memory with its draft model's added."""
    if draft is None or draft.memory is None:
        return memory
    return draft.memory if memory is None else replace(memory + draft.memory, prompt_cache=memory.prompt_cache)
