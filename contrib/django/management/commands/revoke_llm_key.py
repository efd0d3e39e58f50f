"""`manage.py revoke_llm_key NAME`: the key stops working at once."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from ...keys import revoke_key


class Command(BaseCommand):
    help = "Revoke an API key of the LLM API by name."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("name")

    def handle(self, *args: Any, **options: Any) -> None:
        if not revoke_key(options["name"]):
            raise CommandError(f"no API key named {options['name']!r} is in force")
        self.stdout.write(f"Revoked {options['name']}.")
