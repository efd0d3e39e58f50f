"""The contracts between the scheduler and the rest of the engine: the model calls it makes
(`Backend`), one request (`Ticket`), and one choice of it (`Job`, driven through `Choice`).

Pure: no `llama_cpp` here, so the scheduler is tested over a recording backend and scripted
choices (tests/test_llamacpp/test_batching.py, test_scheduler_states.py).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol

from ...core.events import EngineEvent, GenerationEvent
from .draft_payoff import Acceptance
from .lookup import PromptLookup

if TYPE_CHECKING:
    from .batching import Slot

__all__ = [
    "END",
    "Backend",
    "BatchToken",
    "Choice",
    "Delivery",
    "Ended",
    "Gate",
    "Job",
    "Media",
    "Ticket",
    "Turn",
    "delivered",
]


class Ended:
    """What a ticket is sent once all of its choices have finished (`END`, the one there is)."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "END"


END = Ended()
Delivery = EngineEvent | BaseException | Ended
"""What a ticket is sent: its events, an error that ends it, or the end."""


async def delivered(receive: Callable[[], Awaitable[Delivery]]) -> AsyncIterator[EngineEvent]:
    """A ticket's events as `receive` gets them, up to its end; an error it was sent is raised here."""
    while True:
        item = await receive()
        if isinstance(item, Ended):
            return
        if isinstance(item, BaseException):
            raise item
        yield item


class BatchToken(NamedTuple):
    token: int
    position: int
    sequence: int
    logits: bool


class Backend(Protocol):
    def decode(self, batch: Sequence[BatchToken]) -> None:
        """One batched decode; raises when the model refuses it."""
        ...

    def forget(self, sequence: int, start: int) -> None:
        """Drop `sequence`'s cached tokens from position `start` on."""
        ...

    def copy(self, source: int, target: int) -> None:
        """Make `target` hold everything `source` holds (`target` is emptied first). The data
        may move only at the next decode: `source` must not be written before then."""
        ...

    def save(self, sequence: int, limit: int) -> tuple[Any, int] | None:
        """`sequence`'s cache as a state to `restore` later, and its size in bytes; None if
        that would be over `limit` bytes (and then nothing is copied)."""
        ...

    def restore(self, sequence: int, state: Any) -> bool:
        """Make `sequence` hold the saved `state` at once; False (and `sequence` empty) if it
        does not fit."""
        ...

    def top(self, rows: Sequence[int]) -> Sequence[int]:
        """The token of the highest logit (the first of equal highs) at each of the last decode's
        batch `rows`, picked in one pass over their logits."""
        ...


class Turn(NamedTuple):
    """What one step of a choice gave: its events, and the token to decode next (None: done)."""

    events: Sequence[GenerationEvent]
    token: int | None


class Choice(Protocol):
    """One output being generated, as the scheduler drives it. Any of these may raise: the
    scheduler then ends this choice's request with an error and keeps the others going."""

    def begin(self, cached: int) -> Sequence[EngineEvent]:
        """The prompt is read (`cached` of its tokens came from a cache): what goes out before
        the first token (the prompt's size, an echo)."""
        ...

    @property
    def greedy(self) -> bool:
        """Whether its next pick is the plain top of its logits (no grammar, bias, penalties or
        logprobs): the scheduler then picks it with the other such choices' in one pass."""
        ...

    def forced(self) -> str:
        """The text its grammar allows alone next ('' where more than one text may follow, or it
        is held to none): the scheduler drafts its tokens (speculation.py), and the choice's picks
        at those positions keep them or not, as any draft."""
        ...

    def step(self, row: int, top: int | None = None) -> Turn:
        """Pick the next token from the logits at batch row `row`; `top` is that row's top token
        where the scheduler picked it, which a choice takes instead while it is `greedy`."""
        ...

    def close(self) -> None:
        """The choice leaves early (its client left, or a fault): let go of what it holds."""
        ...


class Media(Protocol):
    """A prompt the batch cannot read whole: one with images, each read through the projector's
    encoder (projector.py). Its images stand in the job's prompt as runs of stand-in ids; before
    `tail`, where its last run of text begins, it is read a piece a step (media_reading.py); from
    there on the batch reads it as any prompt."""

    @property
    def tail(self) -> int: ...

    def boundary(self, position: int) -> int:
        """`position`, or the start of the image run it falls inside (an image is read whole)."""
        ...

    def read(self, sequence: int, start: int, budget: int) -> int:
        """Read on into `sequence` from `start`: the image that begins there, whole, or up to
        `budget` tokens of text (as far as the next image or `tail`); the position it got to."""
        ...


class Ticket:
    """One request: where its events go (`send` is False once nobody listens), and whether its
    client is still there (set from the event loop, read here every step)."""

    def __init__(self, send: Callable[[Delivery], bool], choices: int) -> None:
        self.send = send
        self.cancelled = False
        self.open = choices
        self.admitted = False

    def cancel(self) -> None:
        """Its client is gone (or it failed): the scheduler ends its choices at its next step."""
        self.cancelled = True


@dataclass(eq=False)
class Job:
    """One choice in the scheduler: after each decode that gave it logits (at batch row
    `logits`), its `choice` takes a step, which sets `token` to what to decode next. `group`
    marks choices of one prompt, which share its reading."""

    ticket: Ticket
    prompt: list[int]
    choice: Choice
    group: object = None
    logits: int = -1
    token: int | None = None
    begun: bool = False  # whether `choice.begin` ran
    cached: int = 0  # prompt tokens found in the slot's cache
    slot: Slot | None = None
    pending: list[int] = field(default_factory=list)  # prompt tokens still to decode
    leader: Job | None = None  # a choice of the same prompt whose reading this one will copy
    followers: list[Job] = field(default_factory=list)
    setting: tuple[float, ...] = ()  # its LoRA adapters' scales: jobs of one decode share them
    media: Media | None = None  # its prompt's images, read before the batch reads the rest
    lookup: PromptLookup | None = None  # its prompt and output so far, where it drafts (speculation.py)
    draft: list[int] = field(default_factory=list)  # tokens decoded after `token` this step, to verify
    reach: int = 0  # the most tokens it drafts next (speculation.py adapts it)
    acceptance: Acceptance = field(default_factory=Acceptance)  # of its lookup drafts (draft_payoff.py)
    forced: int = 0  # of `draft`, the first tokens its choice's grammar forced (speculation.py)
    tail: int | None = None  # the forced text's last token, where its forced draft ends with it (`Tail`)
    recalled: bool = False  # whether the rest of `draft` came from the model's memory of replies
    agreement: int = 0  # how far back the place its lookup draft follows agrees (lookup.py's `follows`)


class Gate(Protocol):
    """Which waiting job may join the running ones: llama.cpp sets LoRA adapters per context, not
    per sequence, so one decode serves one adapter setting (lora.py)."""

    def admits(self, job: Job, running: bool, slots: Sequence[Slot]) -> bool:
        """Whether `job` may take a slot now. With nothing `running` it always may: the context
        switches to its setting, and every slot's cache, computed under the old one, is dropped."""
        ...
