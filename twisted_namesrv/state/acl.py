"""Optional ACL: requests signed as RocketMQ's clients sign them (ACL 1.0), checked against the
accounts of a ``plain_acl.yml``.

A client adds ``AccessKey`` (and optionally ``SecurityToken``; the C++ client also
``OnsChannel``) to the extFields, then ``Signature`` = Base64(HmacSHA1(secretKey, the values of
all other extFields in key order, then the body)).  Java checks this in brokers only; the
NameServer never did, so anyone could wipe a broker's write permission or rewrite the KV store.
Here every state-changing code needs a valid signature; operator codes need an ``admin``
account; reads need one only with ``aclReadRequired``.  A refusal is what a Java broker answers:
SYSTEM_ERROR with the AclException text.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ACCESS_KEY, SIGNATURE, SECURITY_TOKEN = "AccessKey", "Signature", "SecurityToken"
ACL_EXCEPTION = "org.apache.rocketmq.acl.common.AclException"
#: what brokers send for themselves: any account that signs correctly
BROKER_CODES = frozenset({103, 104, 322, 904})
#: what operators send (KV, permissions, topics, config): admin accounts only
ADMIN_CODES = frozenset({100, 102, 205, 216, 217, 318, 327})


class AclConfigError(ValueError):
    """An accounts file that cannot be used; the message names the file."""


@dataclass(frozen=True, slots=True)
class Account:
    access_key: str
    secret_key: str
    admin: bool = False


def signature(secret_key: str, ext: Mapping[str, str | None], body: bytes | memoryview | None) -> str:
    """AclUtils.calSignature(combineRequestContent(...)): values in Java String order of keys (a
    null value appends "null", as StringBuilder does)."""
    fields = sorted((k for k in ext if k != SIGNATURE), key=lambda k: k.encode("utf-16-be"))
    content = "".join("null" if ext[k] is None else str(ext[k]) for k in fields).encode("utf-8") + bytes(body or b"")
    return base64.b64encode(hmac.new(secret_key.encode("utf-8"), content, hashlib.sha1).digest()).decode()


def signed(ext: dict[str, str], access_key: str, secret_key: str, body: bytes | None = None,
           security_token: str | None = None) -> dict[str, str]:
    """``ext`` as AclClientRPCHook sends it: with AccessKey (SecurityToken) and Signature."""
    fields = {**ext, ACCESS_KEY: access_key, **({SECURITY_TOKEN: security_token} if security_token else {})}
    return {**fields, SIGNATURE: signature(secret_key, fields, body)}


class AccessControl:
    def __init__(self, accounts: dict[str, Account], read_required: bool = False) -> None:
        self.accounts = accounts
        self.read_required = read_required

    @classmethod
    def from_file(cls, path: str, read_required: bool = False) -> AccessControl:
        """plain_acl.yml: ``accounts: [{accessKey, secretKey, admin}]`` (other keys are ignored)."""
        import yaml  # only when ACL is on

        try:
            document = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
        except (OSError, yaml.YAMLError) as exc:
            raise AclConfigError(f"aclAccountsFile: cannot read {path}: {exc}") from None
        entries: Any = document.get("accounts") if isinstance(document, dict) else None
        if not isinstance(entries, list) or not entries:
            raise AclConfigError(f"aclAccountsFile: {path} has no 'accounts' list")
        accounts = {}
        for number, entry in enumerate(entries, 1):
            if not isinstance(entry, dict) or not entry.get("accessKey") or not entry.get("secretKey"):
                raise AclConfigError(f"aclAccountsFile: {path}: account {number} needs accessKey and secretKey")
            account = Account(str(entry["accessKey"]), str(entry["secretKey"]), entry.get("admin") is True)
            accounts[account.access_key] = account
        return cls(accounts, read_required)

    def guards(self, code: int) -> bool:
        return self.read_required or code in BROKER_CODES or code in ADMIN_CODES

    def refusal(self, code: int, ext: Mapping[str, str | None], body: bytes | memoryview | None) -> str | None:
        """None when the request may proceed, else the AclException text Java would send."""
        access_key = ext.get(ACCESS_KEY)
        if not access_key:
            return f"{ACL_EXCEPTION}: No accessKey is configured"
        account = self.accounts.get(access_key)
        if account is None:
            return f"{ACL_EXCEPTION}: No acl config for {access_key}"
        given = ext.get(SIGNATURE) or ""
        if not hmac.compare_digest(given.encode(), signature(account.secret_key, ext, body).encode()):
            return f"{ACL_EXCEPTION}: Check signature failed for accessKey={access_key}"
        if code in ADMIN_CODES and not account.admin:
            return f"{ACL_EXCEPTION}: Need admin permission for request code={code}, but accessKey={access_key} is not"
        return None
