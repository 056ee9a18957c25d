"""The filters that `ls`, `compare --name/--tag`, `export` and the app share: which index entries a selection keeps."""

from __future__ import annotations

import fnmatch


def filter_docs(docs: list[dict], method, dataset, status, tag, name, sweep=None) -> list[dict]:
    out = []
    for d in docs:
        if sweep and d.get("sweep") != sweep:
            continue
        if method and d.get("method") != method or dataset and d.get("dataset") != dataset:
            continue
        if status and d.get("status") != status or tag and tag not in (d.get("tags") or []):
            continue
        if name and not fnmatch.fnmatch(d.get("name") or "", name):
            continue
        out.append(d)
    return out
