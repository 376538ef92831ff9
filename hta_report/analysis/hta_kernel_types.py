"""HTA's kernel classification, once per kernel name.

HTA's temporal breakdown, GPU kernel breakdown and communication overlap
(``hta.analyzers.breakdown_analysis``, ``hta.analyzers.communication_analysis``)
each classify every GPU event of a rank with ``hta.utils.utils.get_kernel_type(name)``
(up to three regular-expression matches) inside a row-by-row
``DataFrame.apply``, which builds a pandas ``Series`` per GPU event (three
times 23,000 on a 28 MB rank) for a few hundred distinct names. HTA's frames
are handed to those analyses as :class:`KernelTypeFrame`, whose ``apply``
calls HTA's own lambda once per distinct name instead (see its doc): HTA's
functions and modules are left as they are (an earlier version put
``get_kernel_type`` behind a cache by replacing it in HTA's modules,
process-wide; the frame alone does the work now).
"""
from __future__ import annotations

import types

import numpy as np
import pandas as pd

#: The HTA modules that call ``get_kernel_type`` row by row.
CALLERS = ("hta.analyzers.breakdown_analysis", "hta.analyzers.communication_analysis",
           "hta.analyzers.trace_counters")


class KernelTypeFrame(pd.DataFrame):
    """A ``pandas.DataFrame`` whose row-by-row ``apply`` over one column
    calls the function once per distinct value, when the result cannot differ.

    HTA classifies GPU events with ``frame[["name"]].apply(lambda x:
    get_kernel_type(sym_table[x["name"]]), axis=1)``: pandas builds a row
    ``Series`` per event. A row of a one-column frame is the column's value
    and the row's label; a function that never reads the label (``x.name``)
    returns the same for equal values. So :meth:`apply` takes that path only
    for a lambda of one of the modules of :data:`CALLERS` that names nothing
    but ``get_kernel_type`` and ``sym_table`` (:func:`_per_value`), applied
    along ``axis=1`` with no other argument to a one-column frame of
    integers (HTA's symbol ids); everything else is pandas' own ``apply``. Results equal pandas' value for value, index and
    dtype (``tests/test_hta_kernel_types.py``). Frames derived from this one
    (selections, ``copy``) keep the class, as pandas' subclassing guide has it.

    The function is applied by pandas' own ``apply`` to the first row of each
    distinct value, and the results spread to every row of that value.

    Measured on rank 0 of the 8-rank fractional benchmark (23,000 GPU events,
    a few hundred distinct names): HTA's temporal breakdown 31 -> 9 ms,
    communication overlap 35 -> 13 ms.
    """

    @property
    def _constructor(self):
        return KernelTypeFrame

    def _constructor_from_mgr(self, mgr, axes):
        # pandas' own runs a subclass's __init__ again on each derived frame (HTA's idle-time
        # and launch statistics took 2 and 3 ms longer so); the class's frame from the block
        # manager, as pandas makes a DataFrame's
        return type(self)._from_mgr(mgr, axes=axes)

    def _constructor_sliced_from_mgr(self, mgr, axes):
        ser = pd.Series._from_mgr(mgr, axes)
        object.__setattr__(ser, "_name", None)  # as pandas' own: the caller sets the name
        return ser

    def apply(self, func, axis=0, raw=False, result_type=None, args=(), **kwargs):  # noqa: D102 - pandas' own
        if (axis in (1, "columns") and not raw and result_type is None and not args and not kwargs
                and _per_value(func) and self.shape[1] == 1 and self.shape[0] > 0
                and self.dtypes.iloc[0].kind in "iu"):
            # pandas' own apply over the first row of each distinct value (a row Series is
            # built once and refilled there; one built per value took 50 us)
            _, first, codes = np.unique(self.iloc[:, 0].to_numpy(), return_index=True, return_inverse=True)
            per_value = pd.DataFrame(self.iloc[first]).apply(func, axis=1).tolist()
            return pd.Series([per_value[c] for c in codes.tolist()], index=self.index)
        return super().apply(func, axis=axis, raw=raw, result_type=result_type, args=args, **kwargs)


#: What the code of a function :meth:`KernelTypeFrame.apply` calls once per
#: value may name: HTA's ``get_kernel_type`` (a function of the name alone:
#: regular expressions over it, returning a ``str``) and its symbol table,
#: nothing else.
_PER_VALUE_NAMES = frozenset({"get_kernel_type", "sym_table"})


def _per_value(func) -> bool:
    """Whether :meth:`KernelTypeFrame.apply` may call ``func`` once per value:
    a lambda of one of :data:`CALLERS` whose code names only
    :data:`_PER_VALUE_NAMES` (globals or closure), as HTA's
    ``lambda x: get_kernel_type(sym_table[x["name"]])``: it cannot read the
    row's label or keep state."""
    if not isinstance(func, types.FunctionType) or func.__module__ not in CALLERS or func.__name__ != "<lambda>":
        return False
    code = func.__code__
    return (code.co_argcount == 1 and set(code.co_names) | set(code.co_freevars) <= _PER_VALUE_NAMES
            and not any(isinstance(c, types.CodeType) for c in code.co_consts))
