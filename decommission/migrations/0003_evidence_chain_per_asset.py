"""One evidence chain per asset, anchored in the request's chain (docs/decommission.md). Requests that exist
already keep their single request chain (``chain_layout`` 1, written by the AddField's default); new requests
get layout 2. The append-only trigger of 0002 stays on the events table (a constraint change does not touch
it); ``seq`` is now unique within a chain: the request's own (no asset) or one asset's."""

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('decommission', '0002_append_only_and_policy'),
    ]

    operations = [
        migrations.AlterModelOptions(
            name='evidenceevent',
            options={'ordering': ['request', 'id']},
        ),
        migrations.RemoveConstraint(
            model_name='evidenceevent',
            name='decom_event_seq_unique',
        ),
        migrations.AddField(  # existing requests: 1 (their events are one request-wide chain)
            model_name='decommissionrequest',
            name='chain_layout',
            field=models.PositiveSmallIntegerField(choices=[(1, 'One chain per request'), (2, "One chain per asset, anchored in the request's chain")], default=1, help_text='How its evidence is chained (requests created before migration 0003 keep one chain)'),
        ),
        migrations.AlterField(  # new requests: 2
            model_name='decommissionrequest',
            name='chain_layout',
            field=models.PositiveSmallIntegerField(choices=[(1, 'One chain per request'), (2, "One chain per asset, anchored in the request's chain")], default=2, help_text='How its evidence is chained (requests created before migration 0003 keep one chain)'),
        ),
        migrations.AddConstraint(
            model_name='evidenceevent',
            constraint=models.UniqueConstraint(condition=models.Q(('asset__isnull', True)), fields=('request', 'seq'), name='decom_event_request_seq_unique'),
        ),
        migrations.AddConstraint(
            model_name='evidenceevent',
            constraint=models.UniqueConstraint(condition=models.Q(('asset__isnull', False)), fields=('asset', 'seq'), name='decom_event_asset_seq_unique'),
        ),
        migrations.AddIndex(  # the open media of a request (asked each time a server finishes)
            model_name='medium',
            index=models.Index(condition=models.Q(('state__in', ['sanitized', 'recorded', 'destroyed']), _negated=True), fields=['request', 'id'], name='decom_medium_open_idx'),
        ),
    ]
