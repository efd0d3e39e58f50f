"""OpenAI's Responses API: `routes` (parse, render, stored state), `input` (items to
messages) and `output` (events to output items and the named SSE stream)."""
