"""Prompt caches kept on disk, so that a long prompt read once is not read again after a restart,
an unload or a reload: a sequence's state as llama.cpp saves it, one file per prompt, in a
directory named by the model's fingerprint.

Why it can be trusted:
- A file is written whole under a temporary name, flushed to disk, then renamed into place: a
  crash leaves a temporary file nobody reads (removed by a later scan), never half a file under
  a real name. A reader still checks every length against the file's size, and the fingerprint
  in its header, and compares the file's token list exactly with the one it chose.
- The fingerprint covers what a state depends on: the model file (size, time, first and last
  MiB), the context per sequence, the KV cache's types and layout, the LoRA adapters and the
  llama.cpp build. A state saved under any other is in another directory, or refused.
- Writes run on the cache's own writer thread: the inference thread only copies the state out
  of llama.cpp. Reads run on the inference thread, when a prompt is admitted: reading a file is
  a small fraction of prefilling what it holds.
- The least recently used files go first to stay within `budget` bytes (a file's time is its
  last use). Several processes may share a directory: a name is the hash of what the file
  holds, a rename is atomic, and a file another process removed is a miss.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import queue
import struct
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from .prompt_cache import common_prefix

__all__ = ["FILE_GAIN", "PromptFiles", "StoredPrompt", "fingerprint"]

log = logging.getLogger("asgi_llm.engine")

_MAGIC = b"asgi-llm prompt1"
_HEAD = struct.Struct("<16s32sIIQ")  # magic, fingerprint, tokens, setting's scales, state bytes
_SUFFIX = ".prompt"
_TEMPORARY = ".tmp"
STALE_TEMPORARY = 600.0
"""Seconds after which a temporary file is taken for a crashed writer's and removed (a write in
progress, perhaps another process's, renames its file within a second or two)."""
FILE_GAIN = 128
"""Prompt tokens a prompt must have taken to read afresh (found in no cache) for its state to be
saved to a file, by default: below that, reading them again costs about as little as the file."""
_EDGE = 1 << 20  # bytes read from each end of the model file for its fingerprint


def fingerprint(model_path: str, parts: Mapping[str, object]) -> bytes:
    """What a saved state depends on, as a SHA-256 digest: the model file and the `parts` of the
    context, adapters and build that shape a state."""
    digest = hashlib.sha256()
    stat = os.stat(model_path)
    digest.update(f"{stat.st_size}:{stat.st_mtime_ns}".encode())
    with open(model_path, "rb") as model:
        digest.update(model.read(_EDGE))
        model.seek(max(0, stat.st_size - _EDGE))
        digest.update(model.read(_EDGE))
    digest.update(repr(sorted((key, repr(value)) for key, value in parts.items())).encode())
    return digest.digest()


@dataclass(eq=False)
class StoredPrompt:
    path: Path
    tokens: list[int]  # what the state holds, position by position
    setting: tuple[float, ...]  # its LoRA adapters' scales
    size: int  # the file's bytes
    used: float  # last use, as the file's time


