"""RemotingCommand: one request or response, independent of how its header was encoded."""

from __future__ import annotations

import re
from dataclasses import dataclass

from .codes import ResponseCode, SerializeType
from .errors import RemotingDecodeError
from .frame import HEADER_LENGTH_MASK, encode_frame, split_frame
from .header import (
    Header,
    HeaderTemplates,
    decode_binary_header,
    decode_json_header,
    encode_binary_header,
    encode_json_header,
)

RESPONSE_FLAG = 1 << 0  # RPC_TYPE bit: set on responses
ONEWAY_FLAG = 1 << 1  # RPC_ONEWAY bit: the sender expects no answer

_CODE_KEY = b'"code":'
_CODE_DIGITS = re.compile(rb"-?\d{1,6}")
#: where a JSON header's "code" is looked for: Java writes it first, other clients near the start
_CODE_WITHIN = 64


def peek_code(frame: bytes) -> int | None:
    """The code a frame's header names, read without decoding the header: the first ``"code":``
    number of a JSON one (within its first bytes), the first two bytes of a binary one; None when
    it is not found there.  A guess, for scheduling only (a string value might hold those bytes
    first): what acts on a frame decodes it in full."""
    if len(frame) < 6:
        return None
    word = int.from_bytes(frame[:4], "big")
    end = 4 + (word & HEADER_LENGTH_MASK)
    if word >> 24 == SerializeType.ROCKETMQ:
        return int.from_bytes(frame[4:6], "big", signed=True) if end >= 6 else None
    at = frame.find(_CODE_KEY, 4, min(end, 4 + _CODE_WITHIN))
    found = _CODE_DIGITS.match(frame, at + len(_CODE_KEY), end) if at >= 0 else None
    return int(found.group()) if found else None


@dataclass(slots=True)
class RemotingCommand:
    """``header`` holds code, language, version, opaque, flag, remark, extFields;
    ``serialize_type`` is the frame's type byte (JSON 0, ROCKETMQ 1)."""

    header: Header
    #: a view of the frame when decoded from a memoryview (capture analysis: no copy of big bodies)
    body: bytes | memoryview | None = None
    serialize_type: int = SerializeType.JSON

    # -- the fields everybody reads -------------------------------------------------------
    @property
    def code(self) -> int:
        return self.header.code

    @property
    def opaque(self) -> int:
        return self.header.opaque

    @property
    def version(self) -> int:
        return self.header.version

    @property
    def remark(self) -> str | None:
        return self.header.remark

    @property
    def ext(self) -> dict[str, str | None]:
        """extFields, empty when absent (Java: null map)."""
        return self.header.ext_fields or {}

    @property
    def is_response(self) -> bool:
        return bool(self.header.flag & RESPONSE_FLAG)

    @property
    def is_oneway(self) -> bool:
        return bool(self.header.flag & ONEWAY_FLAG)

    # -- construction ------------------------------------------------------------------------
    @classmethod
    def request(cls, code: int, ext: dict[str, str | None] | None = None, body: bytes | None = None, *,
                opaque: int = 0, version: int = 0, language: str = "JAVA", oneway: bool = False,
                serialize_type: int = SerializeType.JSON) -> RemotingCommand:
        header = Header(code=code, language=language, version=version, opaque=opaque,
                        flag=ONEWAY_FLAG if oneway else 0, ext_fields=ext)
        return cls(header, body, serialize_type)

    @classmethod
    def response_to(cls, request: RemotingCommand, code: int = ResponseCode.SUCCESS, remark: str | None = None,
                    ext: dict[str, str | None] | None = None, body: bytes | None = None, *, version: int = 0,
                    serialize_type: int = SerializeType.JSON) -> RemotingCommand:
        """A response carrying the request's opaque, as NettyRemotingAbstract writes it."""
        header = Header(code=code, version=version, opaque=request.header.opaque, flag=RESPONSE_FLAG,
                        remark=remark, ext_fields=ext)
        return cls(header, body, serialize_type)

    # -- wire --------------------------------------------------------------------------------
    def encode(self) -> bytes:
        """The whole frame, length prefix included."""
        if self.serialize_type == SerializeType.ROCKETMQ:
            header = encode_binary_header(self.header)
        else:
            # JSON's name without the enum's lookup (four Python calls an answer); any other type as the enum names it
            name = "JSON" if self.serialize_type == SerializeType.JSON else SerializeType(self.serialize_type).name
            header = encode_json_header(self.header, name)
        return encode_frame(self.serialize_type, header, self.body)

    @classmethod
    def decode(cls, frame: bytes | memoryview, templates: HeaderTemplates | None = None) -> RemotingCommand:
        """A frame without its length prefix (as FrameDecoder yields it); JSON headers through
        ``templates`` (a server's are its answer cache's), else parsed each time."""
        serialize_type, header_bytes, body = split_frame(frame)
        if serialize_type == SerializeType.JSON:
            header = decode_json_header(header_bytes) if templates is None else templates.decode_json(header_bytes)
        elif serialize_type == SerializeType.ROCKETMQ:
            header = decode_binary_header(header_bytes)
        else:
            raise RemotingDecodeError(f"unknown serialize type {serialize_type}")
        return cls(header, body, serialize_type)
