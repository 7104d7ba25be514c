"""The admin of every app, registered here (Django's autodiscovery imports this package):
``jobs`` (tenants, jobs, endpoints, runs, hints), ``analysis`` (planner sessions),
``alerts`` (channels, rules, deliveries) and ``keys`` (API keys).

Admin URLs follow the models' app labels (``/admin/endpoints/endpoint/``), so they are
the same whichever app registers them.
"""

from console.admin import alerts, analysis, jobs, keys

__all__ = ["alerts", "analysis", "jobs", "keys"]
