"""The model pool: owns model lifecycle and the one inference thread every local model uses.

`ModelPool` (model_pool.py) composes its parts, each on one concern: `ModelEntry` (entry.py),
one model's record; `Roster` (roster.py), the models served by name; `Lifecycle`
(lifecycle.py), start, stop, load, unload and keep-alive; `Reloader` (reload.py), new settings
without a restart; `Residency` (residency.py), the limits and what unloads to make room;
`Status` (status.py), health, the admin list and the catalog.
"""

from .lifecycle import EngineFactory
from .model_pool import ModelPool

__all__ = ["EngineFactory", "ModelPool"]
