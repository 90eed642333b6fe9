"""The API key form, shared by the API keys page and POST /api/v1/api-keys: one rule for a name."""

from __future__ import annotations

from django import forms


class ApiKeyForm(forms.Form):
    name = forms.CharField(max_length=100, help_text="What uses it, e.g. 'laptop CLI' or 'training agent'.")
