"""The RocketMQ remoting wire: frames, headers, commands, fastjson-compatible JSON, CRC.

Knows nothing about routes; the server, the admin tools, the tests and the Spark jobs all
use it, so the frame format is written exactly once.
"""

from .codes import JSON_SERIALIZE, LanguageCode, RequestCode, ResponseCode, SerializeType
from .command import ONEWAY_FLAG, RESPONSE_FLAG, RemotingCommand
from .errors import RemotingDecodeError
from .frame import DEFAULT_MAX_FRAME_LENGTH, FrameDecoder

__all__ = [
    "DEFAULT_MAX_FRAME_LENGTH", "FrameDecoder", "JSON_SERIALIZE", "LanguageCode", "ONEWAY_FLAG", "RESPONSE_FLAG",
    "RemotingCommand", "RemotingDecodeError", "RequestCode", "ResponseCode", "SerializeType",
]
