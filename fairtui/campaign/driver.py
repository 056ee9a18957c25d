"""One driver a judgement: an exclusive flock on ``<home>/judges/<key>.lock`` that the kernel releases when its
holder ends, however it ends (the study journal's lock is the same kind), with the holder's PID, host and start
written in the file for the one line that refuses a second command."""

from __future__ import annotations

import json
import os
import socket
import time
from pathlib import Path
from typing import IO


class DriverLock:
    def __init__(self, path: Path) -> None:
        self.path = path
        self._fh: IO | None = None

    @property
    def held(self) -> bool:
        return self._fh is not None

    def take(self) -> bool:
        """Take the lock without waiting (a moment's patience, so that a probe is never taken for a holder); False
        when another process holds it."""
        from engine.contract.locks import try_lock

        self.path.parent.mkdir(parents=True, exist_ok=True)
        fh = try_lock(self.path, patience=0.2)
        if fh is None:
            return False
        fh.truncate(0)
        fh.write(json.dumps({"pid": os.getpid(), "host": socket.gethostname(), "started": time.time()}))
        fh.flush()
        self._fh = fh
        return True

    def release(self) -> None:
        fh, self._fh = self._fh, None
        if fh is not None:
            fh.close()

    def holder(self) -> dict | None:
        """Who holds it now ({pid, host, started}), or None when nobody does."""
        from engine.contract.locks import is_locked

        if self._fh is not None:
            return {"pid": os.getpid(), "host": socket.gethostname()}
        if not is_locked(self.path):
            return None
        try:
            info = json.loads(self.path.read_text() or "{}")
        except (OSError, ValueError):
            info = {}
        return info if isinstance(info, dict) else {}

    def busy_text(self, key: str) -> str:
        info = self.holder() or {}
        started = info.get("started")
        since = time.strftime("%H:%M", time.localtime(started)) if isinstance(started, (int, float)) else "?"
        return (f"judge {key} is driven by PID {info.get('pid', '?')} on {info.get('host', '?')} since {since}: this "
                f"command would train nothing. Follow it in the app (fairtui, then j on one of its runs) or with "
                f"`fairtui ls --tag judge:{key}`")
