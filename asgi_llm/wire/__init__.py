"""Wire shapes that more than one part writes, as TypedDicts: written once, so the OpenAI
adapter (which answers in them) and the upstream engine (which asks in them) cannot drift.

Types only, at no runtime cost: nothing here imports any other part of the package.
"""
