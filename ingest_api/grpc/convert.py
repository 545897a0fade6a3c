"""Stored messages to ``apache.rocketmq.v2.Message`` and back, as RocketMQ 5's gRPC proxy does.

Pure functions (no I/O; the clock is an argument). Two directions:

* :func:`to_proto` - a stored :class:`store.MessageView` as a received ``Message``, field by
  field the proxy's ``GrpcConverter.buildMessage``::

      topic                        view.topic (the POP service presents retries under the original)
      body                         view.body (stored bodies are decompressed: encoding IDENTITY)
      user_properties              every property not in RocketMQ 5's system set (as in the
                                   proxy, __SHARDINGKEY and TRACE_CONTEXT are not in it)
      system_properties.tag        TAGS              .keys          KEYS split on " "
                       .message_id UNIQ_KEY (else the offsetMsgId)
                       .body_digest MD5 of the body, uppercase hex
                       .message_type TRAN_MSG=true -> TRANSACTION; DELAY/TIMER_DELIVER_MS/
                                     TIMER_DELAY_SEC -> DELAY; __SHARDINGKEY -> FIFO; else NORMAL
                       .born_timestamp / .store_timestamp  the record's, in ms
                       .born_host  __BORNHOST, else the record's born IP (no port)
                       .store_host "ip:port" of the record's store host
                       .delivery_timestamp now + TIMER_DELAY_SEC s, else TIMER_DELIVER_MS
                       .message_group __SHARDINGKEY     .trace_context TRACE_CONTEXT
                       .receipt_handle the POP service's handle, when given
                       .queue_id / .queue_offset        the view's
                       .delivery_attempt reconsume times + 1
                       .dead_letter_queue DLQ_ORIGIN_TOPIC + DLQ_ORIGIN_MESSAGE_ID, when both

* :func:`from_send_request` / :func:`from_proto` - a ``SendMessageRequest``'s messages as
  :class:`store.Message` values, validated like the proxy's ``SendMessageActivity``. Refusals
  raise :class:`~ingest_api.grpc.status.GrpcRefusal` with the proxy's ``Code``:
  ``MESSAGE_CORRUPTED`` (no message, mixed topics, bad gzip), ``ILLEGAL_TOPIC``,
  ``MESSAGE_BODY_EMPTY``/``MESSAGE_BODY_TOO_LARGE``, ``MESSAGE_PROPERTIES_TOO_LARGE``,
  ``ILLEGAL_MESSAGE_PROPERTY_KEY`` (a system name or a control character),
  ``ILLEGAL_MESSAGE_TAG``, ``ILLEGAL_MESSAGE_KEY``, ``ILLEGAL_MESSAGE_ID`` (blank id),
  ``ILLEGAL_MESSAGE_GROUP``, ``ILLEGAL_DELIVERY_TIME`` (more than a day ahead), ``BAD_REQUEST``
  (transaction recovery time over an hour). The stored properties: the user's, then ``TAGS``,
  ``KEYS``, ``UNIQ_KEY`` = the client's message id, ``TRAN_MSG=true`` (TRANSACTION, also a
  prepared half), ``CHECK_IMMUNITY_TIME_IN_SECONDS``, ``TIMER_DELIVER_MS`` from
  ``delivery_timestamp``, ``RECONSUME_TIME`` = ``delivery_attempt``, ``PGROUP`` = the topic,
  ``__SHARDINGKEY`` from ``message_group``, ``TRACE_CONTEXT``, ``__BORNHOST`` (the client's,
  else the peer's ``ip:port``) and ``BORN_TIMESTAMP``.
"""

from __future__ import annotations

import dataclasses
import gzip
import hashlib
import zlib
from collections.abc import Sequence
from dataclasses import dataclass

from google.protobuf.timestamp_pb2 import Timestamp

