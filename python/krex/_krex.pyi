# SPDX-License-Identifier: Apache-2.0
# Type stubs of the extension module krex._krex (python/src/krex_python.cpp).
# tests/python/test_binding.py checks that they name what the module defines.
from typing import Any, Callable, Dict, List, Optional, Sequence, TypeVar, Union

_T = TypeVar("_T")

backend: str
compare_default_samples: int
compare_default_confidence: float

class Error(RuntimeError):
    step: str
    hint: str
    code: int

class Tenant:
    # The keywords after `*` are written by `krexctl options --write .` from
    # include/krex/detail/option_table.hpp (tests/test_tables.cpp checks it).
    def __init__(
        self,
        device: int = 0,
        *,
        segment: str = ...,
        access: str = ...,
        gate_park_ms: int = ...,
        drain_deadline_ms: int = ...,
        lock_wait_ms: int = ...,
        lease_ms: int = ...,
        allow_contended: bool = ...,
        freeze: str = ...,
        scope: str = ...,
        freeze_deadline_ms: int = ...,
        handoff_grace_ms: int = ...,
        cgroup_root: str = ...,
        pin: bool = ...,
        reserved_cores: int = ...,
        confine: bool = ...,
        gate_contexts: bool = ...,
        release_on_leave: bool = ...,
        host_devices: int = ...,
        gating: str = ...,
        quiet_deadline_ms: int = ...,
        quiet_tolerance_pct: int = ...,
    ) -> None: ...
    @property
    def device(self) -> int: ...
    @property
    def slot(self) -> int: ...
    @property
    def segment_name(self) -> str: ...
    @property
    def freeze(self) -> str: ...
    @property
    def cgroup_root(self) -> str: ...
    @property
    def gating(self) -> str: ...
    @property
    def reserved_cpus(self) -> List[int]: ...
    @property
    def protection_notes(self) -> List[str]: ...
    @property
    def drains(self) -> int: ...
    @property
    def syncs(self) -> int: ...
    @property
    def submits(self) -> int: ...
    @property
    def lock_wait_ms(self) -> int: ...
    @property
    def joined(self) -> bool: ...
    @property
    def join_report(self) -> Dict[str, Union[float, bool]]: ...
    def leave(self) -> None: ...
    def submit(self, fn: Callable[[], _T]) -> _T: ...
    def __enter__(self) -> "Tenant": ...
    def __exit__(self, *args: Any) -> bool: ...

class Region:
    def __init__(self, tenant: Tenant) -> None: ...
    def enter(self) -> None: ...
    def exit(self) -> None: ...
    def __enter__(self) -> "Region": ...
    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> bool: ...
    @property
    def active(self) -> bool: ...
    @property
    def report(self) -> Dict[str, Any]: ...
    @property
    def tenant(self) -> Tenant: ...

def measure(
    region: Region,
    fn: Callable[..., Any],
    warmup: int = 3,
    samples: int = 50,
    warmup_ms: float = 0.0,
    timer: str = "auto",
    stream: Optional[Any] = None,
    cold_l2: bool = True,
    flush_bytes: int = 0,
    placements: int = 1,
    placement_bytes: int = 0,
) -> Dict[str, Any]: ...
def compare(
    region: Region,
    fns: Sequence[Callable[..., Any]],
    names: Optional[Sequence[str]] = None,
    warmup: int = 3,
    samples: int = 200,
    warmup_ms: float = 0.0,
    timer: str = "auto",
    stream: Optional[Any] = None,
    cold_l2: bool = True,
    flush_bytes: int = 0,
    placements: int = 1,
    placement_bytes: int = 0,
    tolerance: float = 0.005,
    confidence: float = 0.99,
    seed: int = 1,
) -> Dict[str, Any]: ...
def prepare_measure(cold_l2: bool = True, flush_bytes: int = 0) -> None: ...
def device_count(**kwargs: Any) -> int: ...
