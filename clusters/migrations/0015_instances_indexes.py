"""The workspace's instances: a page walks its clusters newest first, the count reads one index
of its live nodes (each node carries its cluster's workspace)."""

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('accounts', '0005_workspace_usage_rate'),
        ('clusters', '0014_node_log_written'),
    ]

    operations = [
        migrations.AddIndex(
            model_name='cluster',
            index=models.Index(fields=['workspace', '-created_at', 'id'], name='cluster_workspace_newest'),
        ),
        migrations.AddField(
            model_name='node',
            name='workspace',
            field=models.ForeignKey(db_index=False, editable=False, null=True, on_delete=django.db.models.deletion.PROTECT,
                                    related_name='+', to='accounts.workspace'),
        ),
        migrations.RunSQL(
            # A correlated subquery: the same SQL in PostgreSQL and SQLite (`make run`).
            "UPDATE clusters_node SET workspace_id = "
            "(SELECT c.workspace_id FROM clusters_cluster c WHERE c.id = clusters_node.cluster_id)",
            migrations.RunSQL.noop,
        ),
        migrations.AlterField(
            model_name='node',
            name='workspace',
            field=models.ForeignKey(db_index=False, editable=False, on_delete=django.db.models.deletion.PROTECT,
                                    related_name='+', to='accounts.workspace'),
        ),
        migrations.AddIndex(
            model_name='node',
            index=models.Index(condition=models.Q(('released_at__isnull', True)), fields=['workspace'],
                               name='node_live_by_workspace'),
        ),
    ]
