"""Keys may expire."""

from __future__ import annotations

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("asgi_llm", "0002_apikey_operator")]  # noqa: RUF012

    operations = [  # noqa: RUF012
        migrations.AddField(
            model_name="apikey",
            name="expires",
            field=models.DateTimeField(blank=True, help_text="From then on, the key no longer works.", null=True),
        ),
    ]
