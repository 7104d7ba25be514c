"""The Redis broker transport, with one fix: a worker survives a Redis restart.

When a worker loses its broker connection, Celery closes the connection and kombu's
Redis QoS pushes the messages the worker holds (unacknowledged: running, or waiting
for their ETA) back onto their queues. After a Redis restart that restore runs over a
connection that is already gone and raises an AttributeError (the channel's client is
None), which Celery does not expect there: the worker dies with "Unrecoverable error"
and nothing executes until someone restarts it (kombu 5.7, celery 5.6/5.7; the same
family as celery/kombu#970 and #582).

The restore is only an optimisation for us: a claim's truth is its lease in the
database, so a message that is not restored costs at most a lease (short, and renewed
while a run is in flight), and one restored for a run that already started is a no-op
(DESIGN, "Redelivery is a no-op"). So a restore that cannot reach Redis is skipped and
logged; whatever Redis still holds comes back through its visibility timeout.
"""

from __future__ import annotations

import logging
from typing import Any

from kombu.transport import redis

logger = logging.getLogger("cronicorn.broker")


class QoS(redis.QoS):  # type: ignore[misc]
    def restore_unacked(self, client: Any = None) -> Any:
        try:
            return super().restore_unacked(client)
        except Exception as exc:  # any failure here killed the worker
            delivered = self._delivered
            held = len(delivered or ())
            if delivered is not None:
                delivered.clear()  # kombu asserts it is empty once marked restored
            logger.warning(
                "broker connection lost: %d message(s) held by this worker not restored "
                "(%s: %s); their claims are retried when their leases expire",
                held,
                type(exc).__name__,
                exc,
            )
            return None


class Channel(redis.Channel):  # type: ignore[misc]
    QoS = QoS


class Transport(redis.Transport):  # type: ignore[misc]
    Channel = Channel
