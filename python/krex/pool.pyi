# SPDX-License-Identifier: Apache-2.0
# Type stubs of krex.pool (pool.py): krex.Pool and its errors.
import concurrent.futures
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, TypeVar, Union

from ._krex import Error, Tenant

_T = TypeVar("_T")

__all__ = ["Pool", "PoolError", "WorkerDied", "worker_tenant"]

def worker_tenant() -> Optional[Tenant]: ...

class PoolError(Error):
    def __init__(self, message: str, hint: str = "") -> None: ...
    def __reduce__(self) -> Tuple[Any, ...]: ...

class WorkerDied(PoolError): ...

class Pool(concurrent.futures.Executor):
    def __init__(
        self,
        workers: int = 1,
        devices: Union[None, str, Sequence[int]] = None,
        *,
        device: int = 0,
        initializer: Union[None, str, Callable[[], Any]] = None,
        timeout: Optional[float] = None,
        start_timeout: float = 120.0,
        respawn: bool = True,
        start_retries: int = 3,
        recycle_on_error: bool = False,
        patch: bool = False,
        context: str = "spawn",
        shutdown_grace: float = 10.0,
        **tenant_options: Any,
    ) -> None: ...
    @property
    def devices(self) -> List[int]: ...
    def submit(  # type: ignore[override]
        self, fn: Union[str, Callable[..., _T]], /, *args: Any, **kwargs: Any
    ) -> concurrent.futures.Future[Any]: ...
    def submit_to(
        self, device: int, fn: Union[str, Callable[..., _T]], /, *args: Any, **kwargs: Any
    ) -> concurrent.futures.Future[Any]: ...
    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None: ...
    def close(self, wait: bool = True, *, cancel_futures: bool = False) -> None: ...
    def stats(self) -> Dict[str, Any]: ...
    def workers(self) -> List[Dict[str, Any]]: ...
    def __del__(self) -> None: ...
