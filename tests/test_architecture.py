"""The structure the code promises (docs/ARCHITECTURE.md), checked from its imports.

- no import cycle among hta_report's modules;
- layers: nothing under ``render/`` imports the cache, the loader, the
  analyses or the API; nothing under ``analysis/`` imports the rules, the API,
  the reporters or the CLI; the rules read only the model;
- one module (``workers.py``) creates process pools;
- every module in ``rules/`` (but the engine's own) registers rules, and
  every rule is found; docs/RULES.md is the catalogue;
- a cached re-run imports neither pandas nor matplotlib.
"""
import ast
import subprocess
import sys


from conftest import REPO, shared

PKG = REPO / "hta_report"


def _modules():
    out = {}
    for path in sorted(PKG.rglob("*.py")):
        rel = path.relative_to(REPO).with_suffix("")
        parts = list(rel.parts)
        is_init = parts[-1] == "__init__"
        if is_init:
            parts = parts[:-1]
        out[".".join(parts)] = (path, is_init)
    return out


def import_graph():
    """module -> the hta_report modules it imports (at any depth in the file,
    functions included); a package's __init__ importing its own children is
    not an edge."""
    mods = _modules()
    graph = {m: set() for m in mods}
    for name, (path, is_init) in mods.items():
        here = name if is_init else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    pkg = here
                    for _ in range(node.level - 1):
                        pkg = pkg.rpartition(".")[0]
                    base = f"{pkg}.{base}" if base else pkg
                targets = [base] + [f"{base}.{a.name}" for a in node.names]
            else:
                continue
            for t in targets:
                while t and t not in mods:
                    t = t.rpartition(".")[0]
                if t and t != name and not (is_init and t.startswith(name + ".")):
                    graph[name].add(t)
    return graph


def _cycles(graph):
    """Strongly connected components with more than one module (Tarjan)."""
    index, low, stack, on, out = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = set()
            while True:
                w = stack.pop()
                on.discard(w)
                comp.add(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for v in graph:
        if v not in index:
            visit(v)
    return out


def test_the_checker_sees_imports_and_cycles():
    graph = import_graph()
    assert "hta_report.load" in graph["hta_report.api"] or "hta_report.load" in str(graph["hta_report.api"])
    assert _cycles({"a": {"b"}, "b": {"a"}, "c": set()}) == [["a", "b"]]


def test_no_import_cycles():
    assert _cycles(import_graph()) == []


FORBIDDEN = {
    "hta_report.render": ("hta_report.cache", "hta_report.load", "hta_report.analysis", "hta_report.api",
                          "hta_report.rules", "hta_report.cli", "hta_report.engines"),
    "hta_report.analysis": ("hta_report.rules", "hta_report.api", "hta_report.render", "hta_report.cli",
                            "hta_report.cache", "hta_report.engines"),
    "hta_report.rules": ("hta_report.load", "hta_report.analysis", "hta_report.api", "hta_report.render",
                         "hta_report.cli", "hta_report.cache", "hta_report.engines"),
    "hta_report.load": ("hta_report.analysis", "hta_report.rules", "hta_report.api", "hta_report.render",
                        "hta_report.cli", "hta_report.engines"),
    "hta_report.engines": ("hta_report.rules", "hta_report.api", "hta_report.render", "hta_report.cli"),
    "hta_report.compare": ("hta_report.api", "hta_report.load", "hta_report.analysis", "hta_report.cache"),
    "hta_report.compare_stats": ("hta_report.api", "hta_report.load", "hta_report.analysis", "hta_report.cache",
                                 "hta_report.render", "hta_report.rules", "hta_report.cli"),
}


#: The one crossing of a layer: SARIF's rule metadata is the catalogue's (every rule, the same on every run).
EXCEPTIONS = {("hta_report.render.sarif", "hta_report.rules")}


def _under(module, prefix):
    return module == prefix or module.startswith(prefix + ".")


def test_layers():
    bad = [f"{m} imports {t}" for m, targets in import_graph().items() for layer, banned in FORBIDDEN.items()
           if _under(m, layer) for t in targets if any(_under(t, b) for b in banned)
           and not any(m == em and _under(t, et) for em, et in EXCEPTIONS)]
    assert bad == []


def test_one_module_creates_process_pools():
    creators = [str(p.relative_to(REPO)) for p in PKG.rglob("*.py")
                if any(word in p.read_text(encoding="utf-8")
                       for word in ("ProcessPoolExecutor(", "(ProcessPoolExecutor)", ".Pool(", ".Process("))]
    assert creators == ["hta_report/workers.py"]


def test_every_rule_module_registers_and_every_rule_is_found():
    from hta_report.rules import RULES, engine

    files = {p.stem for p in (PKG / "rules").glob("*.py")} - {"__init__"} - engine.INFRASTRUCTURE
    assert set(engine.RULE_MODULES) == files
    by_module = {}
    for r in RULES:
        by_module.setdefault(r.check.__module__.rpartition(".")[2], []).append(r.id)
    assert set(by_module) == files  # each rule module holds a rule; no rule from elsewhere
    assert len({r.id for r in RULES}) == len(RULES) and len({r.number for r in RULES}) == len(RULES)


def test_rules_doc_is_the_catalogue(run_cli, tmp_path, monkeypatch):
    """docs/RULES.md is what `hta-report rules --format markdown` prints with
    the default thresholds (run where no pyproject.toml sets others), and
    says how to refresh it at its top."""
    from hta_report.render.markdown import RULES_DOC_COMMAND

    monkeypatch.chdir(tmp_path)
    code, doc, _ = run_cli("rules", "--format", "markdown")
    assert code == 0
    committed = (REPO / "docs" / "RULES.md").read_text(encoding="utf-8")
    assert committed == doc, f"refresh docs/RULES.md: {RULES_DOC_COMMAND}"
    assert RULES_DOC_COMMAND in "\n".join(committed.splitlines()[:5])


def test_the_readme_points_at_the_rules_doc_not_at_numbers():
    """The README links the catalogue by rule id (docs/RULES.md#<id>), and no
    document in the repository sends a reader to the rules' numbers."""
    import re

    from hta_report.rules import RULES

    readme = (REPO / "README.md").read_text(encoding="utf-8")
    assert "docs/RULES.md" in readme
    for link in re.findall(r"docs/RULES\.md#([a-z0-9-]+)", readme):
        assert link in {r.id for r in RULES}, link
    for path in [REPO / "README.md", *sorted((REPO / "docs").glob("*.md")), *sorted(PKG.rglob("*.py"))]:
        assert "ADVICE_RULES" not in path.read_text(encoding="utf-8"), path


def test_cached_rerun_imports_neither_pandas_nor_matplotlib(tmp_path):
    path = shared("two_ranks")
    code = (
        "import sys\n"
        "from hta_report import api\n"
        f"r = api.analyze({str(path)!r}, cache={str(tmp_path / 'c')!r})\n"
        f"api.write_reports(r, [({str(tmp_path / 'r.html')!r}, None)], cache={str(tmp_path / 'c')!r})\n"
        "print(sorted(m for m in ('pandas', 'matplotlib', 'hta.common.trace') if m in sys.modules))\n"
    )
    first = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert "pandas" in first.stdout  # the first run parsed and drew
    second = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert second.stdout.strip() == "[]"
    assert (tmp_path / "r.html").read_text().count("data:image/svg+xml") >= 3


# ------------------------------------------------------------------ the table in docs/ARCHITECTURE.md is the test

def architecture_table():
    """``{module prefix: allowed prefixes or None}`` from the "Packages and
    modules" table of docs/ARCHITECTURE.md: each row's ``where`` (``api.py``,
    ``load/``, several names in one row) and its ``may import`` column
    (``everything below`` is None: anything; ``nothing of ours`` is empty)."""
    import re

    text = (REPO / "docs" / "ARCHITECTURE.md").read_text(encoding="utf-8")
    section = text.split("## Packages and modules", 1)[1].split("\n## ", 1)[0]
    table = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) < 3 or not cells[0].startswith("`"):
            continue
        wheres = re.findall(r"`([^`]+)`", cells[0])
        may = cells[-1]
        allowed = None if "everything" in may else [] if "nothing of ours" in may else \
            ["hta_report." + m.strip("/").replace("/", ".").removesuffix(".py") for m in re.findall(r"`([^`]+)`", may)]
        for w in wheres:
            name = w.strip("/").replace("/", ".").removesuffix(".py")
            table["hta_report" if name == "__init__" else "hta_report." + name] = allowed
    return table


