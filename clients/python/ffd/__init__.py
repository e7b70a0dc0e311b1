"""Python client of ffd (docs/python.md).

Producers call ffd's SQL API through psycopg, inside their own
transactions (Client); handlers run in a Worker that speaks ffd's worker
protocol to the daemon over HTTP.
"""

from .errors import (
    AlreadyTerminalError,
    ConflictError,
    FfdError,
    LeaseLostError,
    NotFoundError,
    ProtocolError,
    ValidationError,
)
from .client import Client
from .worker import Cancelled, Job, Permanent, Worker

__all__ = [
    "AlreadyTerminalError",
    "Cancelled",
    "Client",
    "ConflictError",
    "FfdError",
    "Job",
    "LeaseLostError",
    "NotFoundError",
    "Permanent",
    "ProtocolError",
    "ValidationError",
    "Worker",
]
