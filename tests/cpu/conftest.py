"""Fixtures shared by the CPU-tier CUDA build tests."""
import pytest

from tilewright.cuda_fallback import build


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    """A fresh cubin cache for this module (builds once, then every test reads it)."""
    path = tmp_path_factory.mktemp("twcache")
    mp = pytest.MonkeyPatch()
    mp.setenv("TILEWRIGHT_CACHE_DIR", str(path))
    build._memo.clear()
    yield path
    build._memo.clear()
    mp.undo()
