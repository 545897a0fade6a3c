"""Runs in the official client's venv: a transactional Producer against the gRPC door.

argv[1]: JSON ``{"endpoint", "topic", "rollback"?}``. Sends a half message and commits it (prints
``{"committed": message_id, "transaction_id"}``); with ``rollback`` sends another and rolls it
back (prints ``{"rolled_back": message_id}``); then sends a second half and leaves it open
(prints ``{"orphan": message_id, "transaction_id"}``) and waits up to 20 s for the server's
check-back; its checker answers COMMIT, which the client sends as EndTransaction from
SOURCE_SERVER_CHECK. Prints ``{"checked": [message ids], "topics": [topics]}`` and exits.
"""

import json
import sys
import threading

from rocketmq import (
    ClientConfiguration,
    Credentials,
    Message,
    Producer,
    TransactionChecker,
    TransactionResolution,
)


class Checker(TransactionChecker):
    def __init__(self) -> None:
        self.checked = threading.Event()
        self.seen: list[tuple[str, str]] = []

    def check(self, message: Message) -> TransactionResolution:
        self.seen.append((message.message_id, message.topic))
        self.checked.set()
        return TransactionResolution.COMMIT


def half(topic: str, body: bytes) -> Message:
    message = Message()
    message.topic = topic
    message.body = body
    return message


def main() -> None:
    argument = json.loads(sys.argv[1])
    topic = argument["topic"]
    checker = Checker()
    producer = Producer(ClientConfiguration(argument["endpoint"], Credentials()), (topic,), checker)
    producer.startup()
    try:
        transaction = producer.begin_transaction()
        receipt = producer.send(half(topic, b"committed by the client"), transaction)
        transaction.commit()
        print(
            json.dumps({"committed": receipt.message_id, "transaction_id": receipt.transaction_id}),
            flush=True,
        )
        if argument.get("rollback"):
            transaction = producer.begin_transaction()
            receipt = producer.send(half(topic, b"rolled back by the client"), transaction)
            transaction.rollback()
            print(json.dumps({"rolled_back": receipt.message_id}), flush=True)
        orphan = producer.send(half(topic, b"left to the check-back"), producer.begin_transaction())
        print(json.dumps({"orphan": orphan.message_id, "transaction_id": orphan.transaction_id}), flush=True)
        checker.checked.wait(20)
        # the EndTransaction of the check runs on the producer's check executor: let it finish
        producer._Producer__transaction_check_executor.shutdown(wait=True)
        print(json.dumps({"checked": [m for m, _ in checker.seen], "topics": [t for _, t in checker.seen]}))
    finally:
        producer.shutdown()


if __name__ == "__main__":
    main()
