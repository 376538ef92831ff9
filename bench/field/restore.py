#!/usr/bin/env python3
"""Check the field trace set against its manifest.

The traces themselves are never committed.  They live under a root directory
(default /work/field/traces, or $HTA_REPORT_FIELD, or --root) laid out as
<root>/<run id>/<saved_as>.  This script does not download anything (CI has no
network): it verifies the sha256 and size of every file that is present and
lists what is missing, with the repository, commit and path to fetch it from,
e.g.

    git -C <clone of repo> show <commit>:<path> > <root>/<id>/<saved_as>

Exit status: 0 when every file is present and intact, 1 when some are missing,
2 when a present file does not match its sha256/size.
"""
import argparse
import hashlib
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_ROOT = "/work/field/traces"


def sha256_of(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--manifest", default=os.path.join(HERE, "manifest.json"))
    ap.add_argument("--root", default=os.environ.get("HTA_REPORT_FIELD", DEFAULT_ROOT))
    ap.add_argument("--json", action="store_true", help="print a JSON summary instead of text")
    args = ap.parse_args(argv)

    with open(args.manifest) as f:
        manifest = json.load(f)

    ok, missing, bad = [], [], []
    for run in manifest["runs"]:
        for entry in run["files"]:
            path = os.path.join(args.root, run["id"], entry["saved_as"])
            rec = {
                "id": run["id"],
                "file": path,
                "repo": run["repo"],
                "commit": entry["commit"],
                "path": entry["path"],
            }
            if not os.path.isfile(path):
                missing.append(rec)
                continue
            size = os.path.getsize(path)
            digest = sha256_of(path)
            if size != entry["size"] or digest != entry["sha256"]:
                rec.update(expected_sha256=entry["sha256"], actual_sha256=digest,
                           expected_size=entry["size"], actual_size=size)
                bad.append(rec)
            else:
                ok.append(rec)

    runs_complete = sum(
        1 for run in manifest["runs"]
        if all(os.path.isfile(os.path.join(args.root, run["id"], e["saved_as"])) for e in run["files"])
        and not any(b["id"] == run["id"] for b in bad)
    )
    if args.json:
        print(json.dumps({"root": args.root, "ok": len(ok), "missing": missing, "mismatch": bad,
                          "runs": len(manifest["runs"]), "runs_complete": runs_complete}, indent=1))
    else:
        print(f"root: {args.root}")
        print(f"runs: {len(manifest['runs'])}, complete: {runs_complete}; files ok: {len(ok)}, "
              f"missing: {len(missing)}, mismatched: {len(bad)}")
        for rec in missing:
            print(f"MISSING  {rec['id']}: {rec['repo']}@{rec['commit']}:{rec['path']}")
        for rec in bad:
            print(f"MISMATCH {rec['id']}: {rec['file']} (sha256 {rec['actual_sha256'][:12]} != "
                  f"{rec['expected_sha256'][:12]}, size {rec['actual_size']} vs {rec['expected_size']})")
    if bad:
        return 2
    if missing:
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
