"""Firmware: the catalog (components, releases, bundles), baselines, pools and maintenance windows
(``catalog``), and staged rollouts whose state machine lives in the database (``rollout``)."""

from firmware.models.catalog import (  # noqa: F401
    CATALOGUED,
    COMPONENT_SPECS,
    PER_GPU,
    Activation,
    Baseline,
    Bundle,
    BundleItem,
    Channel,
    ComplianceState,
    ComplianceStatus,
    ComponentSpec,
    FirmwareTuple,
    MaintenanceWindow,
    Pool,
    Release,
    UpdateMethod,
    WindowKind,
    version_key,
)
from firmware.models.rollout import (  # noqa: F401
    ErrorClass,
    Rollout,
    RolloutState,
    RolloutTarget,
    RolloutWave,
    TargetState,
    TargetStep,
    WaveState,
)
