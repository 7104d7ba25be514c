"""Follow-ups when saved (run policy ``follow_ups``): every endpoint named is a live
endpoint of the same tenant, and no chain of follow-ups leads back to where it started
(A -> B -> A, or through a job's policy, whose follow-ups are every endpoint's of the
job). The one check every interface reaches: the forms of endpoints and jobs (admin,
API, MCP) and the import, which names what it is about to write.

The graph is the tenant's live endpoints, each with its effective follow-ups (its own
key, else its job's), with the edited rows as they would be saved. Saved graphs have no
cycle, so a new one passes through an edited row, and the search starts from those.
What runs a follow-up is the engine's (``endpoints.engine.follow_ups``).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from django.db.models import Q

from endpoints.models import Endpoint, Job


@dataclass
class Node:
    pk: int | None
    job_pk: int | None
    ref: str  # job/name
    own: Any  # the endpoint's run policy
    job_policy: Any
    edited: bool = False  # a cycle through it is new
    named_here: bool = False  # its names are checked (an endpoint edited, not its job)
    targets: list[str] = field(default_factory=list)


def rules_of(policy: Any) -> list[str] | None:
    """The endpoint names of a policy's ``follow_ups`` (None: the key is not set)."""
    if not isinstance(policy, dict) or "follow_ups" not in policy:
        return None
    rules = policy["follow_ups"] if isinstance(policy["follow_ups"], list) else []
    return [rule["endpoint"] for rule in rules if isinstance(rule, dict) and "endpoint" in rule]


def mentions_follow_ups(*policies: Any) -> bool:
    return any(isinstance(policy, dict) and policy.get("follow_ups") for policy in policies)


def follow_up_problems(
    tenant_id: int | None,
    *,
    endpoints: Iterable[Endpoint] = (),
    jobs: Iterable[Job] = (),
) -> list[str]:
    """Why the edited ``endpoints`` and ``jobs`` (unsaved values, in ``tenant_id``) may
    not be saved as they are, in words; [] when their follow-ups are sound."""
    endpoints, jobs = list(endpoints), list(jobs)
    nodes = _graph(tenant_id, endpoints, jobs)
    by_ref = {node.ref: node for node in nodes}
    named: set[str] = {ref for job in jobs for ref in rules_of(job.run_policy) or []}
    for node in nodes:
        policy_rules = rules_of(node.own)
        node.targets = policy_rules if policy_rules is not None else rules_of(node.job_policy) or []
        if node.named_here:
            named.update(node.targets)
    problems = []
    for ref in sorted(named):
        if ref not in by_ref:
            problems.append(
                f"follow_ups: {ref!r} is no live endpoint of this tenant (named "
                f"job/endpoint; other tenants' endpoints cannot be named); correct the name."
            )
    if problems:
        return problems
    for node in nodes:
        if node.edited and (cycle := _cycle_from(node, by_ref)):
            return [
                "follow_ups: a cycle: " + " -> ".join(cycle) + "; each run would start the "
                "next and the last the first again, without end. Remove one of these follow-ups."
            ]
    return []


def _graph(tenant_id: int | None, endpoints: list[Endpoint], jobs: list[Job]) -> list[Node]:
    edited_jobs = {job.pk: job for job in jobs if job.pk is not None}
    edited_endpoints = {endpoint.pk for endpoint in endpoints if endpoint.pk is not None}
    nodes: list[Node] = []
    if tenant_id is not None:
        rows = Endpoint.objects.live().filter(job__tenant_id=tenant_id)
        with_rules = set(
            rows.filter(
                Q(run_policy__has_key="follow_ups") | Q(job__run_policy__has_key="follow_ups")
            ).values_list("pk", flat=True)
        )
        policies = dict(rows.filter(pk__in=with_rules).values_list("pk", "run_policy"))
        job_policies = dict(
            Job.objects.filter(tenant_id=tenant_id, run_policy__has_key="follow_ups").values_list(
                "pk", "run_policy"
            )
        )
        for pk, job_pk, job_name, name in rows.values_list("pk", "job_id", "job__name", "name"):
            if pk in edited_endpoints:
                continue
            job = edited_jobs.get(job_pk)
            nodes.append(
                Node(
                    pk,
                    job_pk,
                    f"{job.name if job else job_name}/{name}",
                    policies.get(pk),
                    job.run_policy if job else job_policies.get(job_pk),
                    edited=job is not None,
                )
            )
    for endpoint in endpoints:
        job = edited_jobs.get(endpoint.job_id) or endpoint.job
        nodes.append(
            Node(
                endpoint.pk,
                endpoint.job_id,
                f"{job.name}/{endpoint.name}",
                endpoint.run_policy,
                job.run_policy,
                edited=True,
                named_here=True,
            )
        )
    return nodes


def _cycle_from(start: Node, by_ref: dict[str, Node]) -> list[str]:
    """The refs of a cycle reachable from ``start`` that passes through it, or []: a
    depth-first search without recursion, each node visited once."""
    path = [start.ref]
    stack = [iter(start.targets)]
    seen = {start.ref}
    while stack:
        ref = next(stack[-1], None)
        if ref is None:
            stack.pop()
            path.pop()
            continue
        if ref == start.ref:
            return [*path, ref]
        node = by_ref.get(ref)
        if node is None or ref in seen:
            continue
        seen.add(ref)
        path.append(ref)
        stack.append(iter(node.targets))
    return []
