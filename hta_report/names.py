"""Kernel names as people read them: one shortening, used wherever a name is shown.

A CUDA kernel name in a trace is a demangled C++ signature::

    void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>,
        at::detail::Array<char*, 1> >(int, at::native::FillFunctor<float>, at::detail::Array<char*, 1>)

Readers (and Nsight Systems' "base name" view) know it as
``vectorized_elementwise_kernel``. :func:`short_name` drops the return type,
the namespaces, the template arguments and the parameters, as HTA's
``hta.utils.utils.shorten_name`` does (that one keeps the namespaces, and
importing it imports pandas, which a report rendered from a cached result
must not). :func:`short_names` shortens a set of names so that they stay
apart: kernels sharing a base name get back the template arguments that tell
them apart, names (functors, ops) before values and scalar types, as deep as
needed (``vectorized_elementwise_kernel<FillFunctor>`` and
``vectorized_elementwise_kernel<CUDAFunctor_add>``). :func:`family` is the
key that groups template-argument variants of one kernel: names that differ
only in values and scalar types (``…_cta_per_row_1<float, float, float,
2ul>`` and ``…<float, float, float, 5ul>``).

Pure string functions with no dependency: reporters, the comparison and the
rules use them (:func:`rank_ranges` too: rank numbers as read, ``0–7``).
"""
from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field
from typing import Dict, Iterable, List, Optional

__all__ = ["short_name", "short_names", "family", "ellipsize", "rank_ranges", "DEFAULT_LIMIT"]

#: Longest label (characters) :func:`short_names` gives before cutting with "…".
DEFAULT_LIMIT = 100

#: Base names that say nothing alone: shown with the enclosing name (``gemvx::kernel``)
#: and a template argument that is a plain name
#: (``cutlass::Kernel<cutlass_80_tensorop_s1688gemm_64x64_32x6_tn_align4>``).
_GENERIC = {"kernel", "Kernel", "Kernel2", "device_kernel", "global_kernel"}

#: Names kept as they are: HTA's memory "kernels" (``Memcpy HtoD (Pageable -> Device)``).
_VERBATIM_PREFIXES = ("Memcpy", "Memset")

#: Template arguments that are values or scalar types, not code: variants that
#: differ only in these are one kernel (:func:`family`).
_SCALAR_TYPES = {
    "void", "bool", "char", "short", "int", "long", "float", "double", "unsigned", "signed", "size_t",
    "int8_t", "int16_t", "int32_t", "int64_t", "uint8_t", "uint16_t", "uint32_t", "uint64_t",
    "half", "__half", "Half", "BFloat16", "bfloat16", "__nv_bfloat16", "__nv_fp8_e4m3", "__nv_fp8_e5m2",
    "Float8_e4m3fn", "Float8_e5m2", "Float8_e4m3fnuz", "Float8_e5m2fnuz", "complex", "nullptr_t",
    "float2", "float4", "half2", "int2", "int4", "true", "false", "nullptr", "decltype",
}
_QUALIFIERS = {"const", "volatile", "unsigned", "signed", "long", "short", "struct", "class", "enum"}
_IDENT = re.compile(r"[A-Za-z_$~][\w$]*")
_OPEN = {"<": ">", "(": ")", "[": "]", "{": "}"}
_CLOSE = {v: k for k, v in _OPEN.items()}
_MAX_DEPTH = 6
#: Names nested deeper than this are no C++ signature anyone demangled: kept as they are.
_MAX_NESTING = 40


@dataclass
class _Node:
    """One name: ``name`` (the base name), ``scope`` (the enclosing named
    component) and template ``args``; ``value`` for a template argument that
    is a number or a scalar type (kept as written)."""

    name: str
    args: List["_Node"] = field(default_factory=list)
    scope: str = ""
    value: bool = False


