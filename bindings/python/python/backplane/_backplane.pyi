"""Type stubs of backplane's native module (bindings/python/src/lib.rs)."""

import os
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple, Union

import numpy as np

__version__: str

class Error(Exception):
    """An error of the backplane host; the message is the host's."""

class ModelError(Error):
    """The model could not be read or imported."""

class UnsupportedError(Error):
    """No assignment of the network's layers to the preferred backends exists."""

class InputError(Error):
    """The inputs given to run() do not match the network; nothing ran."""

class BackendError(Error):
    """A backend returned an error while setting up or running the network."""

class BackendFaultError(BackendError):
    """A backend faulted (panicked); its runtime does not use it again."""

_Dim = Union[int, str, None]
_Tensor = Tuple[str, Optional[List[_Dim]], np.dtype]

class Runtime:
    """A runtime: its registry of backends and the report of how it was filled."""

    def __init__(
        self,
        paths: Union[None, str, Sequence[Union[str, "os.PathLike[str]"]]] = None,
        builtin: bool = True,
        isolate: bool = False,
        out_of_process: Optional[Sequence[str]] = None,
    ) -> None: ...
    @property
    def api_version(self) -> str:
        """The Backend API version of this host, "MAJOR.MINOR"."""
    def report(self) -> Dict[str, Any]:
        """The discovery report: paths, every candidate with its verdict, backends."""
    def backends(self) -> List[Dict[str, Any]]:
        """The registered backends: id, source, file, version, capabilities, ..."""
    def default_preferences(self) -> List[str]:
        """The backend ids used when none are named: every plugin, then CpuRef."""
    def load(
        self,
        model: Union[str, "os.PathLike[str]", bytes],
        backends: Optional[Sequence[str]] = None,
        options: Optional[Mapping[str, Mapping[str, Union[str, int, float, bool]]]] = None,
        shapes: Optional[Mapping[str, Sequence[int]]] = None,
        fusion: bool = True,
        cache_size: int = 8,
        cache_bytes: Optional[int] = None,
        reoptimize: bool = False,
        max_memory: Optional[Union[int, str]] = None,
    ) -> "Network":
        """Reads an ONNX model (a path or its bytes) for the backend preferences; it runs any
        input shape that fits, keeping plans for the `cache_size` most recent sets of shapes
        within `cache_bytes` (default 512 MiB). `max_memory` (bytes, or text such as "4G";
        default physical memory) is the memory budget of each load."""

class Network:
    """A loaded network."""

    @property
    def inputs(self) -> List[_Tensor]:
        """The graph inputs as declared: [(name, shape, numpy dtype)]; a dimension is an int,
        a symbolic name (str) or None."""
    @property
    def outputs(self) -> List[_Tensor]:
        """The graph outputs as declared: [(name, shape, numpy dtype)]."""
    def run(self, inputs: Mapping[str, np.ndarray]) -> Dict[str, np.ndarray]:
        """Runs once at any input shapes that fit; returns {output name: array}. Releases the
        GIL while it runs: other threads must not modify the input arrays meanwhile. float16
        tensors are not supported."""
    def cache_info(self) -> Dict[str, Any]:
        """The plan cache: entries, bytes, capacity, byte_capacity, and shapes (one
        {input: shape} per plan, most recently used first)."""
    def explain(self, detail: str = "all") -> str:
        """Which backend runs each layer, and why: `backplane run --explain=DETAIL`'s text,
        detail "summary", "layers" or "all" (every layer)."""
    def metadata(self) -> Dict[str, Any]:
        """The model's metadata with onnxruntime's ModelMetadata names: producer_name,
        graph_name, graph_description, domain, description, version, custom_metadata_map."""
    def layers_per_backend(self) -> Dict[str, int]:
        """How many layers each backend runs in the latest run's plan."""
    def backend_of(self, name: str) -> Optional[str]:
        """The backend that runs layer `name` in the latest run's plan."""
