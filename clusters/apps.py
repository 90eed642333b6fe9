from django.apps import AppConfig


class ClustersConfig(AppConfig):
    name = "clusters"
    verbose_name = "Clusters"

    def ready(self) -> None:
        from accounts.signals import membership_ended
        from clusters.receivers import close_sockets_of_ended_membership

        membership_ended.connect(close_sockets_of_ended_membership, dispatch_uid="clusters.close_sockets")
