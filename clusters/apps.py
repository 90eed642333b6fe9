from django.apps import AppConfig


class ClustersConfig(AppConfig):
    name = "clusters"
    verbose_name = "Clusters"

    def ready(self) -> None:
        from accounts.signals import membership_ended
        from clusters import (
            emails,  # noqa: F401  (registers its email context)
            notices,
            receivers,
        )

        membership_ended.connect(receivers.close_sockets_of_ended_membership, dispatch_uid="clusters.close_sockets")
        notices.pass_wanted.connect(receivers.queue_pass, dispatch_uid="clusters.queue_pass")
        notices.network_test_wanted.connect(receivers.queue_network_test, dispatch_uid="clusters.queue_network_test")
        notices.volume_sync_wanted.connect(receivers.queue_volume_sync, dispatch_uid="clusters.queue_volume_sync")
