"""The one error type of the wire layer: input that cannot be a remoting command.

Java's NettyDecoder logs these and closes the channel; so does our protocol.
"""


class RemotingDecodeError(ValueError):
    """Bytes that do not decode to a remoting command (framing, header or type byte)."""
