"""The one error type of the wire layer: input that cannot be a remoting command.

Java's NettyDecoder logs these and closes the channel; so does our protocol.
"""


class RemotingDecodeError(ValueError):
    """Bytes that do not decode to a remoting command (framing, header or type byte).

    ``reason`` names the kind for counting (the server's ``namesrv_rejected_total``)."""

    def __init__(self, message: str, reason: str = "undecodable") -> None:
        super().__init__(message)
        self.reason = reason
