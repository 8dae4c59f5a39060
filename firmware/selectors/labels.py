"""Scheduler labels: each node's firmware tuple as Slurm node features or Kubernetes node labels, so a job
can be kept on nodes with identical firmware (design/rollouts.md 4.6). Streamed: one query, read in chunks."""

from __future__ import annotations

import re
from collections.abc import Iterator

from firmware.models import FirmwareTuple
from firmware.selectors.drift import parse_tuple

FORMATS = ("slurm", "kubernetes")
LABEL_PREFIX = "fleet.io"
CHUNK = 2000
_K8S_VALUE_BAD = re.compile(r"[^A-Za-z0-9_.-]+")
_SLURM_BAD = re.compile(r"[^A-Za-z0-9_.]+")


def label_value(version: str) -> str:
    """A Kubernetes label value: at most 63 of ``[A-Za-z0-9_.-]``, alphanumeric at both ends; two GPU versions
    on one node read ``mixed``."""
    if "|" in version:
        return "mixed"
    value = _K8S_VALUE_BAD.sub("_", version)[:63]
    return value.strip("_.-")


def slurm_feature(component: str, version: str) -> str:
    value = "mixed" if "|" in version else _SLURM_BAD.sub("_", version).strip("_.")
    return f"fw_{component}_{value}"


def node_tuples() -> Iterator[tuple[str, str, dict[str, str]]]:
    """(hostname, hash8, {component: version}) for every node with observed firmware, by hostname."""
    rows = FirmwareTuple.objects.values_list("server__hostname", "tuple_hash", "tuple_text").order_by(
        "server__hostname")
    for hostname, tuple_hash, text in rows.iterator(chunk_size=CHUNK):
        yield hostname, tuple_hash[:8], parse_tuple(text)


def slurm_lines() -> Iterator[str]:
    """``NodeName=<host> Features=fw_<hash8>,fw_<component>_<version>,...`` (slurm.conf / scontrol syntax)."""
    yield "# Fleet firmware tuples as Slurm node features. Keep a job on one tuple: --constraint=fw_<hash8>\n"
    for hostname, hash8, versions in node_tuples():
        features = [f"fw_{hash8}", *(slurm_feature(c, v) for c, v in sorted(versions.items()))]
        yield f"NodeName={hostname} Features={','.join(features)}\n"


def kubernetes_lines() -> Iterator[str]:
    """``kubectl label --overwrite node <host> fleet.io/fw-tuple=<hash8> fleet.io/fw-<component>=<version> ...``"""
    yield (f"# Fleet firmware tuples as Kubernetes node labels. Keep a job on one tuple with a nodeAffinity on "
           f"{LABEL_PREFIX}/fw-tuple\n")
    for hostname, hash8, versions in node_tuples():
        labels = [f"{LABEL_PREFIX}/fw-tuple={hash8}",
                  *(f"{LABEL_PREFIX}/fw-{c.replace('_', '-')}={label_value(v)}" for c, v in sorted(versions.items()))]
        yield f"kubectl label --overwrite node {hostname} {' '.join(labels)}\n"


def label_lines(fmt: str) -> Iterator[str]:
    return kubernetes_lines() if fmt == "kubernetes" else slurm_lines()
