"""The collector's core: a ``torch.profiler`` run with a schedule, atomic trace
files per rank and cycle, progress lines and a ``manifest.json``.

Used by the built-in workloads, by user scripts (hooks call :meth:`profile.step`)
and directly as ``hta_report.profile``.  torch is imported on entry, not on import.
"""
from __future__ import annotations

import json
import os
import shlex
import time
from datetime import timedelta
from pathlib import Path
from typing import Any, Dict, List, Optional

from ..load.discovery import is_trace_name
from ..errors import CollectError, plural
from . import environment as env
from .manifest import MANIFEST_NAME, build_manifest, utc_now_iso, write_manifest
from .progress import Progress
from .traces import TRACE_SUFFIX, trace_file_name, write_error_reason, write_trace_atomically

#: Seconds rank 0 waits for the other ranks' lists of trace files.
GATHER_TIMEOUT_S = 60.0
_STORE_PREFIX = "hta_report_collect/trace_files/"


def check_schedule(wait: int, warmup: int, active: int, repeat: int) -> None:
    """Validate a ``torch.profiler.schedule`` (all counts in profiler steps).

    Raises:
        CollectError: a count is negative, ``active`` < 1.
    """
    for name, value in (("wait", wait), ("warmup", warmup), ("repeat", repeat)):
        if value < 0:
            raise CollectError(f"--{name} must be >= 0 (got {value})")
    if active < 1:
        raise CollectError(f"--active must be >= 1 (got {active})")


def prepare_output_dir(out_dir: Path) -> Path:
    """Create ``out_dir`` if needed and make sure it holds no earlier traces.

    Mixing runs in one directory would give the analyzer two files per rank.

    Raises:
        CollectError: ``out_dir`` is a file, cannot be created, or already holds
            trace files or a manifest.json.
    """
    out_dir = Path(out_dir)
    if out_dir.exists() and not out_dir.is_dir():
        raise CollectError("output path exists and is not a directory", out_dir)
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise CollectError(f"cannot create output directory: {exc.strerror or exc}", out_dir) from None
    old = [p.name for p in out_dir.iterdir() if p.is_file()
           and (is_trace_name(p) or p.name == MANIFEST_NAME)]
    if old:
        raise CollectError(f"output directory already holds {plural(len(old), 'trace or manifest file')} "
                           f"(e.g. {sorted(old)[0]}); use a new directory or remove them", out_dir)
    return out_dir



def cuda_sync_events_config(torch: Any) -> Optional[Any]:
    """The profiler's experimental configuration that records CUDA
    synchronization events (``cuda_sync`` events: stream and device
    synchronizes, event waits with their event ids), which say what each
    synchronization waited for: HTA's critical path needs them, and the
    replay (:mod:`hta_report.analysis.replay`), which infers those edges from
    the times, can be checked against them. None where this PyTorch has no
    such option."""
    try:
        from torch.profiler import _ExperimentalConfig
        return _ExperimentalConfig(enable_cuda_sync_events=True)
    except (ImportError, TypeError, AttributeError):
        return None

