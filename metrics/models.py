"""Bounded series of node metrics (docs/metrics.md): a `fine` sample per node per collection
round, kept METRICS_FINE_RETENTION_SECONDS (an hour), and a `coarse` one per node per
METRICS_COARSE_STEP_SECONDS (5 min, the average of its fine samples), kept
METRICS_COARSE_RETENTION_SECONDS (7 days); then dropped."""

from __future__ import annotations

from django.db import models


class Resolution(models.TextChoices):
    FINE = "fine", "Fine (each round)"
    COARSE = "coarse", "Coarse (averaged)"


class NodeSample(models.Model):
    cluster = models.ForeignKey("clusters.Cluster", on_delete=models.CASCADE, related_name="+")
    node = models.ForeignKey("clusters.Node", on_delete=models.CASCADE, related_name="metric_samples")
    resolution = models.CharField(max_length=6, choices=Resolution.choices)
    at = models.DateTimeField()
    cpu_percent = models.FloatField(null=True)
    memory_used_bytes = models.BigIntegerField(null=True)
    memory_total_bytes = models.BigIntegerField(null=True)
    root_used_bytes = models.BigIntegerField(null=True)
    root_total_bytes = models.BigIntegerField(null=True)
    shared_used_bytes = models.BigIntegerField(null=True)
    shared_total_bytes = models.BigIntegerField(null=True)
    net_rx_bps = models.FloatField(null=True, help_text="Bits per second received on wg0.")
    net_tx_bps = models.FloatField(null=True, help_text="Bits per second sent on wg0.")
    load1 = models.FloatField(null=True)
    gpu_count = models.PositiveSmallIntegerField(default=0)
    gpu_percent = models.FloatField(null=True, help_text="Mean utilisation over the node's GPUs.")
    gpu_memory_used_bytes = models.BigIntegerField(null=True)
    gpu_memory_total_bytes = models.BigIntegerField(null=True)
    gpu_temperature_c = models.FloatField(null=True, help_text="The hottest GPU.")
    gpu_errors = models.IntegerField(null=True, help_text="Uncorrected ECC errors, summed over the GPUs.")
    # Fine rows only: the raw counters the next round's rates are computed from.
    counters = models.JSONField(default=dict, blank=True)

    class Meta:
        indexes = [
            models.Index(fields=["cluster", "resolution", "at"]),
            models.Index(fields=["resolution", "at"]),
        ]
        constraints = [
            models.UniqueConstraint(fields=["node", "resolution", "at"], name="one_sample_per_node_and_moment"),
        ]

    def __str__(self) -> str:
        return f"{self.node_id} {self.resolution} {self.at:%H:%M:%S}"

    @property
    def memory_percent(self) -> float | None:
        if not self.memory_total_bytes or self.memory_used_bytes is None:
            return None
        return 100.0 * self.memory_used_bytes / self.memory_total_bytes

    @property
    def root_percent(self) -> float | None:
        if not self.root_total_bytes or self.root_used_bytes is None:
            return None
        return 100.0 * self.root_used_bytes / self.root_total_bytes

    @property
    def shared_percent(self) -> float | None:
        if not self.shared_total_bytes or self.shared_used_bytes is None:
            return None
        return 100.0 * self.shared_used_bytes / self.shared_total_bytes


class IdleState(models.Model):
    """Since when a ready cluster's machines have all been idle (None: busy now), and when
    its owner was last told (the notice repeats at most once a day while it stays idle)."""

    cluster = models.OneToOneField("clusters.Cluster", on_delete=models.CASCADE, related_name="idle_state")
    idle_since = models.DateTimeField(null=True, blank=True)
    last_notice_at = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return f"{self.cluster_id} idle since {self.idle_since}"
