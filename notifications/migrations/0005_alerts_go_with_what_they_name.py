"""What the notify cycle writes goes with the endpoint, job, tenant or channel it names,
in the database (PostgreSQL): alert states, alerts, their deliveries and attempts made
while one of those is being deleted no longer fail the delete (why in
``endpoints/migrations/_cascade``)."""

from django.db import migrations

from endpoints.migrations._cascade import cascading

KEYS = [
    ("notifications_alertstate", "endpoint_id", "endpoints_endpoint"),
    ("notifications_alert", "endpoint_id", "endpoints_endpoint"),
    ("notifications_alert", "job_id", "endpoints_job"),
    ("notifications_alert", "tenant_id", "endpoints_tenant"),
    ("notifications_alert", "channel_id", "notifications_channel"),
    ("notifications_delivery", "channel_id", "notifications_channel"),
    ("notifications_delivery_alerts", "alert_id", "notifications_alert"),
    ("notifications_delivery_alerts", "delivery_id", "notifications_delivery"),
    ("notifications_deliveryattempt", "delivery_id", "notifications_delivery"),
]


class Migration(migrations.Migration):
    dependencies = [
        ("notifications", "0004_breaker_told"),
    ]

    operations = [cascading(KEYS)]
