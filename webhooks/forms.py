from __future__ import annotations

from django import forms

from webhooks.models import SUBSCRIBABLE, EventType

EVENT_CHOICES = [(t.value, t.label) for t in SUBSCRIBABLE]


class EndpointForm(forms.Form):
    url = forms.URLField(max_length=2000, label="Endpoint URL", assume_scheme="https",
                         help_text="Where we POST each event (https://, a public address).")
    description = forms.CharField(max_length=200, required=False)
    events = forms.MultipleChoiceField(choices=EVENT_CHOICES, widget=forms.CheckboxSelectMultiple,
                                       initial=[EventType.CLUSTER_READY, EventType.CLUSTER_FAILED,
                                                EventType.CLUSTER_TERMINATED])


class EndpointEventsForm(forms.Form):
    # Under the card's "Events" heading: the field says what the boxes do, not "Events" again.
    events = forms.MultipleChoiceField(choices=EVENT_CHOICES, widget=forms.CheckboxSelectMultiple,
                                       label="Sent to this endpoint")
    is_active = forms.BooleanField(required=False, label="Send events to this endpoint")
