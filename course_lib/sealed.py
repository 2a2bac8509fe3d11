"""What a trace must not hold, kept anyway: encrypted, stored apart, opened with its own key.

A trace keeps a call's metadata and a keyed hash of its arguments (``tracing``), never the
arguments: traces are read by many people and kept for a long time. Sometimes the content
itself must be kept too: an audit, a customer's dispute about what was sent. The seed
article's rule for that case is to encrypt it and store it separately, under its own access
control. ``SealedStore`` is that rule in a few lines: one file per call, named by the call's
id (which the trace's span carries as ``gen_ai.tool.call.id``), holding the arguments
encrypted with Fernet (the ``cryptography`` package: AES in CBC mode with an HMAC, so a
changed file is refused, not misread). Whoever reads the traces never holds the key; whoever
holds the key finds a call's arguments by the id the trace shows.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from cryptography.fernet import Fernet, InvalidToken

CALL_ID = re.compile(r"[A-Za-z0-9_-]{1,64}")  # a call id is a file name here: nothing that walks folders


class SealedStore:
    """Arguments of tool calls, one encrypted file per call id, in ``folder``."""

    def __init__(self, folder: Path, key: bytes) -> None:
        self.folder, self._fernet = Path(folder), Fernet(key)
        self.folder.mkdir(parents=True, exist_ok=True)

    def path(self, call_id: str) -> Path:
        if not CALL_ID.fullmatch(call_id):
            raise ValueError(f"a call id is 1 to 64 letters, digits, '_' or '-', got {call_id[:80]!r}")
        return self.folder / f"{call_id}.sealed"

    def keep(self, call_id: str, arguments: dict[str, Any]) -> Path:
        """Encrypt ``arguments`` and store them under ``call_id``; the file's path."""
        path = self.path(call_id)
        path.write_bytes(self._fernet.encrypt(json.dumps(arguments, ensure_ascii=False).encode()))
        return path

    def open(self, call_id: str) -> dict[str, Any]:
        """The arguments kept under ``call_id``. A wrong key or a changed file is an error, never
        a guess."""
        try:
            return json.loads(self._fernet.decrypt(self.path(call_id).read_bytes()))
        except InvalidToken:
            raise ValueError(f"call {call_id}: this key does not open it, or the file was changed") from None