from ingest_api.grpc.status import Code, GrpcRefusal
from ingest_api.grpc.v2 import definition_pb2 as pb
from ingest_api.grpc.v2 import service_pb2 as spb
from store import MIB, InvalidArgument, Message, MessageView, is_system_topic, validate_topic
from store import vocabulary as v

#: Byte sizes and times the proxy enforces by default (``ProxyConfig``).
MAX_BODY_BYTES = 4 * MIB
MAX_USER_PROPERTIES = 128
MAX_USER_PROPERTY_BYTES = 16 * 1024
MAX_MESSAGE_GROUP_BYTES = 64
MAX_DELAY_MS = 24 * 3600 * 1000
MAX_TRANSACTION_RECOVERY_S = 3600
KEY_SEPARATOR = " "


@dataclass(frozen=True, slots=True)
class SendLimits:
    """What a sent message may be (the proxy's defaults; ``max_body_bytes`` follows the
    store's ``max_message_size_bytes`` where the door is assembled)."""

    max_body_bytes: int = MAX_BODY_BYTES
    max_user_properties: int = MAX_USER_PROPERTIES
    #: Keys and values of user properties, the tag and the keys, UTF-8, added up.
    max_user_property_bytes: int = MAX_USER_PROPERTY_BYTES
    #: A message group must be shorter than this many UTF-8 bytes.
    max_message_group_bytes: int = MAX_MESSAGE_GROUP_BYTES
    #: How far ahead of now a delivery timestamp may be.
    max_delay_ms: int = MAX_DELAY_MS
    max_transaction_recovery_s: int = MAX_TRANSACTION_RECOVERY_S


# --- stored -> v2.Message --------------------------------------------------------------------


def to_proto(view: MessageView, *, now_ms: int, receipt_handle: str | None = None) -> pb.Message:
    """``view`` as the ``Message`` a ReceiveMessage stream carries (layout in the module doc).

    ``now_ms`` (epoch ms) dates a ``TIMER_DELAY_SEC`` delivery; ``receipt_handle`` is the POP
    service's opaque handle for this delivery. Never raises on stored data: a malformed timer
    property is left out of ``delivery_timestamp``.
    """
    props = view.properties
    return pb.Message(
        topic=pb.Resource(name=view.topic),
        user_properties={k: val for k, val in props.items() if k not in v.SYSTEM_PROPERTIES_V5},
        system_properties=_system_properties(view, now_ms, receipt_handle),
        body=view.body,
    )


def under_real_topic(view: MessageView) -> MessageView:
    """A parked message (a transaction half, a timer or delay message) under the topic and
    queue it was sent to (``REAL_TOPIC``/``REAL_QID``), as RocketMQ presents a half message to
    a transaction check-back; other messages unchanged."""
    real_topic = view.properties.get(v.PROPERTY_REAL_TOPIC)
    if real_topic is None:
        return view
    real_queue = view.properties.get(v.PROPERTY_REAL_QID, "")
    queue_id = int(real_queue) if real_queue.isdigit() else view.queue_id
    return dataclasses.replace(view, topic=real_topic, queue_id=queue_id)