def _split_top(text: str, sep: str) -> List[str]:
    """``text`` split at ``sep`` outside brackets (``<>``, ``()``, ``[]``, ``{}``);
    unbalanced closers are ignored."""
    out, depth, start, i = [], 0, 0, 0
    while i < len(text):
        c = text[i]
        if c in _OPEN:
            depth += 1
        elif c in _CLOSE and depth > 0:
            depth -= 1
        elif depth == 0 and text.startswith(sep, i):
            out.append(text[start:i])
            i += len(sep)
            start = i
            continue
        i += 1
    out.append(text[start:])
    return out


def _close(text: str, start: int) -> int:
    """Index just past the bracket group opening at ``text[start]`` (len(text) if unclosed)."""
    depth = 0
    for i in range(start, len(text)):
        if text[i] in _OPEN:
            depth += 1
        elif text[i] in _CLOSE:
            depth -= 1
            if depth == 0:
                return i + 1
    return len(text)


def _component(text: str) -> Optional[_Node]:
    """One ``::`` component, ``name<args>(params) const`` -> ``_Node(name, args)``;
    None for lambdas, ``(anonymous namespace)``, ``operator()`` and other unnamed parts."""
    text = text.strip()
    m = _IDENT.match(text)
    if m is None or text.startswith("operator"):
        return None
    node = _Node(name=m.group())
    rest = text[m.end():].lstrip()
    if rest.startswith("<"):
        end = _close(rest, 0)
        inner = rest[1:end - 1] if rest[end - 1:end] == ">" else rest[1:end]
        node.args = [_arg(a) for a in _split_top(inner, ",") if a.strip()]
    return node


def _qualified(text: str) -> Optional[_Node]:
    """The last named component of a ``::``-qualified name, with the named
    component before it as ``scope``; None when no component has a name."""
    named = [c for c in (_component(p) for p in _split_top(text, "::")) if c is not None]
    if not named:
        return None
    node = named[-1]
    if len(named) > 1:
        node.scope = named[-2].name
    return node


def _is_value(text: str) -> bool:
    """A number, a bool or a scalar type (``float const*``, ``unsigned int``, ``2ul``)."""
    words = _IDENT.findall(text)
    if not words:
        return True  # 128, -2, 0x10
    if text[:1].isdigit() or text[:1] == "-":
        return True
    return all(w in _SCALAR_TYPES or w in _QUALIFIERS for w in words)


def _arg(text: str) -> _Node:
    """A template argument: a value or scalar type (kept as written), else a (qualified) name."""
    text = " ".join(text.split())
    bare = text.replace("c10::", "").replace("at::", "").replace("std::", "")
    if _is_value(bare):
        return _Node(name=bare, value=True)
    node = _qualified(text)
    return node if node is not None else _Node(name=text, value=True)


def _function_part(text: str) -> str:
    """The qualified function name of a signature, without the parameter list
    (the first top-level ``(...)`` after a name that is not followed by
    ``::``) and the return type (what comes before the last top-level space)."""
    depth, cut, i = 0, len(text), 0
    while i < len(text):
        c = text[i]
        if c in "<[{":
            depth += 1
        elif c in ">]}" and depth > 0:
            depth -= 1
        elif c == "(":
            end = _close(text, i)
            if depth == 0 and i > 0 and (text[i - 1].isalnum() or text[i - 1] in "_>$"):
                if not text[end:].lstrip().startswith("::"):
                    cut = i
                    break
            i = end
            continue
        i += 1
    pieces = [p for p in _split_top(text[:cut], " ") if p]
    return pieces[-1] if pieces else text


def _nesting(text: str) -> int:
    """The deepest bracket nesting in ``text``."""
    depth = deepest = 0
    for c in text:
        if c in _OPEN:
            depth += 1
            deepest = max(deepest, depth)
        elif c in _CLOSE and depth > 0:
            depth -= 1
    return deepest


