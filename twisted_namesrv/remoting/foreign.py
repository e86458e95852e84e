"""Bytes that are no remoting frame, named when they are a protocol of their own: a TLS record
(content type handshake 22, major version 3: a ClientHello from a client with ``tls.enable=true``
to a port that speaks plain remoting), an HTTP request or answer (a browser, a load balancer's
or a Kubernetes probe's health check pointed at the remoting port), or HTTP/2's connection preface
(``PRI * HTTP/2.0``: a gRPC client, as RocketMQ 5.x's SDKs are, given a remoting port instead of a
proxy's gRPC port; or a 5.x proxy's gRPC port captured beside its NameServer).  Read as a remoting
frame, the first four bytes of each are a length far over any limit (``GET `` is 1,195,725,856,
``PRI `` 1,347,569,952), which alone says nothing to an operator.

Pure; the server's refusals (server.py) and the capture report's undecodable connections
(spark_analysis/capture/conversation.py) both name them with this one rule."""

from __future__ import annotations

import re

TLS, HTTP, HTTP2 = "TLS", "HTTP", "HTTP/2"
_TLS_RECORD = re.compile(rb"\x16\x03[\x00-\x04]", re.DOTALL)
#: HTTP/2's client connection preface (RFC 9113 3.4), as far as its first line
_HTTP2_PREFACE = re.compile(rb"PRI \* HTTP/2\.0\r\n")
_HTTP = re.compile(rb"(?:GET|POST|PUT|HEAD|DELETE|OPTIONS|PATCH) [^\r\n]* HTTP/1\.[01]\r?\n|HTTP/1\.[01] \d{3}")
#: how much of the bytes is looked at
HEAD = 256


def foreign_protocol(data: bytes | memoryview) -> str | None:
    """TLS, HTTP or HTTP/2 when ``data`` (bytes that are no remoting frame) start as those do, else None."""
    head = bytes(data[:HEAD])
    if _TLS_RECORD.match(head):
        return TLS
    if _HTTP2_PREFACE.match(head):
        return HTTP2
    if _HTTP.match(head):
        return HTTP
    return None
