"""The clusters list's index: an environment's clusters newest first."""

from django.conf import settings
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('accounts', '0005_workspace_usage_rate'),
        ('clusters', '0008_network_test_nccl_rows'),
        ('offers', '0002_self_serve_is_ethernet'),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.AddIndex(
            model_name='cluster',
            index=models.Index(fields=['environment', 'created_at', 'id'], name='clusters_cl_environ_0ec2ae_idx'),
        ),
    ]