@functools.lru_cache(maxsize=4096)
def _parse(name: str) -> _Node:
    """``name`` as a tree (:class:`_Node`), parsed once per distinct name:
    a report names one kernel on every rank and in several sections (the
    8 ranks of the fractional benchmark: 0.29 s of a 0.44 s HTML render
    parsing the same 60 names 16 times). The nodes are never changed after
    parsing."""
    name = " ".join(str(name).split())
    if (name.startswith(_VERBATIM_PREFIXES) or not any(c in name for c in "<(:")
            or _nesting(name) > _MAX_NESTING):
        return _Node(name=name, value=True)
    node = _qualified(_function_part(name.replace("->", "")))  # operator->, as HTA's shorten_name
    return node if node is not None else _Node(name=name, value=True)


def _render(node: _Node, names: int, values: int = 0, top: bool = True, keep: Optional[List[bool]] = None) -> str:
    """``node`` with the template arguments that name code shown ``names``
    levels deep and values or scalar types ``values`` levels deep; at the
    top, ``keep`` (one flag per template argument) masks the arguments shown."""
    if node.value:
        return node.name
    generic = top and node.name in _GENERIC
    base = f"{node.scope}::{node.name}" if generic and node.scope else node.name
    if generic and names == 0 and _plain_first_name(node):
        names = 1  # cutlass::Kernel<cutlass_80_tensorop_...> is known by its argument
    args = [a for i, a in enumerate(node.args)
            if (values > 0 if a.value else names > 0) and (keep is None or i >= len(keep) or keep[i])]
    if not args:
        return base
    return base + "<" + ", ".join(_render(a, names - 1, values - 1, top=False) for a in args) + ">"


def _plain_first_name(node: _Node) -> bool:
    """Whether the first template argument that names code is a plain name
    (``cutlass_80_tensorop_s1688gemm_64x64_32x6_tn_align4``, no arguments of its own)."""
    first = next((a for a in node.args if not a.value), None)
    return first is not None and not first.args


def short_name(name: str) -> str:
    """The name a reader knows a kernel by: no return type, namespaces,
    template arguments or parameters (``void at::native::elementwise_kernel<128,
    4, ...>(int, ...)`` -> ``elementwise_kernel``). A generic base name keeps
    its enclosing name and a plain-name argument (``gemvx::kernel``,
    ``cutlass::Kernel<cutlass_80_tensorop_s1688gemm_64x64_32x6_tn_align4>``);
    memcpy/memset names and plain names (``volta_sgemm_128x64_nn``) are kept
    as they are. Not cut to a length (see :func:`ellipsize`)."""
    return _render(_parse(name), 0)


def family(name: str) -> str:
    """The key grouping template-argument variants of one kernel: its base
    name with every template argument that names code (functors, ops), as
    deep as they go, and without values or scalar types. ``…_cta_per_row_1<float,
    float, float, 2ul>`` and ``<…, 5ul>`` share one; ``vectorized_elementwise_kernel``
    of ``FillFunctor`` and of ``CUDAFunctor_add`` do not. Kernels with
    different parameter lists but one name (two NCCL versions) share one."""
    node = _parse(name)
    if node.value:
        return node.name
    key = _render(node, _MAX_DEPTH)
    return f"{node.scope}::{key}" if node.scope and not key.startswith(node.scope + "::") else key


def ellipsize(text: str, limit: int = DEFAULT_LIMIT) -> str:
    """``text`` cut to at most ``limit`` characters after a token boundary
    (``_``, ``,``, space, ``:``, ``<``), ending in ``…``; unchanged when it fits."""
    text = str(text)
    if len(text) <= limit:
        return text
    head = text[: limit - 1]
    cut = max(head.rfind(c) for c in "_, :<(")
    if cut >= limit // 2:
        head = head[: cut + 1]
    return head.rstrip(", :<(") + "…"


