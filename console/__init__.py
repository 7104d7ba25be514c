"""The management UI: the Django admin for every app's models, the dashboard and its
charts, the Prometheus exposition and ``scheduler_status``. It has no models; it reads
and changes the others' only through their operations and forms (``endpoints.operations``,
``endpoints.forms``, ``notifications.forms``), as the API does. Nothing imports it but
the site."""
