"""The admin of every app, registered here (Django's autodiscovery imports this package):
``jobs`` (tenants, jobs, endpoints, runs, hints), ``analysis`` (planner sessions),
``alerts`` (channels, rules, deliveries), ``backfills`` and ``keys`` (API keys).

Admin URLs follow the models' app labels (``/admin/endpoints/endpoint/``), so they are
the same whichever app registers them.
"""

from console.admin import alerts, analysis, backfills, jobs, keys

__all__ = ["alerts", "analysis", "backfills", "jobs", "keys"]
