"""Shaping and reading what a model decodes: grammars for JSON and tool calls, tool-call
detection, the reasoning split and stop strings.

Pure Python over core types, shared by the engines; nothing here calls a model.
"""
