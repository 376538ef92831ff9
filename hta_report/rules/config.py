"""Rule thresholds in one configuration object, overridable from TOML.

Defaults carry their source; "proposal" marks thresholds without a published
one. Users override them in ``[tool.hta-report]`` of ``pyproject.toml`` in the
current directory, or in a file passed with ``--config FILE.toml`` (top-level
keys, or a ``[tool.hta-report]`` table)::

    [tool.hta-report]
    dataloader_pct = 10
    disable = ["step-time-outliers"]
"""
from __future__ import annotations

import dataclasses
import math
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Collection, Dict, List, Mapping, Optional

from ..errors import InputError


@dataclass
class AdviceConfig:
    """Rule thresholds (percentages are of the step time unless said otherwise).

    Attributes:
        high_pct: a finding is ``high`` when its estimated gain is at least this
            % of the step; XProf's "highly input bound" band (20 %).
        medium_pct: ``medium`` from this % of the step; XProf's "moderately
            input bound" band (5 %). Below it a finding is ``low``.
        dataloader_pct: ``dataloader-bound``, GPU idle waiting for (or, without GPU activity, host
            time in) the DataLoader above this % of the step (TensorBoard
            profiler 5 %, XProf 5 %).
        sync_pct: ``sync-in-step``, cost of host-device synchronization above this % of the
            step (proposal: Nsight Systems ``cuda_api_sync`` lists every call).
        gpu_utilization_pct: ``low-gpu-utilization``, kernel-busy time below this % of the step
            (TensorBoard profiler and Nsight Systems ``gpu_time_util``: 50 %).
        gap_pct: ``gpu-gaps``, GPU gaps longer than this % of the step (proposal;
            Nsight Systems ``gpu_gaps`` uses 500 ms for whole runs).
        stream_wait_pct: ``gpu-idle``, GPU idle with the next operation already
            launched (HTA's "other" idle) at or above this % of the step
            (proposal; XProf's 5 % "moderate" band).
        launch_pct: ``launch-bound``, GPU idle in gaps under 100 µs between launches at or
            above this % of the step (XProf kernel-launch time: 3 % moderate).
        short_kernel_pct: ``launch-bound``, and at least this % of kernels shorter than their
            launch call (HTA's short-kernel test; the share is a proposal):
            kernels that outlast their launch keep the GPU fed, and the
            sub-µs gaps between them are not launch overhead to remove.
        host_bound_pct: ``host-bound``, GPU idle in gaps of 100 µs or more while the host
            runs its own ops at or above this % of the step (proposal;
            XProf's 5 % "moderate" band).
        window_min_steps: ``trace-window``, fewer analyzed steps than this (warm-up step
            excluded) make the trace window too short to judge a step
            (proposal; SageMaker Debugger's step-outlier rule needs more).
        window_warmup_pct: ``trace-window``, one-off warm-up calls taking at least this % of
            the analyzed window fire the rule (proposal).
        launch_outlier_pct: ``launch-outliers``, launch calls over HTA's 50 µs cutoff costing at
            least this % of the step beyond the median launch (proposal).
        full_queue_pct: ``full-launch-queue``, a stream's launch queue at HTA's limit (1024) for
            at least this % of the trace (proposal for "a significant time").
        tensor_core_pct: ``tensor-cores-unused``, Tensor Core share of GEMM/convolution kernel time
            below this % (TensorBoard profiler: 0 %; XProf: 16-bit share < 10 %). 50: the GEMMs
            mostly run without them. At 10 a laptop Ada GPU's ResNet inference with 11 % of its
            convolution time in TF32 kernels and 89 % in float32 (20 % of the trace) passed as
            using Tensor Cores; the gain is still bounded by the float32 time off them and the
            rule's own ``tensor_core_min_step_pct``.
        tensor_core_min_major: ``tensor-cores-unused``, only on GPUs with this computeMajor or more
            (Tensor Cores since Volta, 7; TensorBoard profiler).
        tensor_core_min_step_pct: ``tensor-cores-unused``, only where the float32 GEMM/convolution
            time off Tensor Cores is at least this % of the step (proposal: the fix cannot save more
            than that time; under 1 % a precision change is not worth a review).
        tf32_pct: ``tf32-matmuls``, TF32 GEMM/convolution kernel time at or above this % of the
            step (proposal: bf16 runs it at twice the TF32 rate, so 10 % of the step saves
            about 5 %, XProf's "moderate" band, ``medium_pct``).
        layout_conversion_pct: ``layout-conversions``, cuDNN's NCHW <-> NHWC conversion kernels at
            or above this % of the step (proposal, as ``tensor_core_min_step_pct``: the fix
            cannot save more than their time; under 1 % a memory-format change is not worth a
            review).
        fusion_busy_pct: ``unfused-elementwise``, only where kernels run at least this % of the
            step (proposal: the step is then the GPU's own work, so shorter kernels shorten it;
            under it the host or idle time sets the step, ``low-gpu-utilization``'s side).
        fusion_pct: ``unfused-elementwise``, what fusing the chains of eager elementwise kernels
            saves (``ElementwiseWork.fusible_us_per_step``) at least this % of the step
            (``medium_pct``'s 5 %, XProf's "moderate" band).
        exposed_memcpy_pct: ``exposed-memcpy``, exposed copy time at or above this % of the
            step (XProf: output 5 % moderate / 20 % high).
        exposed_comm_pct: ``exposed-communication``, exposed communication above this % of the step
            (TensorBoard profiler 10 %).
        straggler_pct: ``rank-straggler``, synchronization wait or step-time spread across
            ranks at or above this % of the median step (proposal, XProf's 5 %
            "moderate" band; SageMaker Debugger uses a histogram distance of 0.2).
            The wait is the one a rank shows in every analyzed step, so
            scheduling noise that moves from rank to rank does not count.
        optimizer_kernels_per_step: ``unfused-optimizer``, a non-foreach, non-fused optimizer
            step launching at least this many kernels per step (proposal).
        idle_sm_pct: ``low-sm-occupancy``, SM time left idle by compute kernels with fewer
            blocks than SMs (Σ dur × (1 − blocks per SM)) at or above this %
            of the step (proposal: no published threshold; the same band as
            ``medium_pct``).
        memory_high_pct: ``memory-near-capacity``, peak reserved or allocated memory above this %
            of the device memory (TensorBoard profiler memory view: 90 %).
        memory_low_pct: ``memory-under-used``, peak memory below this % of the device memory
            (SageMaker Debugger's BatchSize rule: GPU memory p95 < 70 %).
        step_outlier_sigma: ``step-time-outliers``, a step longer than the mean + this many
            standard deviations of the other steps (SageMaker Debugger: 3).
        step_outlier_min_steps: ``step-time-outliers``, needs at least this many analyzed steps
            (proposal).
        disable: rule ids not to run.
        library_modules: more top-level modules (``mylib``) or path prefixes
            (``src/vendor/``) whose frames are library code, not "the user's
            line" a finding points at, besides torch, the standard library and
            site-packages (:func:`hta_report.frames.is_user_frame`).
    """

    high_pct: float = 20.0
    medium_pct: float = 5.0
    dataloader_pct: float = 5.0
    sync_pct: float = 1.0
    gpu_utilization_pct: float = 50.0
    gap_pct: float = 10.0
    stream_wait_pct: float = 5.0
    launch_pct: float = 3.0
    short_kernel_pct: float = 25.0
    host_bound_pct: float = 5.0
    window_min_steps: int = 3
    window_warmup_pct: float = 1.0
    launch_outlier_pct: float = 1.0
    full_queue_pct: float = 5.0
    tensor_core_pct: float = 50.0
    tensor_core_min_major: int = 7
    tensor_core_min_step_pct: float = 1.0
    tf32_pct: float = 10.0
    layout_conversion_pct: float = 1.0
    fusion_busy_pct: float = 80.0
    fusion_pct: float = 5.0
    exposed_memcpy_pct: float = 5.0
    exposed_comm_pct: float = 10.0
    straggler_pct: float = 5.0
    optimizer_kernels_per_step: float = 10.0
    idle_sm_pct: float = 5.0
    memory_high_pct: float = 90.0
    memory_low_pct: float = 70.0
    step_outlier_sigma: float = 3.0
    step_outlier_min_steps: int = 5
    disable: List[str] = field(default_factory=list)
    library_modules: List[str] = field(default_factory=list)

    @classmethod
    def from_mapping(cls, values: Mapping[str, Any], source: str = "configuration",
                     rule_ids: Optional[Collection[str]] = None) -> "AdviceConfig":
        """A config from ``values`` (keys as the attribute names; ``-`` may
        replace ``_``), checked.

        Args:
            values: the settings.
            source: where they come from, for error messages.
            rule_ids: the catalogue's rule ids, which ``disable`` may name
                (None: not checked).

        Raises:
            InputError: ``values`` is not a table, an unknown key, a value of
                the wrong type, a threshold that is NaN, infinite, negative or
                (a ``_pct`` share) above 100, or an unknown rule id in
                ``disable`` (one line naming ``source`` and the key).
        """
        if not isinstance(values, Mapping):
            raise InputError(f"the settings must be a table of keys, got {_kind(values)}", source)
        types = {f.name: f.type for f in dataclasses.fields(cls)}
        kwargs: Dict[str, Any] = {}
        for key, value in values.items():
            name = str(key).replace("-", "_")
            if name not in types:
                known = ", ".join(sorted(types))
                raise InputError(f"unknown configuration key {_shown(key)} (known keys: {known})", source)
            if name == "disable":
                if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
                    raise InputError("disable must be a list of rule ids, e.g. disable = [\"gpu-gaps\"]", source)
                unknown = [v for v in value if rule_ids is not None and v not in rule_ids]
                if unknown:
                    hint = (": rules are named by their slug, e.g. dataloader-bound (docs/RULES.md lists both)"
                            if unknown[0][:1] == "C" and unknown[0][1:].isdigit() else "")
                    raise InputError(f"unknown rule id {_shown(unknown[0])} in disable{hint} (see `hta-report rules`)",
                                     source)
                kwargs[name] = list(value)
                continue
            if name == "library_modules":
                if not isinstance(value, list) or not all(isinstance(v, str) and v.strip("/") for v in value):
                    raise InputError("library_modules must be a list of module names or path prefixes, "
                                     "e.g. library_modules = [\"mylib\", \"src/vendor/\"]", source)
                kwargs[name] = list(value)
                continue
            kwargs[name] = _threshold(key, name, value, types[name] in ("int", int), source)
        return cls(**kwargs)


