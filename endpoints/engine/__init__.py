"""The run engine: what happens to a due endpoint, from the claim to its next run.

- ``claiming``: due slots taken atomically, each with a token and a short lease; the tick.
- ``dispatch``: starts each claim at its scheduled time, calls on the event loop, writes
  the runs that finish together, renews leases while it holds them.
- ``running``: a run recorded before its request (one per claim), finished after it.
- ``outcomes``: the next state of an endpoint after a run, written on the claim token.
- ``host_limits``: a tenant's requests per second per target host, one budget for the
  fleet; the dispatcher's runs wait for their start in it, a 429 pauses it.
- ``maintenance``: lost runs, retention, the end of signing grace periods.
- ``executor`` and ``guard``: the one HTTP executor and its SSRF guard.
- ``sql``: the statements of every run in plain SQL; ``metrics`` and ``logs``: what the
  engine records and how its lines carry their ids.

It imports the models and the pure rules (governor, schedules, validation, secrets) and
nothing above them: no admin, API, planner, alerts, Celery task or site module
(import-linter checks it). Celery tasks (``endpoints.tasks``) and ``runscheduler``
(``endpoints.embedded``) drive it.
"""
