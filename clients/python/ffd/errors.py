"""ffd's typed errors, the same as the Go API's (docs/sql.md, "Errors").

The SQL API raises them with SQLSTATE FF001..FF005 and a JSON DETAIL; the
worker protocol answers them as {"error": {...}}. Both carry the same
fields, read here into the same classes.
"""

import json
from typing import Any, Dict, Optional


class FfdError(Exception):
    """An error ffd answered, with its stable code and fields."""

    code = "internal"

    def __init__(self, message: str, fields: Optional[Dict[str, Any]] = None):
        super().__init__(message)
        self.fields = dict(fields or {})

    def __getattr__(self, name: str) -> Any:
        try:
            return self.__dict__["fields"][name]
        except KeyError:
            raise AttributeError(name) from None


class ValidationError(FfdError):
    """Bad input: kind, field, value and detail say which and why."""

    code = "validation"


class NotFoundError(FfdError):
    code = "not_found"


class ConflictError(FfdError):
    code = "conflict"


class LeaseLostError(FfdError):
    """The lease is no longer held at this epoch (expired, cancelled, ...)."""

    code = "lease_lost"


class AlreadyTerminalError(FfdError):
    code = "already_terminal"


class ProtocolError(FfdError):
    """The worker protocol answered something other than a typed error."""


_BY_CODE = {c.code: c for c in (ValidationError, NotFoundError, ConflictError, LeaseLostError, AlreadyTerminalError)}

SQLSTATES = {"FF001", "FF002", "FF003", "FF004", "FF005"}


def from_fields(fields: Dict[str, Any]) -> FfdError:
    cls = _BY_CODE.get(fields.get("code", ""), FfdError)
    return cls(fields.get("message", fields.get("code", "error")), fields)


def from_database(err: Exception) -> Exception:
    """The typed error an SQL API function raised, or err itself."""
    state = getattr(err, "sqlstate", None)
    diag = getattr(err, "diag", None)
    if state not in SQLSTATES or diag is None or not diag.message_detail:
        return err
    try:
        fields = json.loads(diag.message_detail)
    except ValueError:
        return err
    typed = from_fields(fields)
    typed.__cause__ = err
    return typed