def _table_violations(graph, table):
    out = []
    for module, targets in sorted(graph.items()):
        rows = [p for p in table if _under(module, p) and (p != "hta_report" or module == p)]  # the package: itself
        if not rows:
            out.append(f"{module}: in no row of the table")
            continue
        row = max(rows, key=len)
        allowed = table[row]
        if allowed is None:
            continue
        for t in sorted(targets):
            if _under(t, row) or t == "hta_report" or any(_under(t, a) for a in allowed):
                continue
            out.append(f"{module} imports {t}, which the row of {row} does not allow")
    return out


def test_the_documented_table_is_what_the_code_imports():
    """Every module is in a row of docs/ARCHITECTURE.md's table and imports
    only its own package and what that row's "may import" names."""
    table = architecture_table()
    assert len(table) >= 20 and table["hta_report.api"] is None and table["hta_report.model"] == []
    assert _table_violations(import_graph(), table) == []


def test_the_table_check_can_fail():
    table = architecture_table()
    graph = {"hta_report.model": {"hta_report.api"}, "hta_report.nowhere": set()}
    assert _table_violations(graph, table) == [
        "hta_report.model imports hta_report.api, which the row of hta_report.model does not allow",
        "hta_report.nowhere: in no row of the table"]


def test_dir_lists_the_lazy_api_without_importing_it():
    """``dir(hta_report)`` shows the API (pyinstrument and coverage.py users
    explore a package that way), and listing it imports nothing heavy."""
    code = ("import sys, hta_report; names = [n for n in dir(hta_report) if not n.startswith('_')]; "
            "print(names); print(sorted(m for m in ('pandas', 'hta', 'hta_report.api') if m in sys.modules)); "
            "print(all(callable(getattr(hta_report, n)) for n in names))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.splitlines()
    assert out[0] == str(["analyze", "compare_paths", "load_result", "profile", "rule_catalogue", "write_comparison",
                          "write_reports"])
    assert out[1] == "[]" and out[2] == "True"
