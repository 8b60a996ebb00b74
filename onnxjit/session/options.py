"""SessionOptions, RunOptions and the enums onnxruntime scripts use, with onnxruntime's defaults."""
from __future__ import annotations

import enum

from onnxjit.errors import InvalidArgument


class GraphOptimizationLevel(enum.IntEnum):
    ORT_DISABLE_ALL = 0
    ORT_ENABLE_BASIC = 1
    ORT_ENABLE_EXTENDED = 2
    ORT_ENABLE_LAYOUT = 3
    ORT_ENABLE_ALL = 99


# the short names the CLI and the benchmarks take for the levels
LEVEL_NAMES = {"disable": GraphOptimizationLevel.ORT_DISABLE_ALL, "basic": GraphOptimizationLevel.ORT_ENABLE_BASIC,
               "extended": GraphOptimizationLevel.ORT_ENABLE_EXTENDED,
               "layout": GraphOptimizationLevel.ORT_ENABLE_LAYOUT, "all": GraphOptimizationLevel.ORT_ENABLE_ALL}


class ExecutionMode(enum.IntEnum):
    ORT_SEQUENTIAL = 0
    ORT_PARALLEL = 1


class ExecutionOrder(enum.IntEnum):
    DEFAULT = 0
    PRIORITY_BASED = 1
    MEMORY_EFFICIENT = 2


class _ConfigEntries:
    def __init__(self):
        self._config: dict[str, str] = {}

    def _add(self, key: str, value: str) -> None:
        if not isinstance(key, str) or not isinstance(value, str):
            raise InvalidArgument(f"config entries are strings; got key {key!r} and value {value!r}")
        self._config[key] = value

    def _get(self, key: str) -> str:
        if key not in self._config:
            raise InvalidArgument(f"config entry {key!r} is not set")
        return self._config[key]


class SessionOptions(_ConfigEntries):
    def __init__(self):
        super().__init__()
        self.graph_optimization_level = GraphOptimizationLevel.ORT_ENABLE_ALL
        self.optimized_model_filepath = ""
        self.intra_op_num_threads = 0  # 0: all cores
        self.inter_op_num_threads = 0
        self.execution_mode = ExecutionMode.ORT_SEQUENTIAL
        self.execution_order = ExecutionOrder.DEFAULT
        self.enable_profiling = False
        self.profile_file_prefix = "onnxjit_profile_"
        self.log_severity_level = 2
        self.log_verbosity_level = 0
        self.logid = ""
        self.enable_cpu_mem_arena = True
        self.enable_mem_pattern = True
        self.enable_mem_reuse = True
        self.use_deterministic_compute = False
        self.free_dimension_overrides: dict[str, int] = {}

    def add_session_config_entry(self, key: str, value: str) -> None:
        self._add(key, value)

    def get_session_config_entry(self, key: str) -> str:
        return self._get(key)

    @property
    def config_entries(self) -> dict[str, str]:
        return dict(self._config)

    def add_free_dimension_override_by_name(self, dim_name: str, dim_value: int) -> None:
        self.free_dimension_overrides[dim_name] = int(dim_value)


class RunOptions(_ConfigEntries):
    def __init__(self):
        super().__init__()
        self.log_severity_level = 2
        self.log_verbosity_level = 0
        self.logid = ""
        self.run_tag = ""
        self.terminate = False
        self.only_execute_path_to_fetches = False

    def add_run_config_entry(self, key: str, value: str) -> None:
        self._add(key, value)

    def get_run_config_entry(self, key: str) -> str:
        return self._get(key)
