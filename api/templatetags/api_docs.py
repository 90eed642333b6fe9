"""The API reference page's text: the schema's descriptions write names in backticks, as
Markdown does; the page shows them as code instead of raw backticks."""

from __future__ import annotations

import re

from django import template
from django.utils.html import escape
from django.utils.safestring import SafeString, mark_safe

register = template.Library()

CODE_SPAN = re.compile(r"`([^`\n]+)`")


@register.filter
def code_spans(text: str) -> SafeString:
    """`name` -> <code>name</code>, everything else escaped."""
    return mark_safe(CODE_SPAN.sub(lambda m: f"<code>{m.group(1)}</code>", escape(str(text or ""))))
