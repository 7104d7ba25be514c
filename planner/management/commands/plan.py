"""``manage.py plan ENDPOINT [--backend rules|llm]``: analyse one endpoint now."""

from __future__ import annotations

import json
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from endpoints.management.commands._shared import iso, to_json
from endpoints.models import Endpoint
from planner.analysis import AnalysisBusy, analyze_endpoint
from planner.models import AnalysisSession, Backend, SessionStatus


class Command(BaseCommand):
    help = "Run one planner analysis of an endpoint now and print the session."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("endpoint", help="job/endpoint or the endpoint's numeric id")
        parser.add_argument(
            "--backend",
            choices=Backend.values,
            help="Planner backend (default: CRONICORN_PLANNER_BACKEND).",
        )
        parser.add_argument(
            "--json",
            action="store_true",
            help="The session as JSON, for scripts (a failed analysis still exits non-zero).",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            endpoint = Endpoint.objects.live().by_ref(options["endpoint"])
        except Endpoint.DoesNotExist as exc:
            raise CommandError(f"{exc} List them with `manage.py endpoints`.") from None
        try:
            session = analyze_endpoint(endpoint, backend=options["backend"])
        except AnalysisBusy as exc:
            raise CommandError(str(exc)) from None
        show = as_json if options["json"] else format_session
        self.stdout.write(show(session))
        if session.status == SessionStatus.FAILED:
            raise CommandError(f"The analysis failed: {session.error}")


def as_json(session: AnalysisSession) -> str:
    return to_json(
        {
            "id": session.pk,
            "endpoint": session.endpoint.ref,
            "endpoint_id": session.endpoint_id,
            "backend": session.backend,
            "model": session.model,
            "status": session.status,
            "started_at": iso(session.started_at),
            "finished_at": iso(session.finished_at),
            "duration_ms": session.duration_ms,
            "prompt_tokens": session.prompt_tokens,
            "completion_tokens": session.completion_tokens,
            "total_tokens": session.total_tokens,
            "note": session.note,
            "error": session.error,
            "reasoning": session.reasoning,
            "actions_taken": session.actions_taken,
            "confidence": session.confidence,
            "next_analysis_at": iso(session.next_analysis_at),
            "tool_calls": session.tool_calls,
        }
    )


def format_session(session: AnalysisSession) -> str:
    backend = session.backend + (f" ({session.model})" if session.model else "")
    lines = [
        f"Analysis #{session.pk} of {session.endpoint}: {session.status}",
        f"  backend:        {backend}",
        f"  started:        {session.started_at.isoformat()} ({session.duration_ms} ms)",
        f"  tokens:         {session.total_tokens} "
        f"(prompt {session.prompt_tokens}, completion {session.completion_tokens})",
    ]
    if session.note:
        lines.append(f"  note:           {session.note}")
    if session.error:
        lines.append(f"  error:          {session.error}")
    if session.reasoning:
        lines.append(f"  reasoning:      {session.reasoning}")
    lines.append(f"  actions:        {', '.join(session.actions_taken) or 'none'}")
    if session.confidence is not None:
        lines.append(f"  confidence:     {session.confidence:.1f}")
    next_at = session.next_analysis_at.isoformat() if session.next_analysis_at else "-"
    lines.append(f"  next analysis:  {next_at}")
    lines.append(f"  tool calls ({len(session.tool_calls)}):")
    for call in session.tool_calls:
        outcome = f"refused: {call['error']}" if "error" in call else "ok"
        arguments = json.dumps(call.get("arguments"), default=str)[:200]
        lines.append(f"    - {call['tool']}({arguments}) -> {outcome}")
    return "\n".join(lines)
