"""The attention bench's new rows (issue 15) through bench/attention.run, flex left out (its compile is minutes)."""
import sys
from tilewright.bench import attention as bench
bench.SUITES["new"] = [(1, 28, 4, 3000, 96), (2, 16, 16, 512, 128, 4096)]
df = bench.run("new", with_flex=False, csv_path=sys.argv[1])
print(bench.ratio_table(df).to_string())
