"""``POST /kafka/peer/{op}``: calls of the other brokers' Kafka gateways (cluster mode).

Broker to broker only (not in the OpenAPI spec): a transaction coordinator enlists this broker
in a transaction, ends its part, or asks it to write transactional consumer offsets; a
participant asks the coordinator which transaction is open. The bodies and answers are the Kafka
gateway's (``ingest_api/kafka/peer_messages.py``); this route only hands the bytes to the running
gateway (``Broker.kafka_peer``), so the protocol lives in one place.

* 503 ``kafka_unavailable`` when this broker runs no Kafka gateway (or it is stopping): the
  caller retries.
* 400 for an unknown ``op`` or a malformed body.
* With ``--auth-file`` only brokers may call it (their peer credential); any user, superusers
  included, gets 403 (docs/security.md#broker-identities).
"""

from __future__ import annotations

from fastapi import APIRouter, Request, Response

from broker.errors import BrokerError
from ingest_api.http.deps import BrokerDep, InternalOnly

router = APIRouter(prefix="/kafka/peer", tags=["kafka"], include_in_schema=False)


@router.post("/{op}", dependencies=[InternalOnly])
async def kafka_peer_call(op: str, request: Request, broker: BrokerDep) -> Response:
    service = broker.kafka_peer
    if service is None:
        raise BrokerError(503, "kafka_unavailable", "no Kafka gateway runs on this broker", retriable=True)
    answer: bytes = await service.handle(op, await request.body())
    return Response(answer, media_type="application/json")