class PromptFiles:
    """The directory of one model's saved prompts: look-ups and reads from the inference thread,
    writes queued to the writer thread. `close` lets the queued writes finish."""

    def __init__(
        self, root: str | os.PathLike[str], budget: int, digest: bytes, *, pending: int, fresh: int = FILE_GAIN
    ) -> None:
        self.directory = Path(root) / digest.hex()[:32]
        self.directory.mkdir(parents=True, exist_ok=True)
        self.budget = budget
        self.fresh = fresh  # the fewest tokens read afresh that make a prompt worth a file
        self._digest = digest
        self._pending_limit = pending  # bytes of states waiting to be written, at most
        self._pending = 0
        self._lock = threading.Lock()  # the index, between the inference and writer threads
        self._index: dict[str, StoredPrompt] = {}
        self._scanned = -1  # the directory's mtime_ns at the last scan
        self.reads = self.writes = self.dropped = 0
        self._queue: queue.Queue[tuple[list[int], tuple[float, ...], Any] | None] = queue.Queue()
        self._writer = threading.Thread(target=self._write_all, name="asgi-llm prompt files", daemon=True)
        self._writer.start()
        self._scan()

    # -- the inference thread -------------------------------------------------------

    def best(self, prompt: list[int], setting: tuple[float, ...]) -> tuple[StoredPrompt | None, int]:
        """The stored prompt of this adapter setting sharing the longest prefix with `prompt`."""
        self._scan()
        found, length = None, 0
        with self._lock:
            for stored in self._index.values():
                if stored.setting == setting and (shared := common_prefix(stored.tokens, prompt)) > length:
                    found, length = stored, shared
        return found, length

    def holds(self, tokens: list[int], setting: tuple[float, ...]) -> bool:
        """Whether a stored prompt of this setting starts with all of `tokens`."""
        self._scan()
        with self._lock:
            return any(
                s.setting == setting and common_prefix(s.tokens, tokens) == len(tokens) for s in self._index.values()
            )

    def read(self, stored: StoredPrompt) -> Any:
        """The state `stored` holds (a uint8 array), or None when the file is gone, is not what it
        says, or holds other tokens than the index chose it for."""
        try:
            with open(stored.path, "rb") as file:
                tokens, setting, state_size = self._head(file, os.fstat(file.fileno()).st_size)
                if tokens != stored.tokens or setting != stored.setting:
                    raise ValueError("it holds other tokens now")
                state = np.empty(state_size, dtype=np.uint8)
                if file.readinto(state.data) != state_size:
                    raise ValueError("it is shorter than its header says")
            now = time.time()
            with contextlib.suppress(OSError):
                os.utime(stored.path, (now, now))
            stored.used = now
            self.reads += 1
            return state
        except (OSError, ValueError) as exc:
            log.warning("saved prompt %s not used: %s", stored.path.name, exc)
            self.discard(stored, remove=not isinstance(exc, FileNotFoundError))
            return None

    def write(self, tokens: list[int], setting: tuple[float, ...], state: Any) -> bool:
        """Queue `state` (of `tokens`) to be written; False when the queue already holds as many
        bytes as it may, or the state alone is over the budget."""
        size = int(state.nbytes)
        with self._lock:
            if size > self.budget or self._pending + size > self._pending_limit:
                self.dropped += 1
                return False
            self._pending += size
        self._queue.put((list(tokens), setting, state))
        return True

    def close(self, timeout: float = 30.0) -> None:
        """Let the queued writes finish (for at most `timeout` seconds), then stop the writer."""
        self._queue.put(None)
        self._writer.join(timeout)

    def stats(self) -> dict[str, int]:
        with self._lock:
            return {
                "files": len(self._index),
                "bytes": sum(s.size for s in self._index.values()),
                "budget": self.budget,
                "reads": self.reads,
                "writes": self.writes,
                "dropped": self.dropped,
            }

    # -- the writer thread --------------------------------------------------------------

    def _write_all(self) -> None:
        while (item := self._queue.get()) is not None:
            tokens, setting, state = item
            try:
                self._write(tokens, setting, state)
            except Exception as exc:  # noqa: BLE001 (a cache that cannot write is a cache that misses)
                log.warning("a prompt could not be saved in %s: %r", self.directory, exc)
            finally:
                with self._lock:
                    self._pending -= int(state.nbytes)

    def _write(self, tokens: list[int], setting: tuple[float, ...], state: Any) -> None:
        scales = np.asarray(setting, dtype="<f8").tobytes()
        ids = np.asarray(tokens, dtype="<i4").tobytes()
        name = hashlib.sha256(self._digest + scales + ids).hexdigest()[:40] + _SUFFIX
        path = self.directory / name
        temporary = self.directory / f".{name}.{os.getpid()}.{threading.get_ident()}{_TEMPORARY}"
        try:
            with open(temporary, "wb") as file:
                file.write(_HEAD.pack(_MAGIC, self._digest, len(tokens), len(setting), int(state.nbytes)))
                file.write(scales)
                file.write(ids)
                file.write(memoryview(state))
                file.flush()
                os.fsync(file.fileno())
            os.replace(temporary, path)
        finally:
            with contextlib.suppress(FileNotFoundError):
                temporary.unlink()
        stored = StoredPrompt(path, list(tokens), setting, path.stat().st_size, time.time())
        with self._lock:
            for key, other in list(self._index.items()):  # the longer serves both
                if (
                    other.setting == setting
                    and key != name
                    and common_prefix(other.tokens, tokens) == len(other.tokens)
                ):
                    self._unlink(key)
            self._index[name] = stored
            self.writes += 1
            self._evict()

    # -- either thread ------------------------------------------------------------------

    def _head(self, file: Any, file_size: int) -> tuple[list[int], tuple[float, ...], int]:
        """A file's token list, setting and state size, every length checked against its size."""
        head = file.read(_HEAD.size)
        if len(head) != _HEAD.size:
            raise ValueError("it is shorter than a header")
        magic, digest, n_tokens, n_scales, state_size = _HEAD.unpack(head)
        if magic != _MAGIC:
            raise ValueError("it is not a saved prompt")
        if digest != self._digest:
            raise ValueError("it was saved for another model or context")
        if _HEAD.size + 8 * n_scales + 4 * n_tokens + state_size != file_size:
            raise ValueError("its size is not what its header says")
        setting = tuple(float(x) for x in np.frombuffer(file.read(8 * n_scales), dtype="<f8"))
        tokens = np.frombuffer(file.read(4 * n_tokens), dtype="<i4").tolist()
        return tokens, setting, state_size

    def _scan(self) -> None:
        """Bring the index up to date with the directory, when the directory changed (a file
        written or removed, by this process or another)."""
        try:
            changed = self.directory.stat().st_mtime_ns
        except OSError:
            return
        if changed == self._scanned:
            return
        self._scanned = changed
        now = time.time()
        found: dict[str, StoredPrompt] = {}
        with self._lock:
            known = dict(self._index)
        for entry in os.scandir(self.directory):
            if entry.name.endswith(_TEMPORARY):
                with contextlib.suppress(OSError):
                    if now - entry.stat().st_mtime > STALE_TEMPORARY:
                        os.unlink(entry.path)
                continue
            if not entry.name.endswith(_SUFFIX):
                continue
            if (stored := known.get(entry.name)) is not None:
                found[entry.name] = stored
                continue
            with contextlib.suppress(FileNotFoundError):
                if (read := self._stored(Path(entry.path))) is not None:
                    found[entry.name] = read
        with self._lock:
            self._index = found
            self._evict()

    def _stored(self, path: Path) -> StoredPrompt | None:
        try:
            with open(path, "rb") as file:
                status = os.fstat(file.fileno())
                tokens, setting, _ = self._head(file, status.st_size)
        except ValueError as exc:
            log.warning("saved prompt %s removed: %s", path.name, exc)
            with contextlib.suppress(OSError):
                path.unlink()
            return None
        return StoredPrompt(path, tokens, setting, status.st_size, status.st_mtime)

    def discard(self, stored: StoredPrompt, *, remove: bool = True) -> None:
        """Take `stored` out of the index, and its file away unless `remove` is False."""
        with self._lock:
            if self._index.get(stored.path.name) is stored:
                del self._index[stored.path.name]
        if remove:
            with contextlib.suppress(OSError):
                stored.path.unlink()

    def _evict(self) -> None:
        """Remove the least recently used files until the rest fit the budget (lock held)."""
        total = sum(s.size for s in self._index.values())
        for stored in sorted(self._index.values(), key=lambda s: s.used):
            if total <= self.budget:
                break
            total -= stored.size
            self._unlink(stored.path.name)

    def _unlink(self, name: str) -> None:
        stored = self._index.pop(name)
        with contextlib.suppress(OSError):
            stored.path.unlink()