#: Thresholds ending in ``_pct`` that are not shares of a whole, so may pass
#: 100 %: the spread of step times across ranks, % of the median step.
UNBOUNDED_PCT = frozenset({"straggler_pct"})


def _threshold(key: Any, name: str, value: Any, want_int: bool, source: str) -> float | int:
    """``value`` of the threshold ``name`` (``key`` as written), checked: a
    number (an integer where ``want_int``), finite, not negative, and at most
    100 for a ``_pct`` share (every ``_pct`` field but :data:`UNBOUNDED_PCT`).
    A NaN or infinite threshold makes its comparison never (or always) true:
    the rule would say "fine" without checking, so it is refused.

    Raises:
        InputError: one line naming ``source`` and ``key``.
    """
    if isinstance(value, bool) or not isinstance(value, (int, float)) or (want_int and not isinstance(value, int)):
        raise InputError(f"{key} must be {'an integer' if want_int else 'a number'}, got {_kind(value)}", source)
    try:
        finite = math.isfinite(value)
    except OverflowError:  # an integer beyond a float's range
        finite = False
    if not finite:
        raise InputError(f"{key} must be a finite number, got {_shown(value)} (a rule compared with it would never "
                         "fire)", source)
    if value < 0:
        raise InputError(f"{key} must be >= 0, got {_shown(value)}", source)
    if name.endswith("_pct") and name not in UNBOUNDED_PCT and value > 100:
        raise InputError(f"{key} is a percentage: it must be at most 100, got {_shown(value)}", source)
    return int(value) if want_int else float(value)


