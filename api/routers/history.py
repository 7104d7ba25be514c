"""Hint history and the planner's analysis sessions of an endpoint."""

from __future__ import annotations

from ninja import Router

from api.auth import Principal, get_scoped
from api.operations import operation
from api.pagination import DEFAULT_LIMIT, Page, keyset_page
from api.routers.endpoints import scoped_endpoint
from api.schemas import AnalyzeIn, HintOut, HintPage, SessionDetail, SessionPage
from endpoints.models import HintHistory
from endpoints.operations import OperationRefused
from planner.analysis import AnalysisBusy, analyze_endpoint
from planner.models import AnalysisSession

router = Router(tags=["history"])


@operation(router, "get", "/endpoints/{endpoint_id}/hints", name="list_hints", response=HintPage)
def list_hints(
    principal: Principal, endpoint_id: int, cursor: str | None = None, limit: int = DEFAULT_LIMIT
) -> Page:
    """An endpoint's hint history (hints, pauses, resumes, clears), newest first."""
    endpoint = scoped_endpoint(principal, endpoint_id)
    return keyset_page(
        HintHistory.objects.filter(endpoint_id=endpoint.pk),
        key="created_at",
        cursor=cursor,
        limit=limit,
        descending=True,
    )


@operation(router, "get", "/hints/{hint_id}", name="get_hint", response=HintOut)
def get_hint(principal: Principal, hint_id: int) -> HintHistory:
    """One entry of hint history."""
    return get_scoped(principal, HintHistory.objects.all(), "endpoint__job__tenant", hint_id)


@operation(
    router, "get", "/endpoints/{endpoint_id}/sessions", name="list_sessions", response=SessionPage
)
def list_sessions(
    principal: Principal, endpoint_id: int, cursor: str | None = None, limit: int = DEFAULT_LIMIT
) -> Page:
    """The planner's analysis sessions of an endpoint, newest first."""
    endpoint = scoped_endpoint(principal, endpoint_id)
    return keyset_page(
        AnalysisSession.objects.filter(endpoint_id=endpoint.pk),
        key="started_at",
        cursor=cursor,
        limit=limit,
        descending=True,
    )


@operation(router, "get", "/sessions/{session_id}", name="get_session", response=SessionDetail)
def get_session(principal: Principal, session_id: int) -> AnalysisSession:
    """One analysis session: its reasoning, tool calls and actions."""
    return get_scoped(principal, AnalysisSession.objects.all(), "endpoint__job__tenant", session_id)


@operation(
    router,
    "post",
    "/endpoints/{endpoint_id}/analyze",
    name="analyze_endpoint",
    response=SessionDetail,
)
def analyze_endpoint_now(
    principal: Principal, endpoint_id: int, payload: AnalyzeIn
) -> AnalysisSession:
    """Run the planner on one endpoint now and return its analysis session.

    The planner reads the recent runs and may set a hint, pause or clear hints, as it does
    on its own every few minutes; the session records its reasoning, tool calls and
    actions. With the llm backend this waits for the model (up to its time budget).
    """
    endpoint = scoped_endpoint(principal, endpoint_id)
    if endpoint.archived_at is not None:
        raise OperationRefused(f"{endpoint.ref} is archived; archived endpoints are not analysed.")
    try:
        return analyze_endpoint(endpoint, backend=payload.backend)
    except AnalysisBusy as exc:
        raise OperationRefused(str(exc)) from None