def rank_ranges(ranks: Iterable[int]) -> str:
    """Rank numbers as read, runs of three or more as ranges: ``3``, ``0, 1``,
    ``0–7``, ``0, 2, 4–6``."""
    ordered = sorted(set(ranks))
    parts: List[str] = []
    i = 0
    while i < len(ordered):
        j = i
        while j + 1 < len(ordered) and ordered[j + 1] == ordered[j] + 1:
            j += 1
        parts.append(str(ordered[i]) if j == i else f"{ordered[i]}, {ordered[j]}" if j == i + 1
                     else f"{ordered[i]}–{ordered[j]}")
        i = j + 1
    return ", ".join(parts)


def _differing(nodes: List[_Node], names: int, values: int) -> Optional[List[bool]]:
    """One flag per template argument: does it differ between ``nodes`` when
    rendered at these depths (the others are left out of their labels); None
    when their argument counts differ (all are shown)."""
    if len({len(n.args) for n in nodes}) != 1:
        return None
    shown = [[_render(a, names - 1, values - 1, top=False) if (values > 0 if a.value else names > 0) else ""
              for a in n.args] for n in nodes]
    return [len({x[i] for x in shown}) > 1 for i in range(len(nodes[0].args))]


def short_names(names: Iterable[str], limit: int = DEFAULT_LIMIT) -> Dict[str, str]:
    """A short label for each of ``names`` (full name -> label), distinct
    within the set: names that share a :func:`short_name` get back the
    template arguments that differ between them (names before values, level
    by level); a label longer than ``limit`` is cut (:func:`ellipsize`)
    unless the cut makes it equal to another; labels that still collide (e.g.
    one kernel with two parameter lists) get
    `` [2]``, `` [3]``... in the order given.

    Args:
        names: full kernel names (duplicates are fine).
        limit: the longest label, in characters (a suffix `` [n]`` aside).

    Returns:
        full name -> label, for every distinct name.
    """
    order: List[str] = list(dict.fromkeys(str(n) for n in names))
    nodes = {n: _parse(n) for n in order}
    labels = {n: _render(nodes[n], 0) for n in order}
    groups: Dict[str, List[str]] = {}
    for n in order:
        groups.setdefault(labels[n], []).append(n)
    for members in groups.values():
        if len(members) > 1:
            _separate(members, nodes, labels)
    cut = {n: ellipsize(labels[n], limit) for n in order}
    sources: Dict[str, set] = {}
    for n in order:
        sources.setdefault(cut[n], set()).add(labels[n])
    out: Dict[str, str] = {}
    seen: Dict[str, int] = {}
    for n in order:
        # a cut that made two labels equal is undone: the labels stay apart, longer
        label = cut[n] if len(sources[cut[n]]) == 1 else labels[n]
        seen[label] = seen.get(label, 0) + 1
        out[n] = label if seen[label] == 1 else f"{label} [{seen[label]}]"
    return out


def _separate(members: List[str], nodes: Dict[str, _Node], labels: Dict[str, str], names: int = 0,
              values: int = 0, shown: Optional[List[bool]] = None) -> None:
    """Give ``members`` (one label so far, rendered at depths ``names`` and
    ``values``) the first deeper rendering that tells some of them apart:
    names of template arguments one level deeper at a time, then values and
    scalar types; only the arguments that differ between them (and those
    ``shown`` already) are shown. Members still tied go on among themselves."""
    ns = [nodes[m] for m in members]
    steps = [(d, values) for d in range(names + 1, _MAX_DEPTH + 1)]
    steps += [(max(names, d), d) for d in range(values + 1, _MAX_DEPTH + 1)]
    for nd, vd in steps:
        keep = _differing(ns, nd, vd)
        if keep is not None and shown is not None:
            keep = [a or b for a, b in zip(keep, shown)]
        new = {m: _render(nodes[m], nd, vd, keep=keep) for m in members}
        if len(set(new.values())) == 1:
            continue
        labels.update(new)
        tied: Dict[str, List[str]] = {}
        for m in members:
            tied.setdefault(new[m], []).append(m)
        for group in tied.values():
            if len(group) > 1:
                _separate(group, nodes, labels, nd, vd, keep)
        return
