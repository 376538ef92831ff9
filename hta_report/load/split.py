"""Trace files that hold several ranks, split into one file per rank.

A Kineto trace is one process's: its host threads and the GPU it launched on.
Tools merge the traces of a job into one file (TraceLens's TraceFuse remaps
each rank's process ids: ``RANK 0 - CPU``, ``100000003`` for rank 1's GPU
3...), and such a file read as one rank mixes every rank's host work and GPU
work: its GPU is "busy" whenever any of them is, and a rank that arrives late
at every collective is not seen. A file holds several ranks when two or more
host processes each launch onto a GPU of their own (the GPU whose kernels
carry the correlation ids of that process's launch calls, most of them). One
process launching onto several GPUs (``DataParallel``) is one rank, and stays.

Such a file is written out as one file per rank (its host process, its GPU,
their metadata, the file's ``deviceProperties``, and a ``distributedInfo``
naming the rank and the world size, the rank a merge tool wrote in the
events' ``args.rank`` where it did, else the order of the GPUs), in a folder
of the cache keyed by the file's content, and the run reads those instead;
the inventory's warning names the file and its ranks. Only files up to
:data:`MAX_SPLIT_BYTES` stored, and without a ``distributedInfo`` in their
first :data:`HEADER_BYTES` (a merge tool drops it; a rank's own trace names
its rank there), are parsed to be looked into.
"""
from __future__ import annotations

import gzip
import hashlib
import os
from collections import Counter, defaultdict
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

from ..files import Location, open_text_stream, shown, size

#: Files stored up to this size (bytes) are looked into for several ranks (merged traces of small
#: jobs; a merge tool's output past it is analyzed as one rank, as any file is).
MAX_SPLIT_BYTES = 16 * 2 ** 20
#: How much of a file's start is read for ``distributedInfo``: a file that names its rank there is
#: one rank's (a merge tool drops it), and is not parsed twice.
HEADER_BYTES = 64 * 1024
#: Categories of host calls that launch GPU work, and of GPU work (Kineto's, any generation).
LAUNCH_CATS = ("cuda_runtime", "cuda_driver", "Runtime")
GPU_CATS = ("kernel", "gpu_memcpy", "gpu_memset", "Kernel", "Memcpy", "Memset")
#: Share of a GPU's correlated work that must come from one host process for it to be that process's.
OWN_SHARE = 0.8


def ranks_of(doc: dict) -> Optional[List[Tuple[int, object, object]]]:
    """The ranks a parsed trace ``doc`` holds, as ``(rank, host pid, GPU
    pid)``, sorted by rank; None when it holds one (or cannot be split: a host
    process without a GPU of its own, two processes on one GPU)."""
    events = doc.get("traceEvents") if isinstance(doc, dict) else None
    if not isinstance(events, list):
        return None
    launches: Dict[object, Dict[object, float]] = defaultdict(dict)  # host pid -> correlation -> ts
    gpu_corr: Dict[object, List[Tuple[object, float, object]]] = defaultdict(list)  # gpu pid -> (corr, ts, rank)
    rank_arg: Dict[object, int] = {}
    for e in events:
        if not isinstance(e, dict):
            continue
        cat, args, pid = e.get("cat"), e.get("args"), e.get("pid")
        if isinstance(args, dict) and isinstance(args.get("rank"), int) and pid is not None:
            rank_arg.setdefault(pid, args["rank"])
        if cat in LAUNCH_CATS and isinstance(args, dict) and "correlation" in args:
            launches[pid][args["correlation"]] = float(e.get("ts", 0) or 0)
        elif cat in GPU_CATS and isinstance(args, dict) and "correlation" in args:
            gpu_corr[pid].append((args["correlation"], float(e.get("ts", 0) or 0), args.get("rank")))
    hosts = [p for p, c in launches.items() if len(c) >= 1]
    gpus = [g for g, c in gpu_corr.items() if c]
    if len(hosts) < 2 or len(gpus) < 2:
        return None
    owner: Dict[object, object] = {}
    for g in gpus:
        votes: Counter = Counter()
        for corr, ts, rank in gpu_corr[g]:
            # Each rank numbers its correlations from the same start, so one id can match several
            # processes: the launch must precede the kernel, carry the kernel's rank where the merge
            # tool wrote one, and be the latest such launch; a tie is no vote.
            found = [(launches[h][corr], h) for h in hosts
                     if corr in launches[h] and launches[h][corr] <= ts
                     and (rank is None or rank_arg.get(h, rank) == rank)]
            if not found:
                continue
            found.sort(key=lambda a: a[0])
            if len(found) > 1 and found[-1][0] == found[-2][0]:
                continue
            votes[found[-1][1]] += 1
        if not votes:
            return None
        h, n = votes.most_common(1)[0]
        if n < OWN_SHARE * sum(votes.values()):
            return None
        owner[g] = h
    if len(set(owner.values())) != len(owner) or set(owner.values()) != set(hosts):
        return None  # a process on several GPUs, or one without a GPU: not one rank per process
    pairs = sorted(((owner[g], g) for g in gpus), key=lambda hg: (rank_arg.get(hg[1], rank_arg.get(hg[0], 1 << 30)),
                                                                  str(hg[1])))
    ranks = [rank_arg.get(g, rank_arg.get(h)) for h, g in pairs]
    if any(r is None for r in ranks) or len(set(ranks)) != len(ranks):
        ranks = list(range(len(pairs)))
    return [(int(r), h, g) for r, (h, g) in zip(ranks, pairs)]  # type: ignore[arg-type]


