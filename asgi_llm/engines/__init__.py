"""Engines that run models: llama.cpp in-process, and a scripted fake for tests."""
