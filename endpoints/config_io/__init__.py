"""Configuration as code: tenants, jobs and endpoints in a YAML or JSON file.

The format (``export_config`` writes it, ``plan_import`` reads it; every key is shown)::

    version: 1
    tenants:
      - name: Acme
        members: [alice]              # usernames; omit to leave members as they are
        max_endpoints: 100            # tenant settings: omit to leave them as they are
        min_interval: 1s
        monthly_token_budget: 500000
        host_rate_limits: {api.partner.com: 20}   # requests per second per target host
        hmac_secret: ${CRONICORN_SECRET_ACME_HMAC}
        channels:                     # alert channels (the notifications app)
          - name: oncall
            kind: webhook             # email | webhook | apprise
            target: ${CRONICORN_SECRET_ACME_ONCALL_URL}
            enabled: true
          - name: pager
            kind: apprise
            target: ${CRONICORN_SECRET_ACME_PAGER}
            escalation_only: true     # gets escalations only, not every alert
        jobs:
          - name: billing
            description: Nightly billing and its health checks.
            max_concurrent: 1
            run_policy:               # the job's run policy: defaults of its endpoints
              retry_attempts: 3
              breaker_failed_slots: 5
              blackout: [{start: "02:00", end: "04:00", days: [sat, sun]}]
              exclude_dates: ["2026-12-24..2026-12-26", "2027-01-01"]  # local dates
              holidays: {country: DE, subdivision: BY}  # public holidays: never then
            alerts:                   # the job's alert rule (the notifications app)
              enabled: true
              after_failures: 2
              on_recovery: true
              on_pause: true
              stale_factor: 3
              quiet_from: "22:00"     # UTC; give both ends or neither
              quiet_until: "07:00"
              remind_every_minutes: 60    # while failing and not acknowledged; 0: never
              escalate_after_minutes: 30  # then once to escalate_to; 0: never
              escalate_to: pager          # a channel of this tenant, by name
            endpoints:
              - name: queue
                url: https://billing.example.com/queue
                method: GET
                headers: {Authorization: "${CRONICORN_SECRET_BILLING_TOKEN}"}
                secret_headers: [Authorization]
                body: {"probe": true}
                timeout: 10s
                max_response_size_kb: 100
                baseline_interval: 5m         # or baseline_cron + timezone:
                # baseline_cron: "*/5 * * * *"
                # timezone: Europe/Berlin
                min_interval: 30s
                max_interval: 1h
                description: Tighten while the queue is deep.
                run_policy: {expected_status: [200], catchup_window_ms: 60000}  # key by key
                alerts: {on_pause: false}     # this endpoint's override of the job's rule

A run policy's keys (``expected_status``, ``retry_attempts``, ``breaker_cooldown_ms``,
windows, ``active_from``/``active_until``, ``run_once_at`` ...) are listed in
``endpoints/policies.py`` and the README's "Run policies"; an endpoint's overrides its
job's key by key. ``follow_ups: [{endpoint: reports/build, on: success}]`` names endpoints
of the same tenant as ``job/endpoint``, declared anywhere in the file or already there;
a cycle is refused.

Jobs and endpoints are declarative: a key left out takes its default, so the file is the
whole definition. Runtime state (next run, hints, pauses, failures, job status) is never
touched. Durations accept ``90s``/``5m``/``1h30m``/``1d`` or plain milliseconds.

Secrets: ``${CRONICORN_SECRET_NAME}`` in a header value, the URL, ``hmac_secret`` or a
channel's ``target`` is replaced by that environment variable (unset is an error). Only
names starting with ``CRONICORN_SECRET_`` are read: any other ``${...}`` is refused, so a
file cannot send the server's own settings (``DJANGO_SECRET_KEY``, the LLM key) to a URL
of its choice. Export never writes a secret: every secret header (listed in
``secret_headers`` in any letter case, or named like a credential), a URL's password, the
HMAC secret and every channel target are written as a ``${CRONICORN_SECRET_...}``
reference named after tenant, job, endpoint and header (or channel), which must be set in
the environment when the file is imported again. Channels, like jobs, are declarative;
ones the file leaves out are kept. An ``alerts`` rule is declarative too (its keys left
out take their defaults: after 3 failures, on recovery, on pause, no reminders, no
escalation); a job or endpoint without ``alerts`` keeps the rule it has.

Import is all or nothing: every entry is checked (schema, then the model's ``full_clean``,
the single home of the rules) before anything is written, every problem is reported with
its location (``tenants[0].jobs[2].endpoints[0].baseline_cron: ...``), and the writes
happen in one transaction.
"""
