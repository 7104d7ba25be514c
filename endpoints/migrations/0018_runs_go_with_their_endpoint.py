"""A run's endpoint key deletes the run with its endpoint in the database (PostgreSQL).

Django deletes an endpoint's runs itself, from the list it collected first; on a long
history that takes a while, and the scheduler keeps starting runs meanwhile (the claim
was taken before the delete began). Such a run, missing from the list, made the delete
of its endpoint fail at commit (the key, NO ACTION, still referenced): a 500 and nothing
deleted, for a tenant, a job or an endpoint alike. With ``ON DELETE CASCADE`` the
database deletes it with the endpoint row; a run inserted after that row is gone waits
for the delete and is refused (the engine gives its claim back). Django's own cascade
still runs first; the key stays deferred (the check of an insert is unchanged).

The key is made again, so PostgreSQL checks every run against it (PostgreSQL 15 has no
NOT VALID key on a partitioned table), holding off run writes meanwhile: on a large
history run it in a maintenance window, as 0017.

SQLite is left as it is (changing a key there rebuilds the table): its transactions are
IMMEDIATE (settings), so no run is recorded while a delete's transaction is open, and
``operations.delete_for_good`` opens it before Django collects (``Model.delete`` would
collect first).
"""

from django.db import migrations

from endpoints.migrations._cascade import cascading

KEYS = [("endpoints_run", "endpoint_id", "endpoints_endpoint")]


class Migration(migrations.Migration):
    dependencies = [
        ("endpoints", "0017_run_partitions"),
    ]

    operations = [cascading(KEYS)]
