"""The native reader under libFuzzer with ASan and UBSan (issue 53): a bounded
run of bench/fuzz_native.py must end with executions and no sanitizer report.
Skipped where clang++ (with compiler-rt's libFuzzer) is missing; CI runs a
60 s campaign too (.ci/run), the bench script longer ones."""
import re
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))
import fuzz_native  # noqa: E402


@pytest.mark.slow
def test_a_bounded_fuzz_run_finds_no_sanitizer_report(tmp_path):
    if not fuzz_native.clang():
        pytest.skip("clang++ not found")
    proc = subprocess.run([sys.executable, fuzz_native.__file__, "--seconds", "10", "--work", str(tmp_path),
                           "--traces", "6"], capture_output=True, text=True, timeout=300)
    if proc.returncode == 2 or "cannot find" in proc.stderr and "libclang_rt" in proc.stderr:
        pytest.skip("clang++ without libFuzzer (compiler-rt)")
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
    m = re.search(r"executions: (\d+) .* sanitizer reports: (\d+)", proc.stdout)
    assert m, proc.stdout
    assert int(m.group(1)) > 1000 and int(m.group(2)) == 0, proc.stdout
