"""Where the simulator's GPU list comes from: a file (one ``uuid,hostname,pci_bus_id,model`` line per GPU, or a
JSON list of such 4-lists) or Fleet's REST API (``/api/v1/gpus/``: placed GPUs with a UUID)."""

from __future__ import annotations

import csv
import io
import json
import urllib.request
from pathlib import Path

Gpu = tuple[str, str, str, str]  # (uuid, host, pci_bus_id, model_name)


def gpus_from_file(path: str | Path) -> list[Gpu]:
    """The GPUs of ``path``: CSV lines ``uuid,hostname,pci_bus_id,model`` (``#`` comments) or a JSON list."""
    text = Path(path).read_text()
    if text.lstrip().startswith("["):
        return [tuple(str(v) for v in item) for item in json.loads(text)]  # type: ignore[misc]
    gpus = []
    for n, row in enumerate(csv.reader(io.StringIO(text)), start=1):
        if not row or row[0].startswith("#"):
            continue
        if len(row) != 4:
            raise ValueError(f"{path}: line {n}: want uuid,hostname,pci_bus_id,model; got {len(row)} fields")
        gpus.append((row[0], row[1], row[2], row[3]))
    return gpus


def write_gpus_file(path: str | Path, gpus: list[Gpu]) -> None:
    """Write ``gpus`` as :func:`gpus_from_file` reads them (atomically: a reader never sees half a file)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    out = io.StringIO()
    csv.writer(out, lineterminator="\n").writerows(gpus)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(out.getvalue())
    tmp.replace(path)


def gpus_from_api(base_url: str, *, token: str = "", timeout: float = 30.0, page_size: int = 1000) -> list[Gpu]:
    """Every placed GPU with a UUID from Fleet's ``GET /api/v1/gpus/`` (cursor pages of ``page_size``)."""
    url: str | None = base_url.rstrip("/") + f"/api/v1/gpus/?page_size={page_size}"
    headers = {"Accept": "application/json"}
    if token:
        headers["Authorization"] = f"Token {token}"
    gpus = []
    while url:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=timeout) as response:  # noqa: S310
            page = json.load(response)
        for gpu in page.get("results", []):
            server = gpu.get("server") or {}
            if gpu.get("uuid") and server.get("hostname"):
                gpus.append((gpu["uuid"], server["hostname"], gpu.get("pci_bus_id") or "",
                             (gpu.get("model") or {}).get("name", "")))
        url = page.get("next")
    gpus.sort(key=lambda g: (g[1], g[2]))
    return gpus
