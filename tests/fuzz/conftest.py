"""Options of the fuzz tiers (tests/fuzz/test_fuzz.py)."""


def pytest_addoption(parser):
    g = parser.getgroup("tilewright fuzz")
    g.addoption("--fuzz-cases", type=int, default=None,
                help="GPU tier: cases per op family (each runs once per backend in --fuzz-backends); default 1500")
    g.addoption("--fuzz-seed", type=int, default=0, help="first case seed (cases use seeds S, S+1, ...)")
    g.addoption("--fuzz-seconds", type=float, default=None,
                help="GPU tier: stop each family after this many seconds (the report says how many cases ran)")
    g.addoption("--fuzz-shard", default="0/1", help="i/n: run the cases whose index % n == i (parallel processes)")
    g.addoption("--fuzz-backends", default="triton,cuda,auto",
                help="GPU tier: backends forced in turn, comma-separated ('auto' = the router's pick)")
    g.addoption("--fuzz-report", default=None,
                help="GPU tier: write a JSON summary here (per family x backend x dtype counts and every failure's "
                     "repro); '{shard}' in the path is replaced by the shard index")
