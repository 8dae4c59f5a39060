"""Synthetic dcgm-exporter ``/metrics`` text (not real data): the simulator's body, benchmarks, tests.

The shape is that of ``shared/samples/dcgm-exporter/h100-8gpu-scrape.prom`` (driver 580.105.08): metrics in
the order and with the HELP/TYPE text of dcgm-exporter's ``etc/default-counters.csv``, each metric's
series for every GPU in turn, labels ``gpu, UUID, pci_bus_id, device, modelName, Hostname,
DCGM_FI_DRIVER_VERSION`` and, on each host's GPU 0, the pod labels. Values vary plausibly per GPU and per
seed: an idle-to-busy load, temperatures that follow it, a rare hot GPU, a rare XID. Or, given ``readings``
(one per GPU: power, temperatures, clocks, counters, XID), those values instead of the random gauges and
counters: the demo (``world.dcgm_exporter.demo``) and the tests that must know exactly what was served.
No Django, no Fleet import: this plays the world.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from typing import Any

# (metric, type, help): dcgm-exporter etc/default-counters.csv (the uncommented rows), in its order.
DEFAULT_COUNTERS = (
    ("DCGM_FI_DEV_SM_CLOCK", "gauge", "SM clock frequency (in MHz)."),
    ("DCGM_FI_DEV_MEM_CLOCK", "gauge", "Memory clock frequency (in MHz)."),
    ("DCGM_FI_DEV_MEMORY_TEMP", "gauge", "Memory temperature (in C)."),
    ("DCGM_FI_DEV_GPU_TEMP", "gauge", "GPU temperature (in C)."),
    ("DCGM_FI_DEV_POWER_USAGE", "gauge", "Power draw (in W)."),
    ("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "counter", "Total energy consumption since boot (in mJ)."),
    ("DCGM_FI_DEV_PCIE_REPLAY_COUNTER", "counter", "Total number of PCIe retries."),
    ("DCGM_FI_DEV_GPU_UTIL", "gauge", "GPU utilization (in %)."),
    ("DCGM_FI_DEV_MEM_COPY_UTIL", "gauge", "Memory utilization (in %)."),
    ("DCGM_FI_DEV_ENC_UTIL", "gauge", "Encoder utilization (in %)."),
    ("DCGM_FI_DEV_DEC_UTIL", "gauge", "Decoder utilization (in %)."),
    ("DCGM_FI_DEV_XID_ERRORS", "gauge", "Value of the last XID error encountered."),
    ("DCGM_FI_DEV_FB_FREE", "gauge", "Framebuffer memory free (in MiB)."),
    ("DCGM_FI_DEV_FB_USED", "gauge", "Framebuffer memory used (in MiB)."),
    ("DCGM_FI_DEV_FB_RESERVED", "gauge", "Framebuffer memory reserved (in MiB)."),
    ("DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL", "counter", "Total number of NVLink bandwidth counters for all lanes."),
    ("DCGM_FI_DEV_VGPU_LICENSE_STATUS", "gauge", "vGPU License status"),
    ("DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", "counter", "Number of remapped rows for uncorrectable errors"),
    ("DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS", "counter", "Number of remapped rows for correctable errors"),
    ("DCGM_FI_DEV_ROW_REMAP_FAILURE", "gauge", "Whether remapping of rows has failed"),
    ("DCGM_FI_PROF_GR_ENGINE_ACTIVE", "gauge", "Ratio of time the graphics engine is active."),
    ("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", "gauge", "Ratio of cycles the tensor (HMMA) pipe is active."),
    ("DCGM_FI_PROF_DRAM_ACTIVE", "gauge",
     "Ratio of cycles the device memory interface is active sending or receiving data."),
    ("DCGM_FI_PROF_PCIE_TX_BYTES", "gauge", "The rate of data transmitted over the PCIe bus - including both "
     "protocol headers and data payloads - in bytes per second."),
    ("DCGM_FI_PROF_PCIE_RX_BYTES", "gauge", "The rate of data received over the PCIe bus - including both "
     "protocol headers and data payloads - in bytes per second."),
)
# Opt-in health fields (commented out in default-counters.csv), added with ``health_fields=True``.
HEALTH_COUNTERS = (
    ("DCGM_FI_DEV_GPU_TEMP_LIMIT", "gauge", "Thermal margin temperature (distance to nearest slowdown threshold)."),
    ("DCGM_FI_DEV_CLOCKS_EVENT_REASONS", "gauge", "Current clock event reasons (bitmask)."),
    ("DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", "counter", "Total number of single-bit volatile ECC errors."),
    ("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "counter", "Total number of double-bit volatile ECC errors."),
)
XIDS = (13, 31, 43, 48, 63, 79, 94, 119)

Gpu = tuple[str, str, str, str]  # (uuid, host, pci_bus_id, model_name)


def _columns(rng: random.Random, models: list[str]) -> dict[str, list[str]]:
    """Every metric's value for every GPU, formatted as dcgm-exporter prints them (integers, or ``%f``)."""
    count = len(models)
    rand = rng.random
    loads = [rand() ** 2 for _ in range(count)]  # most GPUs idle-ish, some busy
    hot = {index for index in range(count) if rand() < 0.002}
    temps = [25 + load * 50 + rand() * 5 + (25 if index in hot else 0) for index, load in enumerate(loads)]
    power_max = [700.0 if any(big in model for big in ("H100", "H200", "B200")) else 400.0 for model in models]
    fb_total = 81559
    fb_used = [int(load * fb_total) for load in loads]

    def rare(probability: float, make: Callable[[], object]) -> list[str]:
        return [str(make()) if rand() < probability else "0" for _ in range(count)]

    def const(value: str) -> list[str]:
        return [value] * count

    return {
        "DCGM_FI_DEV_SM_CLOCK": ["1980" if load > 0.05 else "345" for load in loads],
        "DCGM_FI_DEV_MEM_CLOCK": const("2619"),
        "DCGM_FI_DEV_MEMORY_TEMP": [str(int(temp + 3)) for temp in temps],
        "DCGM_FI_DEV_GPU_TEMP": [str(int(temp)) for temp in temps],
        "DCGM_FI_DEV_POWER_USAGE": [f"{60 + load * (top - 60) * (0.9 + rand() * 0.1):f}"
                                    for load, top in zip(loads, power_max, strict=True)],
        "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION": [str(rng.randrange(10**9, 10**13)) for _ in range(count)],
        "DCGM_FI_DEV_PCIE_REPLAY_COUNTER": rare(0.01, lambda: rng.randrange(1, 50)),
        "DCGM_FI_DEV_GPU_UTIL": [str(int(load * 100)) for load in loads],
        "DCGM_FI_DEV_MEM_COPY_UTIL": [str(int(load * 60)) for load in loads],
        "DCGM_FI_DEV_ENC_UTIL": const("0"),
        "DCGM_FI_DEV_DEC_UTIL": const("0"),
        "DCGM_FI_DEV_XID_ERRORS": rare(0.001, lambda: rng.choice(XIDS)),
        "DCGM_FI_DEV_FB_FREE": [str(fb_total - used - 520) for used in fb_used],
        "DCGM_FI_DEV_FB_USED": [str(used) for used in fb_used],
        "DCGM_FI_DEV_FB_RESERVED": const("520"),
        "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL": [str(rng.randrange(0, 10**12)) for _ in range(count)],
        "DCGM_FI_DEV_VGPU_LICENSE_STATUS": const("0"),
        "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS": const("0"),
        "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS": rare(0.02, lambda: rng.randrange(1, 8)),
        "DCGM_FI_DEV_ROW_REMAP_FAILURE": const("0"),
        "DCGM_FI_PROF_GR_ENGINE_ACTIVE": [f"{load:f}" for load in loads],
        "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE": [f"{load * 0.6:f}" for load in loads],
        "DCGM_FI_PROF_DRAM_ACTIVE": [f"{load * 0.4:f}" for load in loads],
        "DCGM_FI_PROF_PCIE_TX_BYTES": [str(int(load * 2e9)) for load in loads],
        "DCGM_FI_PROF_PCIE_RX_BYTES": [str(int(load * 3e9)) for load in loads],
        "DCGM_FI_DEV_GPU_TEMP_LIMIT": [str(int(87 - temp)) for temp in temps],
        "DCGM_FI_DEV_CLOCKS_EVENT_REASONS": [
            "1" if load < 0.05 else ("64" if index in hot else ("4" if load > 0.9 else "0"))
            for index, load in enumerate(loads)],
        "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL": rare(0.03, lambda: rng.randrange(1, 100)),
        "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL": const("0"),
    }


