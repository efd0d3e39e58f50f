"""Wire shapes that more than one part writes, as TypedDicts: written once, so the OpenAI
adapter (which answers in them) and the upstream engine (which asks in them) cannot drift;
and OpenAI's error envelope, which the adapter and the middleware layers both answer in.

Types and pure functions of plain values: nothing here imports any other part of the package.
"""
