"""NameServer state: pure Python, no Twisted, no sockets; time comes from an injected clock."""
