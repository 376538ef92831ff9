"""Event names PyTorch wrote without escaping (pytorch/pytorch#146900) are
repaired while reading, by both parsers, and counted in the inventory."""
import gzip
import json

import pytest

from hta_report.api import analyze
from hta_report.load import fastparse
from hta_report.load.hta_parser import parse_with_hta
from hta_report.load.parse import report_parser_config
from hta_report.load.repair import REPAIRED_NAMES, repair_names
from test_fast_loader import assert_same_parse


def test_only_invalid_names_are_rewritten():
    text = (b'[{\n    "ph": "X",\n    "name": "user "quoted" range",\n    "pid": 1\n  },'
            b'{\n    "name": "aten::add",\n    "pid": 2\n  },'
            b'{"ph": "X", "cat": "Operator", "name": "C:\\dir\\f.py(3): g "h"", "pid": 3, "tid": 4},'
            b'{"ph": "X", "name": "ok \\"escaped\\" \\u00e9", "pid": 5}]')
    with pytest.raises(json.JSONDecodeError):
        json.loads(text)
    fixed, count = repair_names(text)
    assert count == 2
    names = [e["name"] for e in json.loads(fixed)]
    assert names == ['user "quoted" range', "aten::add", 'C:\\dir\\f.py(3): g "h"', 'ok "escaped" \u00e9']


def test_valid_text_is_returned_unchanged():
    text = b'{"traceEvents": [{"name": "a \\"b\\"", "pid": 1}]}'
    assert repair_names(text) == (text, 0)


def test_other_invalid_json_stays_invalid():
    fixed, count = repair_names(b'[{"name": "a", "pid": 1,}]')
    assert count == 0
    with pytest.raises(json.JSONDecodeError):
        json.loads(fixed)


@pytest.fixture(scope="module")
def quoted_trace(tmp_path_factory):
    """A trace recorded here by torch 2.13 with a record_function name holding
    double quotes, with_stack on (as the issue's reproducer): invalid JSON as written."""
    torch = pytest.importorskip("torch")
    from torch.profiler import profile, record_function

    path = tmp_path_factory.mktemp("quoted") / "rank-0.pt.trace.json"
    with profile(with_stack=True) as prof:
        x = torch.ones(64)
        for _ in range(3):
            with record_function('user "quoted" range'):
                x = x * 2 + 1
    prof.export_chrome_trace(str(path))
    try:
        json.loads(path.read_text())
    except json.JSONDecodeError:
        return path
    pytest.skip("this torch escapes event names (pytorch/kineto#1459)")


def test_both_parsers_repair_a_real_trace_alike(quoted_trace):
    cfg = report_parser_config()
    ours = fastparse.parse_trace_file(quoted_trace, cfg, fallback=False)
    theirs, report = parse_with_hta(quoted_trace, report_parser_config())
    assert ours[0][REPAIRED_NAMES] == theirs[0][REPAIRED_NAMES] == report.repaired_names == 3
    assert_same_parse(theirs, ours)
    symbols = ours[2].get_sym_table()
    assert 'user "quoted" range' in symbols


def test_gzipped_repair_in_small_blocks_is_counted_in_the_inventory(quoted_trace, tmp_path, monkeypatch):
    gz = tmp_path / "rank-0.pt.trace.json.gz"
    gz.write_bytes(gzip.compress(quoted_trace.read_bytes()))
    monkeypatch.setattr(fastparse, "BLOCK_BYTES", 4096)  # the broken names fall in separate pieces
    result = analyze(tmp_path)
    (info,) = result.inventory.files
    assert info.repaired_names == 3
    from hta_report.render import view

    notes = view.reading_notes(result)
    assert notes[0] == (f"{gz}: 3 event names with unescaped double quotes repaired "
                        "(PyTorch writes them so until pytorch/kineto#1459; the rest of the file is as written)")
    assert notes[1:] == view.parser_notes(result) and len(notes) == 2  # and which reader read it


def test_a_trace_invalid_otherwise_is_still_refused(tmp_path, run_cli):
    path = tmp_path / "t.json"
    path.write_text('{"traceEvents": [{"ph": "X", "name": "a", "cat": "cpu_op", "ts": 1, "dur": 2,}]}')
    code, _, err = run_cli("analyze", path, "-o", tmp_path / "r.html")
    assert code == 1 and "not valid JSON" in err
