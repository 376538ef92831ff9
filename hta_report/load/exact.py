"""The exact times of fractional-µs traces, kept beside HTA's rounded ones.

Every trace current PyTorch writes has fractional microseconds
(``"ts": 4457415638173.640``). HTA's ``round_down_time_stamps`` rounds each
event inward to whole µs (``ts`` up, ``ts + dur`` down), so a sub-µs event
gets ``dur`` -1 or 0. HTA's own analyses run on those rounded values, and the
report's figures taken from HTA stay HTA's; our own metrics (steps, CPU side,
synchronization, copies, attribution...) read the exact times instead
(:class:`hta_report.analysis.events.RankEvents`), so no negative time is
shown. Both parser paths (:mod:`.fastparse`, :mod:`.hta_parser`) add the two
columns below where HTA rounds; :func:`hta_report.load.traces.align_and_filter`
moves them with HTA's alignment.
"""
from __future__ import annotations

import numpy as np

#: Columns beside HTA's with the exact ``ts`` and ``dur`` (µs, float64) of
#: traces whose fractional times HTA rounds to whole µs.
EXACT_TS, EXACT_DUR = "exact_ts", "exact_dur"
EXACT_COLUMNS = (EXACT_TS, EXACT_DUR)


def will_round(ts_dtype) -> bool:
    """Whether HTA's ``round_down_time_stamps`` rounds a ``ts`` column of this
    dtype (float64, unless HTA's ns rounding is disabled)."""
    import hta.configs.env_options as hta_options

    return ts_dtype == np.float64 and not hta_options.disable_ns_rounding()


def add_exact_times(df) -> None:
    """Before HTA's ``round_down_time_stamps`` on ``df`` (HTA's event frame
    from ``pd.DataFrame(traceEvents)``): when it will round, copy the exact
    ``ts`` and ``dur`` (µs, float64) into :data:`EXACT_TS` and
    :data:`EXACT_DUR`; the columns then follow every row HTA keeps."""
    if not will_round(df["ts"].dtype):
        return
    df[EXACT_TS] = df["ts"].to_numpy(dtype=np.float64, copy=True)
    df[EXACT_DUR] = (df["dur"].to_numpy(dtype=np.float64, copy=True) if "dur" in df.columns
                     else np.full(len(df), np.nan))
