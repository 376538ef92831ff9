"""The published JSON Schemas: generated from the model, equal to the copies
in docs/schema/, and what hta-report writes validates against them."""
import json
from pathlib import Path

import jsonschema
import pytest

from hta_report.schema import SCHEMAS, schema

REPO = Path(__file__).resolve().parent.parent
GOLD = REPO / "tests" / "gold"


@pytest.mark.parametrize("name", sorted(SCHEMAS))
def test_the_published_schema_is_the_models(name):
    published = json.loads((REPO / "docs" / "schema" / f"{name}.schema.json").read_text())
    assert published == schema(name), f"refresh: hta-report schema {name} > docs/schema/{name}.schema.json"
    jsonschema.Draft202012Validator.check_schema(published)


def test_what_hta_report_writes_validates():
    results = sorted(GOLD.glob("*/result.json"))
    assert len(results) >= 3
    for path in results:
        jsonschema.validate(json.loads(path.read_text()), schema("result"))
    jsonschema.validate(json.loads((GOLD / "compare" / "compare.json").read_text()), schema("comparison"))


def test_a_wrong_type_or_a_missing_field_does_not():
    doc = json.loads((GOLD / "cpu_healthy" / "result.json").read_text())
    bad = json.loads(json.dumps(doc))
    bad["aggregate"]["idle_pct"] = "40"
    with pytest.raises(jsonschema.ValidationError, match="'40' is not of type 'number'"):
        jsonschema.validate(bad, schema("result"))
    missing = json.loads(json.dumps(doc))
    del missing["inventory"]
    with pytest.raises(jsonschema.ValidationError, match="'inventory' is a required property"):
        jsonschema.validate(missing, schema("result"))


def test_the_cli_prints_it(run_cli):
    code, out, _ = run_cli("schema", "comparison")
    assert code == 0 and json.loads(out) == schema("comparison")


def test_schema_list_names_every_schema(run_cli):
    code, out, _ = run_cli("schema", "--list")
    rows = [line.split("\t") for line in out.splitlines()]
    assert code == 0 and [r[0] for r in rows] == list(SCHEMAS)
    assert all(r[1] == "3" and r[3] == f"docs/schema/{r[0]}.schema.json" and (REPO / r[3]).is_file() for r in rows)


def test_the_schemas_read_the_same_under_every_msgspec():
    """msgspec 0.23 dedents docstrings and writes a default_factory's value, 0.22 did neither: the
    published schemas drifted from the generated ones when the registry moved (CI, 2026-11-29).
    The generated schema is normalized: every description as inspect.cleandoc leaves it, no
    ``default`` of ``[]`` or ``{}``."""
    import inspect

    from hta_report.schema import SCHEMAS, schema

    def walk(node):
        if isinstance(node, dict):
            for key, value in node.items():
                if key == "description" and isinstance(value, str):
                    assert value == inspect.cleandoc(value)
                assert not (key == "default" and value in ([], {}))
                walk(value)
        elif isinstance(node, list):
            for x in node:
                walk(x)
    for name in SCHEMAS:
        walk(schema(name))
