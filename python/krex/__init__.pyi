# SPDX-License-Identifier: Apache-2.0
# Type stubs of the krex package (__init__.py and patch.py).
# tests/python/test_binding.py checks that they name what the package exports.
from types import TracebackType
from typing import Any, Callable, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple, Type, Union

from ._krex import Error as Error
from ._krex import Region as _Region
from ._krex import Tenant as Tenant
from ._krex import backend as backend
from ._krex import prepare_measure as prepare_measure

__all__ = ["Error", "Tenant", "backend", "region", "measure", "compare", "prepare_measure", "patch",
           "unpatch", "patched",
           "process_tenant", "last_report", "in_region", "Pool", "PoolError", "WorkerDied",
           "worker_tenant"]
__version__: str

def in_region() -> bool: ...

class region:
    def __init__(self, tenant: Tenant) -> None: ...
    def __enter__(self) -> "region": ...
    def __exit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> bool: ...
    def enter(self) -> None: ...
    def exit(self) -> None: ...
    @property
    def report(self) -> Dict[str, Any]: ...
    @property
    def active(self) -> bool: ...
    @property
    def tenant(self) -> Tenant: ...

def measure(
    r: Union[region, _Region],
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
    r: Union[region, _Region],
    fns: Union[Sequence[Callable[..., Any]], Mapping[str, Callable[..., Any]]],
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
def patch(also: Iterable[Tuple[str, str]] = (), join: bool = False, **options: Any) -> bool: ...
def unpatch(leave: bool = True) -> None: ...
def patched() -> List[str]: ...
def process_tenant(device: Optional[int] = None) -> Tenant: ...
def last_report() -> Optional[Dict[str, Any]]: ...

from .pool import Pool as Pool
from .pool import PoolError as PoolError
from .pool import WorkerDied as WorkerDied
from .pool import worker_tenant as worker_tenant