def _system_properties(view: MessageView, now_ms: int, receipt_handle: str | None) -> pb.SystemProperties:
    props = view.properties
    system = pb.SystemProperties(
        message_id=props.get(v.PROPERTY_UNIQ_KEY) or view.msg_id,
        body_digest=pb.Digest(type=pb.MD5, checksum=hashlib.md5(view.body).hexdigest().upper()),
        body_encoding=pb.IDENTITY,
        message_type=message_type_of(props),
        born_timestamp=_timestamp(view.born_timestamp_ms),
        born_host=props.get(v.PROPERTY_BORN_HOST) or view.born_host[0],
        store_timestamp=_timestamp(view.store_timestamp_ms),
        store_host=host_port(view.store_host),
        queue_id=view.queue_id,
        queue_offset=view.queue_offset,
        delivery_attempt=view.reconsume_times + 1,
    )
    if (tag := props.get(v.PROPERTY_TAGS)) is not None:
        system.tag = tag
    if (keys := props.get(v.PROPERTY_KEYS)) is not None:
        system.keys.extend(keys.split(KEY_SEPARATOR))
    if (deliver_ms := _delivery_ms(props, now_ms)) is not None:
        system.delivery_timestamp.CopyFrom(_timestamp(deliver_ms))
    if (group := props.get(v.PROPERTY_SHARDING_KEY)) is not None:
        system.message_group = group
    if receipt_handle is not None:
        system.receipt_handle = receipt_handle
    if (trace := props.get(v.PROPERTY_TRACE_CONTEXT)) is not None:
        system.trace_context = trace
    dlq_topic, dlq_id = props.get(v.PROPERTY_DLQ_ORIGIN_TOPIC), props.get(v.PROPERTY_DLQ_ORIGIN_MESSAGE_ID)
    if dlq_topic is not None and dlq_id is not None:
        system.dead_letter_queue.CopyFrom(pb.DeadLetterQueue(topic=dlq_topic, message_id=dlq_id))
    return system


_DELAY_PROPERTIES = (v.PROPERTY_DELAY, v.PROPERTY_TIMER_DELIVER_MS, v.PROPERTY_TIMER_DELAY_SEC)


def message_type_of(props: dict[str, str]) -> pb.MessageType:
    """The proxy's message type of stored properties (transaction, delay, FIFO, normal)."""
    if props.get(v.PROPERTY_TRAN_MSG) == "true":
        return pb.TRANSACTION
    if any(name in props for name in _DELAY_PROPERTIES):
        return pb.DELAY
    if v.PROPERTY_SHARDING_KEY in props:
        return pb.FIFO
    return pb.NORMAL


def _delivery_ms(props: dict[str, str], now_ms: int) -> int | None:
    try:
        if (delay_s := props.get(v.PROPERTY_TIMER_DELAY_SEC)) is not None:
            return now_ms + int(delay_s) * 1000
        if (deliver_ms := props.get(v.PROPERTY_TIMER_DELIVER_MS)) is not None:
            return int(deliver_ms)
    except ValueError:
        return None
    return None


def host_port(host: tuple[str, int]) -> str:
    """``ip:port`` as Java's ``NetworkUtil.socketAddress2String`` writes it (IPv6 unbracketed)."""
    return f"{host[0]}:{host[1]}"


def _timestamp(ms: int) -> Timestamp:
    stamp = Timestamp()
    stamp.FromMilliseconds(ms)
    return stamp


# --- SendMessageRequest -> store.Message -----------------------------------------------------


def from_send_request(
    request: spb.SendMessageRequest, *, peer: tuple[str, int], now_ms: int, limits: SendLimits = SendLimits()
) -> list[Message]:
    """The messages of one SendMessage call (one topic, like the proxy), validated.

    ``peer`` is the client's ``(ip, port)`` (the record's born host), ``now_ms`` epoch ms.
    Raises :class:`GrpcRefusal` (codes in the module doc).
    """
    if not request.messages:
        raise GrpcRefusal(Code.MESSAGE_CORRUPTED, "no message to send")
    topic = request.messages[0].topic
    check_topic(topic.name)
    if any(m.topic != topic for m in request.messages):
        raise GrpcRefusal(Code.MESSAGE_CORRUPTED, "topic in message is not same")
    return [from_proto(m, peer=peer, now_ms=now_ms, limits=limits) for m in request.messages]


def check_topic(name: str) -> None:
    """Refuse a topic name that is malformed or a system topic (``ILLEGAL_TOPIC``)."""
    try:
        validate_topic(name)
    except InvalidArgument as exc:
        raise GrpcRefusal(Code.ILLEGAL_TOPIC, str(exc)) from None
    if is_system_topic(name):
        raise GrpcRefusal(Code.ILLEGAL_TOPIC, "cannot access system topic")