def _labels(gpus: list[Gpu], driver_version: str, uuid_label: str = "UUID") -> list[str]:
    """The label text (between the braces) per GPU; ``gpu`` is the index within its host, in the order given."""
    index_on_host: dict[str, int] = {}
    texts = []
    for uuid, host, pci_bus_id, model in gpus:
        index = index_on_host.get(host, 0)
        index_on_host[host] = index + 1
        pod = (',container="main",namespace="dynamo-workload",'
               f'pod="vllm-agg-0-vllmdecodeworker-{uuid[4:9]}",pod_uid=""') if index == 0 else ""
        texts.append(f'gpu="{index}",{uuid_label}="{uuid}",pci_bus_id="{pci_bus_id}",device="nvidia{index}",'
                     f'modelName="{model}",Hostname="{host}",DCGM_FI_DRIVER_VERSION="{driver_version}"{pod}')
    return texts


def dcgm_text_for(gpus: list[Gpu], *, seed: int, driver_version: str = "580.105.08",
                  health_fields: bool = False, readings: Sequence[Any] | None = None,
                  uuid_label: str = "UUID") -> str:
    """dcgm-exporter text for ``gpus`` (uuid, host, pci_bus_id, model_name), deterministic for ``seed``.

    ``health_fields`` adds the opt-in T.Limit, clock-event-reason and ECC series. 100,000 GPUs: 2.5 million
    lines, 600 MB, about 5-7 s (most of it building the one big string). Note one 64 MiB body holds
    about 11,000 GPUs of this shape. ``readings`` (one per GPU, with the fields of
    ``telemetry.synth.DemoReading``: power_w, throttle_mask, gpu_temp_c, mem_temp_c, tlimit_c, sm_clock_mhz,
    ecc_sbe, ecc_dbe, remap_corr, remap_unc, remap_failure, xid) replace the random gauges and counters.
    ``uuid_label``: ``uuid`` is what dcgm-exporter's ``--use-old-namespace`` prints.
    """
    rng = random.Random(seed)
    models = [gpu[3] for gpu in gpus]
    columns = _columns(rng, models)
    if readings is not None:
        readings_columns(columns, readings, models)
    labels = _labels(gpus, driver_version, uuid_label)
    counters = DEFAULT_COUNTERS + (HEALTH_COUNTERS if health_fields else ())
    parts: list[str] = []
    for metric, kind, help_text in counters:
        parts.append(f"# HELP {metric} {help_text}\n# TYPE {metric} {kind}\n")
        prefix = metric + "{"
        parts.extend(f"{prefix}{label}}} {value}\n" for label, value in zip(labels, columns[metric], strict=True))
    return "".join(parts)


