"""The offers page's filters (the offers app's own form: clusters builds on offers, never the
other way, tests/core/test_import_graph.py)."""

from __future__ import annotations

from django import forms

from offers.inventory import SORTS
from offers.models import MACHINE_COUNT_MESSAGES, MAX_MACHINES, MIN_MACHINES, MachineKind


class OffersFilterForm(forms.Form):
    gpu = forms.CharField(required=False)
    machines = forms.IntegerField(
        min_value=MIN_MACHINES, max_value=MAX_MACHINES, initial=4, required=False,
        error_messages={key: MACHINE_COUNT_MESSAGES[key] for key in ("min_value", "max_value", "invalid")},
    )
    include_community = forms.BooleanField(required=False)
    location = forms.CharField(required=False)
    kind = forms.ChoiceField(choices=[("", "Any kind"), *MachineKind.choices], required=False)
    sort = forms.ChoiceField(choices=list(SORTS.items()), required=False)

    def clean_machines(self) -> int | None:
        machines = self.cleaned_data["machines"]
        # Absent means the default size; present but cleared is a mistake to point out.
        if machines is None and "machines" in self.data:
            raise forms.ValidationError(MACHINE_COUNT_MESSAGES["required"])
        return machines
