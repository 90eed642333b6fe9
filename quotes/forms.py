from __future__ import annotations

import datetime as dt
from typing import Any

from django import forms
from django.utils import timezone

from quotes.models import MAX_MACHINES, MAX_TERM_MONTHS, QuoteRequest, Term


class QuoteRequestForm(forms.ModelForm):
    # The honeypot: hidden from people (CSS and aria-hidden), filled in by form-filling bots.
    website = forms.CharField(required=False, label="Leave this field empty")

    class Meta:
        model = QuoteRequest
        fields = ["contact_name", "email", "company", "gpu", "machines", "network", "term", "term_months", "start_date", "notes"]
        labels = {"machines": "Number of machines", "term_months": "Months (reserved term)", "start_date": "Wanted start date"}
        widgets = {
            "start_date": forms.DateInput(attrs={"type": "date"}),
            "network": forms.RadioSelect,
            "term": forms.RadioSelect,
            "notes": forms.Textarea(attrs={"rows": 4}),
        }

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.fields["machines"].min_value = 1  # type: ignore[attr-defined]
        self.fields["machines"].widget.attrs.update({"min": 1, "max": MAX_MACHINES})
        self.fields["term_months"].widget.attrs.update({"min": 1, "max": MAX_TERM_MONTHS})
        self.fields["term_months"].help_text = f"Only for a reserved term: 1 to {MAX_TERM_MONTHS} months."
        self.fields["start_date"].help_text = "Leave empty for as soon as possible."
        self.fields["gpu"].widget.attrs["list"] = "gpu-models"

    def clean_machines(self) -> int:
        machines = self.cleaned_data["machines"]
        if machines is None or machines < 1:
            raise forms.ValidationError("Ask for at least one machine.")
        if machines > MAX_MACHINES:
            raise forms.ValidationError(f"For more than {MAX_MACHINES:,} machines, write to us directly.")
        return machines

    def clean_start_date(self) -> dt.date | None:
        start = self.cleaned_data.get("start_date")
        if start and start < timezone.now().date():
            raise forms.ValidationError("The start date is in the past.")
        return start

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        term, months = data.get("term"), data.get("term_months")
        if term == Term.RESERVED:
            if not months:
                self.add_error("term_months", "Say for how many months you want to reserve.")
            elif months > MAX_TERM_MONTHS:
                self.add_error("term_months", f"Reserved terms run up to {MAX_TERM_MONTHS} months.")
        elif term == Term.ON_DEMAND:
            # Months only mean something for a reserved term; drop a stray value.
            data["term_months"] = None
        return data

    @property
    def is_spam(self) -> bool:
        return bool(self.data.get("website"))

    def cleaned_data_for_service(self) -> dict:
        return {field: self.cleaned_data.get(field) for field in self.Meta.fields}
