"""The remoting door's faults.

Two kinds, told apart by what the server does with them:

* :class:`RemotingProtocolError` — bytes that are not a remoting frame (a length over the cap,
  a truncated frame, a header that does not decode). The server logs it and closes *that*
  connection: after a bad frame the stream cannot be resynchronised.
* :class:`RemotingRequestError` — a well-framed request the door refuses (a header field
  missing or not a number, a body that is not the JSON it should be). The server answers it
  with ``response_code`` and the message as the remark, and keeps the connection.

Every error is a :class:`store.SparkMQError` and carries its context in the message.
"""

from __future__ import annotations

from ingest_api.remoting.codes import ResponseCode
from store import SparkMQError


class RemotingError(SparkMQError):
    """Root of the remoting door's errors."""

    code = "remoting_error"


class RemotingProtocolError(RemotingError):
    """Bytes on the wire that are not a RocketMQ remoting frame; the connection is closed."""

    code = "remoting_protocol_error"


class FrameTooLarge(RemotingProtocolError):
    """A frame's length prefix exceeds the server's ``max_frame_bytes``."""

    code = "remoting_frame_too_large"


class MalformedFrame(RemotingProtocolError):
    """A frame whose header does not decode (bad lengths, garbage JSON, truncated fields)."""

    code = "remoting_malformed_frame"


class RemotingRequestError(RemotingError):
    """A request the door answers with an error code instead of serving it.

    ``response_code`` is the :class:`~ingest_api.remoting.codes.ResponseCode` to answer with;
    the message becomes the response's remark.
    """

    code = "remoting_bad_request"
    response_code: int = ResponseCode.SYSTEM_ERROR

    def __init__(self, message: str, response_code: int | None = None) -> None:
        super().__init__(message)
        if response_code is not None:
            self.response_code = response_code


class HeaderFieldError(RemotingRequestError):
    """A custom-header field (an ``extFields`` entry) is missing or does not parse.

    Answered like RocketMQ answers a ``RemotingCommandException`` from a processor:
    ``SYSTEM_ERROR`` with the message (which names the header and the field) as the remark.
    """

    code = "remoting_header_field"


class BodyError(RemotingRequestError):
    """A request body (heartbeat, lock batch, message batch...) that does not decode."""

    code = "remoting_bad_body"


class ConnectionClosed(RemotingError):
    """A server -> client request could not complete: the connection closed first."""

    code = "remoting_connection_closed"
    retriable = True


class InvokeTimeout(RemotingError):
    """A server -> client request got no response within its timeout."""

    code = "remoting_invoke_timeout"
    retriable = True