#: The most characters of a value or key an error message shows.
SHOWN_MAX = 60


def _shown(value: Any) -> str:
    """``value`` as an error message shows it: its ``repr``, cut at
    :data:`SHOWN_MAX` characters (a 100 KB string or a 4,000-digit integer
    stays one short line)."""
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 10 ** 18:
        return f"{'-' if value < 0 else ''}1e+{len(str(abs(value))) - 1} (an integer)"
    text = repr(value)
    return text if len(text) <= SHOWN_MAX else text[:SHOWN_MAX - 1] + "…"


#: What TOML values are called in messages, by Python type.
_TOML_KINDS = {bool: "a boolean", str: "a string", int: "an integer", float: "a number", list: "an array",
               dict: "a table"}


def _kind(value: Any) -> str:
    """A TOML value in words, with its own text where short: ``a string 'high'``,
    ``a table``, ``an array``, ``a date-time 1979-05-27 07:32:00+00:00``."""
    kind = _TOML_KINDS.get(type(value))
    if kind is None:
        kind = {"datetime": "a date-time", "date": "a date", "time": "a time"}.get(type(value).__name__, "a value")
        return f"{kind} {_shown(str(value))[1:-1]}" if kind != "a value" else kind
    return kind if isinstance(value, (list, dict)) else f"{kind} {_shown(value)}"


