from __future__ import annotations

from django import forms

from accounts.models import SSHKey
from clusters.models import Software, Volume
from offers.models import MachineType
from offers.services import MAX_MACHINES, MIN_MACHINES


class CreateClusterForm(forms.Form):
    name = forms.CharField(max_length=63, help_text="Lowercase letters, digits and hyphens, e.g. llm-train-1.")
    offer = forms.ModelChoiceField(queryset=MachineType.objects.none(), empty_label=None)
    machines = forms.IntegerField(
        min_value=MIN_MACHINES, max_value=MAX_MACHINES, initial=4,
        error_messages={
            "min_value": f"A cluster has at least {MIN_MACHINES} machines.",
            "max_value": f"A cluster has at most {MAX_MACHINES} machines; request a quote for more.",
        },
    )
    software = forms.ChoiceField(choices=Software.choices, initial=Software.NONE, widget=forms.RadioSelect)
    volume = forms.ModelChoiceField(queryset=Volume.objects.none(), required=False, empty_label="No volume")
    ssh_keys = forms.ModelMultipleChoiceField(
        queryset=SSHKey.objects.none(), required=False, widget=forms.CheckboxSelectMultiple, label="SSH keys"
    )

    def __init__(self, *args, environment, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["offer"].queryset = MachineType.objects.filter(active=True).select_related("gpu", "location")
        self.fields["volume"].queryset = Volume.objects.filter(environment=environment)
        self.fields["ssh_keys"].queryset = SSHKey.objects.filter(workspace_id=environment.workspace_id)


class OffersFilterForm(forms.Form):
    gpu = forms.CharField(required=False)
    machines = forms.IntegerField(
        min_value=MIN_MACHINES, max_value=MAX_MACHINES, initial=4, required=False,
        error_messages={"min_value": "At least 2 machines.", "max_value": "At most 64 machines; request a quote for more."},
    )
    include_community = forms.BooleanField(required=False)


class VolumeForm(forms.Form):
    name = forms.CharField(max_length=100, help_text="e.g. datasets")
    size_gb = forms.IntegerField(min_value=1, max_value=100_000, initial=500, label="Size (GB)")