def from_proto(
    message: pb.Message, *, peer: tuple[str, int], now_ms: int, limits: SendLimits = SendLimits()
) -> Message:
    """One sent ``Message`` as the :class:`store.Message` to put (queue left to the caller).

    Raises :class:`GrpcRefusal` when the proxy would refuse it.
    """
    system = message.system_properties
    _check_body(message.body, limits)
    user = dict(message.user_properties)
    _check_user_properties(user, limits)
    tag = _checked_tag(system.tag)
    keys = _checked_keys(system.keys)
    size = sum(len(k.encode()) + len(val.encode()) for k, val in user.items())
    size += len(tag.encode()) + sum(len(k.encode()) for k in keys)
    if size > limits.max_user_property_bytes:
        raise GrpcRefusal(
            Code.MESSAGE_PROPERTIES_TOO_LARGE,
            f"the total size of user property is too large, max is {limits.max_user_property_bytes}",
        )
    if not system.message_id.strip():
        raise GrpcRefusal(Code.ILLEGAL_MESSAGE_ID, "message id cannot be empty")
    props = user | _system_to_properties(message, peer, now_ms, limits)
    return Message(
        topic=message.topic.name,
        body=_decoded_body(message.body, system.body_encoding),
        tags=tag or None,
        keys=tuple(keys),
        properties=props,
        transaction_prepared=system.message_type == pb.TRANSACTION,
        born_timestamp_ms=_born_ms(system),
        born_host=peer,
        uniq_key=system.message_id,
    )


def _system_to_properties(
    message: pb.Message, peer: tuple[str, int], now_ms: int, limits: SendLimits
) -> dict[str, str]:
    """The system properties the proxy stores, after the user's, in its order."""
    system = message.system_properties
    props: dict[str, str] = {}
    if system.message_type == pb.TRANSACTION:
        props[v.PROPERTY_TRAN_MSG] = "true"
        if system.HasField("orphaned_transaction_recovery_duration"):
            recovery_s = system.orphaned_transaction_recovery_duration.ToSeconds()
            if recovery_s > limits.max_transaction_recovery_s:
                raise GrpcRefusal(
                    Code.BAD_REQUEST,
                    f"the max transaction recovery time of message is too large, "
                    f"max is {limits.max_transaction_recovery_s}",
                )
            props[v.PROPERTY_CHECK_IMMUNITY_TIME_IN_SECONDS] = str(recovery_s)
    if system.HasField("delivery_timestamp"):
        deliver_ms = system.delivery_timestamp.ToMilliseconds()
        if deliver_ms - now_ms > limits.max_delay_ms:
            raise GrpcRefusal(
                Code.ILLEGAL_DELIVERY_TIME,
                f"the max delay time of message is too large, max is {limits.max_delay_ms}",
            )
        props[v.PROPERTY_TIMER_DELIVER_MS] = str(deliver_ms)
    props[v.PROPERTY_RECONSUME_TIME] = str(system.delivery_attempt)
    props[v.PROPERTY_PGROUP] = message.topic.name  # the proxy's producer group is the topic
    if system.message_group:
        _check_message_group(system.message_group, limits)
        props[v.PROPERTY_SHARDING_KEY] = system.message_group
    if system.trace_context:
        props[v.PROPERTY_TRACE_CONTEXT] = system.trace_context
    born_host = system.born_host if system.born_host.strip() else host_port(peer)
    props[v.PROPERTY_BORN_HOST] = born_host
    if (born_ms := _born_ms(system)) is not None:
        props[v.PROPERTY_BORN_TIMESTAMP] = str(born_ms)
    return props


def _check_body(body: bytes, limits: SendLimits) -> None:
    if not body:
        raise GrpcRefusal(Code.MESSAGE_BODY_EMPTY, "message body cannot be empty")
    if len(body) > limits.max_body_bytes:
        raise GrpcRefusal(
            Code.MESSAGE_BODY_TOO_LARGE, f"message body cannot exceed the max {limits.max_body_bytes}"
        )


