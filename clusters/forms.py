from __future__ import annotations

from typing import Any, cast

from django import forms
from django.db.models import Q

from accounts.models import Environment, SSHKey
from clusters.models import Software, Volume
from clusters.rules import NAME_MAX_LENGTH
from config.money import format_money
from offers.inventory import machine_types_with_availability
from offers.models import MACHINE_COUNT_MESSAGES, MAX_MACHINES, MIN_MACHINES, MachineType


def is_id(value: str) -> bool:
    """A row id as typed in a query string: ASCII digits a bigint holds ("²" is a digit to
    str.isdigit() and not to int())."""
    return value.isascii() and value.isdigit() and len(value) <= 18


SOFTWARE_HELP = {
    Software.NONE: "Plain machines on the private network, names in /etc/hosts and the hostfile. "
                   "Ready as soon as every machine has joined.",
    Software.SLURM: "munge and slurmd on every machine, slurmctld on node-0; one partition \"gpu\" with every GPU. "
                    "Ready when every node is idle in sinfo.",
    Software.KUBERNETES: "containerd and kubeadm; the control plane on node-0, every machine a node with the NVIDIA "
                         "device plugin. Ready when every node is Ready with its GPUs allocatable. VM and bare metal only.",
    Software.RAY: "Ray on every machine, the head on node-0. Ready when every node is alive in ray status.",
}


class OfferSelect(forms.Select):
    """Each offer option carries what the page needs to price it and to say what it allows."""

    def create_option(
        self, name: str, value: Any, label: str | int, selected: bool, index: int,
        subindex: int | None = None, attrs: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        option = super().create_option(name, value, label, selected, index, subindex, attrs)
        machine_type = getattr(value, "instance", None)
        if machine_type is not None:
            option["attrs"].update({
                "data-price": str(machine_type.price_per_machine_hour),
                "data-free": str(getattr(machine_type, "free_hosts", "")),
                "data-kubernetes": "1" if machine_type.supports_kubernetes else "0",
                "data-community": "1" if machine_type.community else "0",
                "data-shares-folder": "1" if machine_type.shares_folder else "0",
            })
        return option


class SoftwareSelect(forms.RadioSelect):
    """The software radios; the choices the picked offer does not allow are greyed out."""

    disabled_values: set[str]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.disabled_values = set()

    def __deepcopy__(self, memo: dict[int, Any]) -> SoftwareSelect:
        # Each form gets a copy of its fields' widgets, which Django copies shallowly.
        widget = super().__deepcopy__(memo)
        widget.disabled_values = set(self.disabled_values)
        return widget

    def create_option(
        self, name: str, value: Any, label: str | int, selected: bool, index: int,
        subindex: int | None = None, attrs: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        option = super().create_option(name, value, label, selected, index, subindex, attrs)
        if value in self.disabled_values:
            option["attrs"]["disabled"] = True
        return option


def offer_label(machine_type: MachineType) -> str:
    community = " · Community host" if machine_type.community else ""
    free = getattr(machine_type, "free_hosts", None)
    free_text = f" · {free} free" if free is not None else ""
    return (
        f"{machine_type.gpus_per_machine}× {machine_type.gpu.slug} {machine_type.get_kind_display()} · "
        f"{machine_type.location.name} — {format_money(machine_type.price_per_machine_hour)}/h per machine{free_text}{community}"
    )


class CreateClusterForm(forms.Form):
    name = forms.CharField(max_length=NAME_MAX_LENGTH, help_text="Lowercase letters, digits and hyphens, e.g. llm-train-1.")
    offer = forms.ModelChoiceField(queryset=MachineType.objects.none(), empty_label=None, widget=OfferSelect)
    machines = forms.IntegerField(
        min_value=MIN_MACHINES, max_value=MAX_MACHINES, initial=4,
        error_messages={key: MACHINE_COUNT_MESSAGES[key] for key in ("min_value", "max_value", "invalid", "required")},
    )
    software = forms.ChoiceField(choices=Software.choices, initial=Software.NONE, widget=SoftwareSelect)
    # The picked offer's images are radios the page draws from the plan (clusters.views
    # .create_plan); whether the offer can start the one sent is the service's rule.
    image = forms.CharField(max_length=32, required=False)
    volume = forms.ModelChoiceField(queryset=Volume.objects.none(), required=False, empty_label="No volume")
    ssh_keys = forms.ModelMultipleChoiceField(
        queryset=SSHKey.objects.none(), required=False, widget=forms.CheckboxSelectMultiple, label="SSH keys"
    )

    def __init__(
        self, *args: Any, environment: Environment, machines: int | None = None, keep_offer: str | None = None,
        include_community: bool = False, **kwargs: Any,
    ) -> None:
        super().__init__(*args, **kwargs)
        # Only offers that can start this size now (the picked one always, so a form sent
        # back with an error still shows it, and a community offer picked on the Offers page);
        # community hosts only once opted in, as the Offers page asks.
        startable = Q(free_hosts__gte=machines or MIN_MACHINES)
        if not include_community:
            startable &= Q(community=False)
        if keep_offer and is_id(str(keep_offer)):
            startable |= Q(pk=int(keep_offer))
        offers = machine_types_with_availability().filter(startable)
        # Cheapest first, as `runcrate clusters offers` lists them, and community hosts
        # (independent operators) after the rest: a page opened without an offer starts on the
        # least a cluster costs on the platform's own machines, never the most.
        self.offers = offers.order_by("community", "price_per_machine_hour", "id")
        offer = cast(forms.ModelChoiceField, self.fields["offer"])
        offer.queryset = self.offers
        offer.label_from_instance = offer_label  # type: ignore[method-assign,assignment]
        cast(forms.ModelChoiceField, self.fields["volume"]).queryset = Volume.objects.filter(environment=environment)
        keys = SSHKey.objects.filter(workspace_id=environment.workspace_id)
        cast(forms.ModelChoiceField, self.fields["ssh_keys"]).queryset = keys
        # The workspace's only key is the one a customer means: start with it ticked.
        if not self.is_bound and "ssh_keys" not in self.initial:
            only = list(keys.values_list("pk", flat=True)[:2])
            if len(only) == 1:
                self.initial["ssh_keys"] = only


class VolumeForm(forms.Form):
    name = forms.CharField(max_length=100, help_text="e.g. datasets")
    size_gb = forms.IntegerField(min_value=1, max_value=100_000, initial=500, label="Size (GB)")