def synthetic_gpus(count: int, *, seed: int, per_host: int = 8,
                   model: str = "NVIDIA H100 80GB HBM3") -> list[Gpu]:
    """``count`` made-up GPUs, ``per_host`` to a host (``node-00001``...), on H100 HGX bus ids."""
    rng = random.Random(seed)
    buses = ("18", "2A", "3A", "5D", "9A", "AB", "BA", "DB", "53", "64", "75", "86", "97", "A8", "B9", "CA")
    gpus = []
    for index in range(count):
        hex_ = f"{rng.getrandbits(128):032x}"
        uuid = f"GPU-{hex_[:8]}-{hex_[8:12]}-{hex_[12:16]}-{hex_[16:20]}-{hex_[20:]}"
        host = f"node-{index // per_host + 1:05d}"
        gpus.append((uuid, host, f"00000000:{buses[index % per_host % len(buses)]}:00.0", model))
    return gpus


def readings_columns(columns: dict[str, list[str]], readings: Sequence[Any], models: list[str]) -> None:
    """Replace the random gauges and counters by ``readings`` (the other series keep their values)."""
    power_max = [700.0 if any(big in model for big in ("H100", "H200", "B200")) else 400.0 for model in models]
    loads = [min(1.0, max(0.0, (r.power_w - 60) / (top - 60))) for r, top in zip(readings, power_max, strict=True)]
    columns.update({
        "DCGM_FI_DEV_SM_CLOCK": [str(r.sm_clock_mhz) for r in readings],
        "DCGM_FI_DEV_MEMORY_TEMP": [str(r.mem_temp_c) for r in readings],
        "DCGM_FI_DEV_GPU_TEMP": [str(r.gpu_temp_c) for r in readings],
        "DCGM_FI_DEV_POWER_USAGE": [f"{r.power_w:f}" for r in readings],
        "DCGM_FI_DEV_PCIE_REPLAY_COUNTER": ["0"] * len(readings),
        "DCGM_FI_DEV_GPU_UTIL": [str(int(load * 100)) for load in loads],
        "DCGM_FI_DEV_XID_ERRORS": [str(r.xid) for r in readings],
        "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS": [str(r.remap_unc) for r in readings],
        "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS": [str(r.remap_corr) for r in readings],
        "DCGM_FI_DEV_ROW_REMAP_FAILURE": [str(int(r.remap_failure)) for r in readings],
        "DCGM_FI_PROF_GR_ENGINE_ACTIVE": [f"{load:f}" for load in loads],
        "DCGM_FI_DEV_GPU_TEMP_LIMIT": [str(r.tlimit_c) for r in readings],
        "DCGM_FI_DEV_CLOCKS_EVENT_REASONS": [str(r.throttle_mask) for r in readings],
        "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL": [str(r.ecc_sbe) for r in readings],
        "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL": [str(r.ecc_dbe) for r in readings],
    })
