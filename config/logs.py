"""Recording session keys kept out of the logs.

The proxy's credential is part of its URL (/proxy/<key>/v1/…), so every line that names
a request path, Django's own ("Not Found: /proxy/hrk_…") and the servers' access logs,
would otherwise hold a working key. Each key is cut to its first twelve characters, the
hint the UI and the API show, so a line can still be matched to its session.
"""

from __future__ import annotations

import logging
import re
from typing import Any

from gunicorn.glogging import Logger

# trajectories/services/recording.py's KEY_PREFIX, then secrets.token_urlsafe's alphabet.
_KEY = re.compile(r"(hrk_[A-Za-z0-9_-]{8})[A-Za-z0-9_-]+")


def redact(text: str) -> str:
    return _KEY.sub(r"\1…", text)


def _redacted(value: Any) -> Any:
    return redact(value) if isinstance(value, str) else value


class RedactSessionKeys(logging.Filter):
    """On a handler: rewrites each record's message and arguments before it is written."""

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.msg, str):
            record.msg = redact(record.msg)
        if isinstance(record.args, dict):
            record.args = {k: _redacted(v) for k, v in record.args.items()}
        elif record.args:
            record.args = tuple(_redacted(a) for a in record.args)
        return True


class RedactingLogger(Logger):
    """gunicorn's logger, its access log lines with keys cut (`--logger-class`)."""

    def atoms(self, resp: Any, req: Any, environ: Any, request_time: Any) -> dict[str, Any]:
        return {k: _redacted(v) for k, v in super().atoms(resp, req, environ, request_time).items()}