def _our_table(data: Dict[str, Any], source: str) -> Optional[Any]:
    """``[tool.hta-report]`` of a TOML document (None when absent).

    Raises:
        InputError: ``tool`` or ``tool.hta-report`` is there but not a table
            (``[[tool.hta-report]]`` is an array of tables).
    """
    tool = data.get("tool")
    if tool is None:
        return None
    if not isinstance(tool, dict):
        raise InputError(f"tool must be a table ([tool.hta-report]), got {_kind(tool)}", source)
    table = tool.get("hta-report")
    if table is not None and not isinstance(table, dict):
        hint = " ([[tool.hta-report]] is an array of tables: write [tool.hta-report])" \
            if isinstance(table, list) else ""
        raise InputError(f"tool.hta-report must be a table, got {_kind(table)}{hint}", source)
    return table


def load_config(path: Optional[os.PathLike[str] | str] = None, cwd: Optional[os.PathLike[str] | str] = None,
                rule_ids: Optional[Collection[str]] = None) -> AdviceConfig:
    """The effective configuration.

    Args:
        path: a TOML file (``--config``): its top-level keys, or its
            ``[tool.hta-report]`` table when it has one.
        cwd: where to look for ``pyproject.toml`` when ``path`` is None
            (default: the current directory); its ``[tool.hta-report]`` table
            is used when present.
        rule_ids: the catalogue's rule ids (see :meth:`AdviceConfig.from_mapping`);
            :func:`hta_report.rules.load_config` passes them.

    Returns:
        :class:`AdviceConfig` with the overrides applied (defaults when there are none).

    Raises:
        InputError: the file is missing or not valid TOML (an integer past
            TOML's 64 bits included), is nested too deeply to read, holds
            ``tool`` or ``tool.hta-report`` that is not a table, an unknown
            key or rule id, a value of the wrong type (a table, an array, a
            date where a number belongs) or a threshold out of range (NaN,
            infinite, negative, a percentage above 100). One line naming the
            file and the key; never another exception, for any valid TOML.
    """
    if path is None:
        candidate = Path(cwd or os.getcwd()) / "pyproject.toml"
        if not candidate.is_file():
            return AdviceConfig()
        data = _read_toml(candidate)
        table = _our_table(data, str(candidate))
        return AdviceConfig.from_mapping(table, f"{candidate} [tool.hta-report]", rule_ids) if table else AdviceConfig()
    p = Path(path)
    if not p.is_file():
        raise InputError("configuration file not found", p)
    data = _read_toml(p)
    table = _our_table(data, str(p)) if isinstance(data.get("tool"), dict) else None
    return AdviceConfig.from_mapping(table if table is not None else data, str(p), rule_ids)


def _read_toml(path: Path) -> Dict[str, Any]:
    """The TOML file at ``path`` as a dict (``tomllib``; on Python 3.10, its
    backport ``tomli`` when installed).

    Raises:
        InputError: the file cannot be read or is not valid TOML (an integer
            of more digits than Python converts, past TOML's 64 bits, too), is
            nested too deeply for the parser, or Python 3.10 lacks ``tomli``.
    """
    if sys.version_info >= (3, 11):
        import tomllib
    else:
        try:
            # tomli: the Python 3.10 backport of tomllib, not a dependency (nor installed where mypy runs)
            import tomli as tomllib  # type: ignore[import-not-found, unused-ignore]
        except ImportError:
            raise InputError("reading a TOML configuration needs Python 3.11 or, on Python 3.10, "
                             "`pip install tomli`", path) from None
    try:
        with path.open("rb") as fh:
            data: Dict[str, Any] = tomllib.load(fh)
            return data
    except tomllib.TOMLDecodeError as exc:
        raise InputError(f"not valid TOML ({exc})", path) from exc
    except ValueError as exc:  # tomllib's int() of an integer of over 4,300 digits
        raise InputError(f"not valid TOML (an integer too large: TOML integers are 64-bit; {exc})", path) from exc
    except RecursionError as exc:
        raise InputError("nested too deeply to read (arrays or inline tables within each other)", path) from exc
    except OSError as exc:
        raise InputError(f"cannot read the configuration ({exc.strerror})", path) from exc
