"""Re-run every failing case of a fuzz summary (``merge_reports.py`` output) on this machine's GPU and print each
outcome, with the traceback of anything the harness did not classify. Usage:
``TILEWRIGHT_AUTOTUNE=0 python tests/fuzz/rerun_failures.py SUMMARY.json``"""
from __future__ import annotations

import collections
import json
import re
import sys
import traceback

import fuzz_cases as fc


def main(path: str) -> int:
    with open(path) as f:
        failures = json.load(f)["failures"]
    cases = []
    for text in failures:
        m = re.search(r"fuzz_cases\.py '(\{.*\})'", text)
        if m:
            cases.append(json.loads(m.group(1)))
    outcomes = collections.Counter()
    for case in cases:
        head = f"{case['family']}/{case['entry']} seed={case['seed']} backend={case['backend']}"
        try:
            outcome = fc.run_case(case, "cuda", case["backend"])
        except fc.FuzzFailure as e:
            outcome = "fail"
            print(f"FAIL {head}: {str(e).splitlines()[0][:300]}")
        except Exception:  # noqa: BLE001 - print it whole: this is what a fix needs
            outcome = "crash"
            print(f"CRASH {head}:\n{traceback.format_exc()[-3000:]}")
        else:
            print(f"{outcome} {head}")
        outcomes[outcome] += 1
    print(f"{len(cases)} failing cases re-run: {dict(outcomes)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