def split_doc(doc: dict, ranks: Sequence[Tuple[int, object, object]]) -> List[Tuple[int, dict]]:
    """One trace per ``(rank, host pid, GPU pid)`` of ``ranks``: the events of
    its two processes (metadata events included), the file's other top-level
    fields, and ``distributedInfo`` with the rank and the world size."""
    events = doc["traceEvents"]
    by_pid: Dict[object, List[dict]] = defaultdict(list)
    for e in events:
        if isinstance(e, dict):
            by_pid[e.get("pid")].append(e)
    out: List[Tuple[int, dict]] = []
    found = doc.get("distributedInfo")
    info: Dict[str, object] = dict(found) if isinstance(found, dict) else {}
    for rank, host, gpu in ranks:
        part = {k: v for k, v in doc.items() if k not in ("traceEvents", "distributedInfo")}
        part["distributedInfo"] = {**info, "rank": rank, "world_size": len(ranks)}
        part["traceEvents"] = by_pid[host] + by_pid[gpu]
        out.append((rank, part))
    return out


def split_merged(files: Sequence[Location], cache_root: Optional[Path] = None) -> Tuple[List[Location], List[str]]:
    """``files`` with each that holds several ranks (:func:`ranks_of`)
    replaced by one file per rank, written once under ``cache_root`` (default
    the platform's cache folder, ``split/<content hash>/``), and a warning per
    such file naming its ranks. A file that cannot be read or parsed here is
    kept as it is (the loader then says what is wrong with it)."""
    import orjson

    out: List[Location] = []
    notes: List[str] = []
    for f in files:
        try:
            small = size(f) <= MAX_SPLIT_BYTES
        except OSError:
            small = False
        if not small:
            out.append(f)
            continue
        try:
            with open_text_stream(f) as fh:
                raw = fh.read()
            if b'"distributedInfo"' in raw[:HEADER_BYTES] or b'"rank"' not in raw and raw.count(b'"cuda_runtime"') < 2:
                out.append(f)
                continue
            doc = orjson.loads(raw)
        except Exception:  # noqa: BLE001 - any unreadable file is the loader's to report
            out.append(f)
            continue
        ranks = ranks_of(doc)
        if not ranks:
            out.append(f)
            continue
        folder = _folder(cache_root, raw)
        parts = []
        for rank, part in split_doc(doc, ranks):
            path = folder / f"rank-{rank}.pt.trace.json.gz"
            if not path.exists():
                tmp = path.with_suffix(".tmp")
                with gzip.open(tmp, "wb", compresslevel=1) as out_fh:
                    out_fh.write(orjson.dumps(part))
                os.replace(tmp, path)
            parts.append(path)
        out.extend(parts)
        notes.append(f"{shown(f)} holds {len(ranks)} ranks (host processes each launching onto a GPU of their own: "
                     + ", ".join(f"rank {r}: process {h}, GPU {g}" for r, h, g in ranks[:8])
                     + (", ..." if len(ranks) > 8 else "")
                     + f"): analyzed as {len(ranks)} ranks, from the files written to {folder}")
    return out, notes


def _folder(cache_root: Optional[Path], raw: bytes) -> Path:
    """The folder of a merged file's parts: under ``cache_root`` (default the
    platform's cache folder), ``split/<sha256 of its content, 16 hex>``."""
    from ..cache import default_cache_dir

    root = Path(cache_root) if cache_root is not None else default_cache_dir()
    folder = root / "split" / hashlib.sha256(raw).hexdigest()[:16]
    folder.mkdir(parents=True, exist_ok=True)
    return folder