class profile:  # noqa: N801 - mirrors torch.profiler.profile
    """Profile a loop with ``torch.profiler`` and write traces hta-report can analyze.

    Usage::

        with hta_report.profile("traces/", wait=1, warmup=1, active=7) as prof:
            for batch in loader:
                train_step(batch)
                prof.step()

    Each completed cycle (``wait + warmup + active`` steps; ``repeat`` cycles,
    0 = unlimited) is written by every rank as
    ``rank-<r>.<host>_<pid>.<cycle>.pt.trace.json.gz``, atomically.  A cycle cut
    short by the end of the block is discarded, not written.  On exit rank 0
    writes ``manifest.json`` listing every rank's files.

    Args:
        out_dir: output directory; created if missing; must hold no traces yet.
        wait, warmup, active, repeat: the ``torch.profiler.schedule``, in steps.
        record_shapes, with_stack, profile_memory: passed to ``torch.profiler.profile``.
        device: ``auto``, ``cpu`` or ``cuda``; ``cuda`` adds CUDA activity.
        quiet: no progress lines on stderr.
        run: description of what runs, stored under ``run`` in the manifest.
        manifest: write ``manifest.json`` (rank 0 only).

    Attributes:
        trace_files: paths this process wrote.
        steps_run: number of :meth:`step` calls so far.
        discarded_cycles: cycles cut short and therefore not written.
        write_errors: what this process could not write and why, one line each
            (``trace rank-0.h_1.1.pt.trace.json.gz: no space left on device``);
            rank 0 lists its own in the manifest as ``write_errors_rank0``.

    Raises:
        CollectError: on entry, for a bad schedule, missing PyTorch,
            unavailable CUDA or a non-empty output directory; on exit, when a
            trace could not be written.
    """

    def __init__(self, out_dir, wait: int = 1, warmup: int = 1, active: int = 7, repeat: int = 1,
                 *, record_shapes: bool = True, with_stack: bool = False,
                 profile_memory: bool = False, device: str = "auto", quiet: bool = False,
                 run: Optional[Dict[str, Any]] = None, manifest: bool = True) -> None:
        check_schedule(wait, warmup, active, repeat)
        self.out_dir = Path(os.path.abspath(out_dir))  # a script may change directory before traces are written
        self.schedule = {"wait": wait, "warmup": warmup, "active": active, "repeat": repeat}
        self.options = {"record_shapes": record_shapes, "with_stack": with_stack,
                        "profile_memory": profile_memory}
        self.requested_device = device
        self.device = "cpu"
        #: Whether the profiler records CUDA synchronization events (:func:`cuda_sync_events_config`).
        self.sync_events = False
        self.quiet = quiet
        self.run: Dict[str, Any] = dict(run) if run else {"mode": "api"}
        self.write_manifest = manifest
        self.trace_files: List[Path] = []
        self.steps_run = 0
        #: total steps the caller expects to run, for progress lines only (None: unknown)
        self.expected_steps: Optional[int] = None
        self.discarded_cycles = 0
        self.manifest_path: Optional[Path] = None
        self._prof: Any = None
        self._pid = os.getpid()
        self._host = env.host_name()
        self._ranks = env.rank_info()
        self._stopping = False
        self._cycles = 0
        self._write_error: Optional[BaseException] = None
        self.write_errors: List[str] = []
        self._start_time = ""
        self._start_epoch = 0.0
        self.progress = Progress(quiet=quiet, rank=self._ranks.rank,
                                 world_size=self._ranks.world_size, interval_s=0.5)

    # ----------------------------------------------------------------- schedule
    @property
    def cycle_length(self) -> int:
        """Steps in one cycle: ``wait + warmup + active``."""
        s = self.schedule
        return s["wait"] + s["warmup"] + s["active"]

    @property
    def scheduled_steps(self) -> Optional[int]:
        """Steps until the last cycle is written; None when ``repeat`` is 0 (unlimited)."""
        return self.cycle_length * self.schedule["repeat"] or None

    def phase(self, step_index: int) -> str:
        """What step ``step_index`` (0-based) is for the profiler: wait, warmup, active or after."""
        total = self.scheduled_steps
        if total is not None and step_index >= total:
            return "after the schedule, not profiled"
        cycle, pos = divmod(step_index, self.cycle_length)
        s = self.schedule
        if pos < s["wait"]:
            return f"cycle {cycle + 1}: wait"
        if pos < s["wait"] + s["warmup"]:
            return f"cycle {cycle + 1}: warmup"
        return f"cycle {cycle + 1}: active {pos - s['wait'] - s['warmup'] + 1}/{s['active']}"

    # ---------------------------------------------------------------- lifecycle
    def __enter__(self) -> "profile":
        self.start()
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        self.stop(raise_errors=exc_type is None)

    def start(self) -> None:
        """Start profiling (what ``__enter__`` does).

        Raises:
            CollectError: see the class docstring.
        """
        if self.quiet:
            env.quiet_kineto()
        torch = env.require_torch()
        self.device = env.resolve_device(self.requested_device)
        prepare_output_dir(self.out_dir)
        from torch.profiler import ProfilerActivity, schedule

        activities = [ProfilerActivity.CPU]
        if self.device == "cuda":
            activities.append(ProfilerActivity.CUDA)
        s = self.schedule
        extra = {}
        sync_config = cuda_sync_events_config(torch) if self.device == "cuda" else None
        if sync_config is not None:
            extra["experimental_config"] = sync_config
            self.sync_events = True
        self._prof = torch.profiler.profile(
            activities=activities,
            schedule=schedule(wait=s["wait"], warmup=s["warmup"], active=s["active"],
                              repeat=s["repeat"]),
            on_trace_ready=self._on_trace_ready,
            **self.options,
            **extra,
        )
        self._start_time = utc_now_iso()
        self._start_epoch = time.time()
        total = self.scheduled_steps
        self.progress.message(
            f"profiling to {self.out_dir} (schedule wait={s['wait']} warmup={s['warmup']} "
            f"active={s['active']} repeat={s['repeat']}: "
            + (f"{total} steps)" if total else "unlimited)"))
        self._prof.start()

    def step(self) -> None:
        """Mark the end of one training step (call it once per iteration).

        Ignored in forked child processes (e.g. DataLoader workers) and once stopped.
        """
        if self._prof is None or self._stopping or os.getpid() != self._pid:
            return
        done_phase = self.phase(self.steps_run)
        self.steps_run += 1
        self.progress.step(self.steps_run, self.expected_steps or self.scheduled_steps, done_phase)
        self._prof.step()

    def stop(self, raise_errors: bool = True) -> None:
        """Stop profiling, discard a cut-short cycle and write the manifest.

        Args:
            raise_errors: raise CollectError if a trace could not be written.

        Does nothing in a process forked from the one that started profiling:
        a child never writes traces or the manifest.

        Raises:
            CollectError: a trace or the manifest could not be written.
        """
        if self._prof is None or self._stopping or os.getpid() != self._pid:
            return
        self._stopping = True
        try:
            self._prof.stop()
        finally:
            if self.write_manifest and env.current_rank() == 0:
                self._write_manifest()
            elif self._ranks.distributed:
                self._publish_files()
        if self._write_error is not None and raise_errors:
            raise CollectError(f"cannot write {self.write_errors[0]}", self.out_dir)

    # ------------------------------------------------------------------ traces
    def _on_trace_ready(self, prof: Any) -> None:
        if self._stopping:
            self.discarded_cycles += 1
            self.progress.message(f"discarded cycle {self._cycles + 1}: cut short after "
                                  f"{self.steps_run} steps (not all active steps ran)")
            return
        self._cycles += 1
        name = trace_file_name(env.current_rank(), self._host, self._pid, self._cycles)
        try:
            path = write_trace_atomically(prof, self.out_dir / name)
        except OSError as exc:
            self._write_error = exc
            self.write_errors.append(f"trace {name}: {write_error_reason(exc)}")
            self.progress.message(f"could not write {self.write_errors[-1]}")
            return
        self.trace_files.append(path)
        size_kb = path.stat().st_size / 1024
        self.progress.message(f"wrote {path} ({size_kb:.0f} KiB)")

    # ---------------------------------------------------------------- manifest
    def _store(self) -> Any:
        try:
            import torch.distributed as dist
            from torch.distributed import distributed_c10d as c10d

            if dist.is_available() and dist.is_initialized():
                return c10d._get_default_store()
        except Exception:  # noqa: BLE001 - a private API; fall back to listing
            return None
        return None

    def _publish_files(self) -> None:
        store = self._store()
        if store is not None:
            try:
                store.set(f"{_STORE_PREFIX}{env.current_rank()}",
                          json.dumps([p.name for p in self.trace_files]))
            except Exception:  # noqa: BLE001 - rank 0 falls back to listing
                pass

    def _all_trace_files(self) -> tuple:
        """(file names, complete?) for all ranks, as seen by rank 0."""
        own = [p.name for p in self.trace_files]
        world = self._ranks.world_size
        if world == 1:
            return own, True
        store = self._store()
        if store is not None:
            keys = [f"{_STORE_PREFIX}{r}" for r in range(1, world)]
            try:
                store.wait(keys, timedelta(seconds=GATHER_TIMEOUT_S))
                names = list(own)
                for key in keys:
                    names.extend(json.loads(store.get(key).decode("utf-8")))
                return names, True
            except Exception:  # noqa: BLE001 - timeout or store gone: list the directory
                pass
        listed = {p.name for p in self.out_dir.glob(f"rank-*{TRACE_SUFFIX}")
                  if p.stat().st_mtime >= self._start_epoch - 1}
        return sorted(listed | set(own)), False

    def _write_manifest(self) -> None:
        names, complete = self._all_trace_files()
        data = build_manifest(
            start_time=self._start_time, schedule=self.schedule,
            profiler={**self.options, "activities": ["CPU", "CUDA"] if self.device == "cuda" else ["CPU"],
                      "cuda_sync_events": self.sync_events},
            world_size=self._ranks.world_size, devices=env.device_names(self.device),
            device=self.device, host=self._host, trace_files=names, steps_run=self.steps_run,
            run=self.run)
        data["trace_files_complete"] = complete
        data["discarded_cycles_rank0"] = self.discarded_cycles
        if self.write_errors:  # the manifest says why a trace is missing, not just that none is listed
            data["write_errors_rank0"] = list(self.write_errors)
        try:
            self.manifest_path = write_manifest(self.out_dir, data)
        except OSError as exc:
            if self._write_error is None:
                self._write_error = exc
                self.write_errors.append(f"{MANIFEST_NAME}: {write_error_reason(exc)}")
            return
        self.progress.message(f"wrote {self.manifest_path} ({plural(len(names), 'trace file')})")
        if names:
            self.progress.message(f"next: hta-report analyze {shlex.quote(str(self.out_dir))} -o report.html")
            if self.run.get("mode") == "script" and not self.options.get("with_stack"):
                self.progress.message("for the lines of your code behind each finding (and SARIF for pull "
                                      "requests), collect again with --with-stack")
