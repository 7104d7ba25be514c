"""Fields in place of raw JSON on the admin's job and endpoint pages: the run policy as
grouped fields (a window editor among them), headers as name/value rows with a secret
toggle, and the body as a JSON editor that says what is wrong while it is typed.

Progressive enhancement: each widget is the text area it always was (same name, same
JSON, so the admin's form, ``endpoints.forms`` and the policy rules see what they always
saw), with an editor beside it that ``console/static/console/editors.js`` reveals and
keeps in step with it. Without the script only the text area shows; with it a person can
still switch to "Edit as JSON". Nothing is validated here: the messages are the one
path's (``endpoints.policies.policy_problems``), which the script places beside the field
they name, from the saved form and from each run preview.

The run policy's fields are described once, in ``POLICY_GROUPS``: a key another branch
adds to ``endpoints.policies`` is one ``PolicyKey`` line here (``tests/console`` checks
that every key of the policy has one).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django import forms
from django.template.loader import render_to_string
from django.utils.safestring import SafeString, mark_safe

from endpoints.policies import DEFAULT, KEYS, MAX_ALLOW, RunPolicy
from endpoints.secrets import MASK, SECRET_HEADER_WORDS
from endpoints.windows import DAYS
from endpoints.wording import duration_words

# What each kind of key is edited with (the script reads and writes each the same way):
# codes: a list typed as "200, 204, 3xx"; text: one line; scalar: a JSON scalar typed as
# text (ok, 3, true); count: a whole number; duration: a number and a unit, stored in ms;
# choice: one of ``choices``; flag: yes / no; windows: rows of days and from/to times;
# moment: a date, a time and a UTC offset; json: the key's JSON value typed as such (a
# list or an object with a shape of its own: dates, a calendar, follow-ups); overlap: a
# choice of wait, skip or allow, and for allow how many calls at once ({"allow": N}).
KINDS = (
    "codes", "text", "scalar", "count", "duration", "choice", "flag", "windows", "moment", "json",
    "overlap",
)  # fmt: skip
DURATION_UNITS = (("ms", 1), ("s", 1_000), ("min", 60_000), ("h", 3_600_000), ("d", 86_400_000))


@dataclass(frozen=True)
class PolicyKey:
    """One key of the run policy as a field: ``none`` labels the checkbox that stores
    null (a key whose null means something, e.g. "no cap", over the job's value)."""

    key: str
    label: str
    kind: str
    help: str = ""
    none: str = ""
    choices: tuple[str, ...] = ()
    unit: str = "s"  # the unit a duration is typed in when it has no value yet

    @property
    def default(self) -> str:
        """The default in words, shown where the field is empty."""
        return default_words(self, getattr(DEFAULT, self.key))


@dataclass(frozen=True)
class PolicyGroup:
    title: str
    keys: tuple[PolicyKey, ...]
    help: str = ""


POLICY_GROUPS = (
    PolicyGroup(
        "Success",
        (
            PolicyKey("expected_status", "Expected status", "codes",
                      "Codes or classes, separated by commas: 200, 204, 3xx."),
            PolicyKey("body_contains", "Body contains", "text",
                      "Text the response body must contain."),
            PolicyKey("body_json_path", "JSON path", "text",
                      "A dotted path into a JSON body: status, data.items.0.state."),
            PolicyKey("body_json_equals", "…equals", "scalar",
                      'The value found there: ok, 3, true ("3" in quotes for the text).'),
            PolicyKey("max_duration_ms", "Maximum duration", "duration",
                      "A slower answer fails.", none="no maximum", unit="ms"),
        ),
        "What counts as a successful run.",
    ),
    PolicyGroup(
        "Retries",
        (
            PolicyKey("retry_attempts", "Attempts per slot", "count",
                      "The first included: 3 = up to 2 retries. Only timeouts, connection "
                      "errors, 5xx and 429 are retried."),
            PolicyKey("retry_delay_ms", "Delay", "duration", "Before the first retry."),
            PolicyKey("retry_backoff", "Backoff", "choice",
                      "Exponential doubles the delay each attempt.",
                      choices=("fixed", "exponential")),
            PolicyKey("retry_max_delay_ms", "Longest delay", "duration", unit="min"),
        ),
        "Within one slot, after a failure trying again may fix.",
    ),
    PolicyGroup(
        "Backoff and breaker",
        (
            PolicyKey("backoff_cap_ms", "Backoff cap", "duration",
                      "Failures double the baseline interval up to this (never below it).",
                      none="no cap", unit="h"),
            PolicyKey("breaker_failed_slots", "Pause after failed slots", "count",
                      "Failed slots in a row before the endpoint pauses itself.", none="never"),
            PolicyKey("breaker_needs_person", "Pause on a failure a person must fix", "flag",
                      "401, 403, 404, 405, 410, 451 or a failed body check."),
            PolicyKey("breaker_cooldown_ms", "Cool-down", "duration",
                      "The breaker's pause; its end is the probe run.",
                      none="until a person resumes", unit="min"),
        ),
    ),
    PolicyGroup(
        "Timing",
        (
            PolicyKey("catchup_window_ms", "Catch-up window", "duration",
                      "A scheduled run found later than this is skipped.",
                      none="always run, however late", unit="min"),
            PolicyKey("jitter_ms", "Jitter", "duration",
                      "A fixed per-endpoint offset of up to this on cron slots."),
        ),
    ),
    PolicyGroup(
        "Windows",
        (
            PolicyKey("allowed", "Allowed hours", "windows",
                      "When given, runs only inside one of these."),
            PolicyKey("blackout", "Blackouts", "windows", "Never runs inside these."),
        ),
        "In the endpoint's time zone. No day ticked: every day. A window that ends before it "
        "starts runs over midnight (its days are the days it starts).",
    ),
    PolicyGroup(
        "Calendar",
        (
            PolicyKey("exclude_dates", "Closed dates", "json",
                      'Dates and ranges it never runs on: ["2026-12-24..2026-12-26", '
                      '"2027-01-01"].'),
            PolicyKey("holidays", "Public holidays", "json",
                      'Never on the public holidays of: {"country": "DE", "subdivision": "BY"}.'),
        ),
        "Local dates in the endpoint's time zone; a run on a closed day moves to the next "
        "open one.",
    ),
    PolicyGroup(
        "Active period",
        (
            PolicyKey("active_from", "From", "moment", "The first run is at or after this."),
            PolicyKey("active_until", "Until", "moment", "No run after this."),
        ),
    ),
    PolicyGroup(
        "One-off",
        (
            PolicyKey("run_once_at", "Run once at", "moment",
                      "Runs once then (its schedule unused), then never again."),
        ),
    ),
    PolicyGroup(
        "Overlap",
        (
            PolicyKey("overlap", "A slot due while a call is in flight", "overlap",
                      "wait: runs late, after the call; skip: recorded skipped, not run; "
                      f"allow: runs on time beside it, up to 1 to {MAX_ALLOW} calls at once "
                      "(a slot due while that many are in flight waits for one to end; no "
                      "retries within a slot then).",
                      choices=("wait", "skip", "allow")),
        ),
        "Each slot runs at most once whichever you choose.",
    ),
    PolicyGroup(
        "Follow-ups",
        (
            PolicyKey("follow_ups", "Then run", "json",
                      'Endpoints of this tenant to run after a run: [{"endpoint": "job/name", '
                      '"on": "success"}] (on: success, failure or always).'),
        ),
    ),
)  # fmt: skip
POLICY_KEYS = {key.key: key for group in POLICY_GROUPS for key in group.keys}
# A key of the policy without a line above is kept as it is and listed by the editor as
# one to edit as JSON (tests/console/test_admin_editors.py says which).
UNEDITED_KEYS = tuple(key for key in KEYS if key not in POLICY_KEYS)


def default_words(key: PolicyKey, value: Any) -> str:
    if value is None or value == () or value == ("", ""):
        return key.none or "none"
    if key.kind == "duration":
        return duration_words(value) if value else "none"
    if key.kind == "codes":
        return ", ".join(str(code) for code in value)
    if key.kind == "flag":
        return "yes" if value else "no"
    return str(value) if value != "" else "none"


def policy_words(policy: RunPolicy, zone: str = "") -> list[str]:
    """The keys of a resolved policy that differ from the defaults, one line each in the
    fields' own labels: what the saved policy does, shown above its editor."""
    if policy.problem:
        return [f"The saved policy cannot be used ({policy.problem}); the defaults apply."]
    lines = []
    for key in POLICY_KEYS.values():
        value = getattr(policy, key.key)
        if value == getattr(DEFAULT, key.key):
            continue
        if key.kind == "windows":
            where = f" ({zone})" if zone else ""
            words = "; ".join(window.words() for window in value) + where if value else "none"
        elif key.kind == "moment":
            words = value.isoformat().replace("+00:00", " UTC")
        elif key.key == "holidays":
            words = "-".join(part for part in value if part)
        elif key.key == "exclude_dates":
            words = ", ".join(str(a) if a == b else f"{a}..{b}" for a, b in value)
        elif key.key == "follow_ups":
            words = ", ".join(f"{follow.endpoint} on {follow.on}" for follow in value)
        elif key.key == "overlap" and value == "allow":
            words = f"allow, up to {policy.allow} calls at once"
        else:
            words = default_words(key, value)
        lines.append(f"{key.label}: {words}")
    return lines


class EditorTextarea(forms.Textarea):
    """A text area holding JSON and, beside it, an editor of it (hidden until the
    script starts it). Rendered with the project's templates (``templates/console/``)."""

    editor_template = "console/widgets/json_editor.html"
    editor = ""

    class Media:
        js = ("console/editors.js",)
        css = {"all": ("console/editors.css",)}

    def __init__(self, attrs: dict[str, Any] | None = None) -> None:
        super().__init__({"rows": 3, "cols": 70, "class": "cc-code", **(attrs or {})})

    def editor_context(self) -> dict[str, Any]:
        return {}

    def render(
        self, name: str, value: Any, attrs: dict[str, Any] | None = None, renderer: Any = None
    ) -> SafeString:
        textarea = super().render(name, value, attrs, renderer)
        context = {
            "textarea": textarea,
            "editor": self.editor,
            "id": (attrs or {}).get("id") or self.attrs.get("id") or f"id_{name}",
            "name": name,
            **self.editor_context(),
        }
        # The project's templates (templates/console/), not the form renderer's.
        return mark_safe(render_to_string(self.editor_template, context))  # noqa: S308


class RunPolicyWidget(EditorTextarea):
    """The run policy: ``POLICY_GROUPS`` as fields; ``in_effect`` (lines the form sets
    from the saved policy, said where from by ``in_effect_label``) shown above them."""

    editor_template = "console/widgets/run_policy.html"
    editor = "policy"
    in_effect: tuple[str, ...] = ()
    in_effect_label = ""

    def __init__(self, attrs: dict[str, Any] | None = None, *, under: str = "") -> None:
        super().__init__(attrs)
        self.under = under  # whose keys apply where this one sets none ("the job's")

    def editor_context(self) -> dict[str, Any]:
        return {
            "groups": POLICY_GROUPS,
            "days": DAYS,
            "units": DURATION_UNITS,
            "in_effect": self.in_effect,
            "in_effect_label": self.in_effect_label,
            "under": self.under,
        }


class HeadersWidget(EditorTextarea):
    """Headers as name/value rows with a secret toggle; the toggles are written to the
    ``secret_header_names`` text area beside it. A secret value shows as the mask, and a
    mask left as it is keeps the stored value (``EndpointForm.clean_headers``)."""

    editor_template = "console/widgets/headers.html"
    editor = "headers"

    def editor_context(self) -> dict[str, Any]:
        return {"mask": MASK, "secret_words": ", ".join(SECRET_HEADER_WORDS)}


class JSONBodyWidget(EditorTextarea):
    """The body as JSON, checked as it is typed (the save checks it again)."""

    editor = "json"

    def __init__(self, attrs: dict[str, Any] | None = None) -> None:
        super().__init__({"rows": 5, **(attrs or {})})
