"""Hint history and the planner's analysis sessions of an endpoint."""

from __future__ import annotations

from ninja import Router

from api.auth import Principal, get_scoped
from api.operations import operation
from api.pagination import DEFAULT_LIMIT, keyset_page
from api.routers.endpoints import scoped_endpoint
from api.schemas import HintOut, HintPage, SessionDetail, SessionOut, SessionPage
from endpoints.models import HintHistory
from planner.models import AnalysisSession

router = Router(tags=["history"])


@operation(router, "get", "/endpoints/{endpoint_id}/hints", name="list_hints", response=HintPage)
def list_hints(
    principal: Principal, endpoint_id: int, cursor: str | None = None, limit: int = DEFAULT_LIMIT
) -> HintPage:
    """An endpoint's hint history (hints, pauses, resumes, clears), newest first."""
    endpoint = scoped_endpoint(principal, endpoint_id)
    items, next_cursor = keyset_page(
        HintHistory.objects.filter(endpoint_id=endpoint.pk),
        key="created_at",
        cursor=cursor,
        limit=limit,
        descending=True,
    )
    return HintPage(items=[HintOut.model_validate(h) for h in items], next_cursor=next_cursor)


@operation(router, "get", "/hints/{hint_id}", name="get_hint", response=HintOut)
def get_hint(principal: Principal, hint_id: int) -> HintHistory:
    """One entry of hint history."""
    return get_scoped(principal, HintHistory.objects.all(), "endpoint__job__tenant", hint_id)


@operation(
    router, "get", "/endpoints/{endpoint_id}/sessions", name="list_sessions", response=SessionPage
)
def list_sessions(
    principal: Principal, endpoint_id: int, cursor: str | None = None, limit: int = DEFAULT_LIMIT
) -> SessionPage:
    """The planner's analysis sessions of an endpoint, newest first."""
    endpoint = scoped_endpoint(principal, endpoint_id)
    items, next_cursor = keyset_page(
        AnalysisSession.objects.filter(endpoint_id=endpoint.pk),
        key="started_at",
        cursor=cursor,
        limit=limit,
        descending=True,
    )
    return SessionPage(items=[SessionOut.model_validate(s) for s in items], next_cursor=next_cursor)


@operation(router, "get", "/sessions/{session_id}", name="get_session", response=SessionDetail)
def get_session(principal: Principal, session_id: int) -> AnalysisSession:
    """One analysis session: its reasoning, tool calls and actions."""
    return get_scoped(principal, AnalysisSession.objects.all(), "endpoint__job__tenant", session_id)
