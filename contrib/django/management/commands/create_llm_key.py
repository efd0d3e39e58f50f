"""`manage.py create_llm_key NAME`: store a new API key and print it, once."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from .....middleware.keyring import parse_expiry
from ...keys import KeyExists, create_key


class Command(BaseCommand):
    help = "Create an API key for the LLM API and print it; only its hash is stored."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("name", help="who or what uses the key")
        parser.add_argument("--operator", action="store_true", help="may also read /metrics (every key's usage)")
        parser.add_argument("--expires", metavar="WHEN", help="2027-01-01, an ISO date and time, or 30d / 12h / 90m")

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            expires = parse_expiry(options["expires"]) if options["expires"] else None
            key = create_key(options["name"], operator=options["operator"], expires=expires)
        except (KeyExists, ValueError) as exc:
            raise CommandError(str(exc)) from None
        self.stdout.write(key)