def _decoded_body(body: bytes, encoding: pb.Encoding) -> bytes:
    """The body to store: a GZIP-encoded one is inflated (the store compresses by its own
    policy). A body that does not inflate is ``MESSAGE_CORRUPTED``."""
    if encoding != pb.GZIP:
        return body
    try:
        return gzip.decompress(body)
    except (OSError, EOFError, zlib.error) as exc:
        raise GrpcRefusal(Code.MESSAGE_CORRUPTED, f"body is not valid gzip: {exc}") from None


def _check_user_properties(user: dict[str, str], limits: SendLimits) -> None:
    if len(user) > limits.max_user_properties:
        raise GrpcRefusal(
            Code.MESSAGE_PROPERTIES_TOO_LARGE,
            f"too many user properties, max is {limits.max_user_properties}",
        )
    for name, value in user.items():
        if name in v.SYSTEM_PROPERTIES_V5:
            raise GrpcRefusal(Code.ILLEGAL_MESSAGE_PROPERTY_KEY, f"property is used by system: {name}")
        if has_control_character(name):
            raise GrpcRefusal(
                Code.ILLEGAL_MESSAGE_PROPERTY_KEY, "the key of property cannot contain control character"
            )
        if has_control_character(value):
            raise GrpcRefusal(
                Code.ILLEGAL_MESSAGE_PROPERTY_KEY, "the value of property cannot contain control character"
            )


def _checked_tag(tag: str) -> str:
    """The proxy's tag rules, plus the store's (no spaces at either end); "" is no tag."""
    if not tag:
        return tag
    if not tag.strip():
        raise GrpcRefusal(Code.ILLEGAL_MESSAGE_TAG, "tag cannot be the char sequence of whitespace")
    if "|" in tag:
        raise GrpcRefusal(Code.ILLEGAL_MESSAGE_TAG, "tag cannot contain '|'")
    if has_control_character(tag):
        raise GrpcRefusal(Code.ILLEGAL_MESSAGE_TAG, "tag cannot contain control character")
    if tag.strip() != tag:
        raise GrpcRefusal(Code.ILLEGAL_MESSAGE_TAG, "tag cannot start or end with whitespace")
    return tag


def _checked_keys(keys: Sequence[str]) -> list[str]:
    """The proxy's key rules, plus the store's: keys are stored joined by spaces, so a key is
    non-empty and has no space."""
    for key in keys:
        if not key.strip():
            raise GrpcRefusal(
                Code.ILLEGAL_MESSAGE_KEY, "key cannot be empty or the char sequence of whitespace"
            )
        if has_control_character(key):
            raise GrpcRefusal(Code.ILLEGAL_MESSAGE_KEY, "key cannot contain control character")
        if KEY_SEPARATOR in key:
            raise GrpcRefusal(Code.ILLEGAL_MESSAGE_KEY, "key cannot contain a space")
    return list(keys)


def _check_message_group(group: str, limits: SendLimits) -> None:
    if not group.strip():
        raise GrpcRefusal(
            Code.ILLEGAL_MESSAGE_GROUP, "message group cannot be the char sequence of whitespace"
        )
    if len(group.encode()) >= limits.max_message_group_bytes:
        raise GrpcRefusal(
            Code.ILLEGAL_MESSAGE_GROUP, f"message group exceed the max size {limits.max_message_group_bytes}"
        )
    if has_control_character(group):
        raise GrpcRefusal(Code.ILLEGAL_MESSAGE_GROUP, "message group cannot contain control character")


def _born_ms(system: pb.SystemProperties) -> int | None:
    return system.born_timestamp.ToMilliseconds() if system.HasField("born_timestamp") else None


def has_control_character(text: str) -> bool:
    """Java's ``CharMatcher.javaIsoControl``: U+0000-U+001F and U+007F-U+009F."""
    return any(ord(c) < 0x20 or 0x7F <= ord(c) <= 0x9F for c in text)
