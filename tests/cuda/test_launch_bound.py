"""CPU tier: a prepared CUDA launch binds to its operands' roles (runtime.launch.BoundCudaLaunch) and a bound launch
re-encodes the maps / replaces the pointers of new addresses, reusing every other argument. A fake driver stands in
for libcuda; the GPU tier (tests/test_fast_gpu.py) replays the real kernels bit for bit."""
import ctypes
import types

import pytest
import torch

from tilewright import _record
from tilewright.cuda_fallback.runtime import launch


class _FakeDriver:
    def __init__(self):
        self.encoded, self.launches, self.zeroed = [], [], []

    def encode(self, spec, ptr):
        self.encoded.append((spec, ptr))
        tmap = launch.TensorMap()
        tmap.opaque[0] = ptr  # something address-dependent to see in the launch
        tmap.ptr = ptr
        return tmap

    def encode_tiled(self, dtype, ptr, dims, strides, box, swizzle):
        spec = launch.TiledMapSpec(dtype, dims, strides, box, swizzle)
        tmap = self.encode(spec, ptr)
        tmap.spec = spec
        return tmap

    def launch(self, fn, grid, block, smem, stream, args):
        self.launches.append((fn, grid, block, smem, stream, list(args)))

    def zero_u32(self, ptr, count, stream):
        self.zeroed.append((ptr, count, stream, len(self.launches)))  # (the launches made before it)

    def launch_params(self, fn, grid, block, smem, stream, params):
        # a bound launch's parameter array: the addresses of its arguments, read back as the kernel would (slot 0
        # a map, 1-2 pointers, 3 the int32 of _prepare), the address itself beside each
        addresses = list(params)
        args = [launch.TensorMap.from_address(addresses[0]), ctypes.c_uint64.from_address(addresses[1]),
                ctypes.c_uint64.from_address(addresses[2]), ctypes.c_int32.from_address(addresses[3])]
        self.launches.append((fn, grid, block, smem, stream, [(a, p) for a, p in zip(args, addresses)]))


@pytest.fixture
def fake(monkeypatch):
    drv = _FakeDriver()
    monkeypatch.setattr(launch, "driver", lambda: drv)
    monkeypatch.setattr(torch.cuda, "device", lambda d: __import__("contextlib").nullcontext())
    monkeypatch.setattr(torch.cuda, "current_stream", lambda d=None: types.SimpleNamespace(cuda_stream=7))
    monkeypatch.setattr(torch._C, "_cuda_getCurrentRawStream", lambda d: 9, raising=False)
    monkeypatch.setattr(torch._C, "_cuda_getDevice", lambda: 0, raising=False)
    return drv


def _prepare(drv, a, out, bias):
    tm_a = launch.tag(drv.encode_tiled("bfloat16", a.data_ptr(), (64, 32), (128,), (64, 32), 128), "a_ptr")
    return "fn", (3, 1, 1), [tm_a, launch.pointer("c_ptr", out), launch.pointer("bias_ptr", bias), ctypes.c_int32(5)]


def _launch_recorded(drv, a, out, bias, roles):
    with _record.recording() as launches:
        launch.launch_cached({}, ("k",), lambda: _prepare(drv, a, out, bias), torch.device("cpu"), 128, 1024, roles)
    return launches


def test_a_recorded_launch_binds_and_replays_on_new_addresses(fake):
    a, out, bias = torch.randn(32, 64), torch.empty(32, 64), torch.randn(64)
    (bound, roles, _), = _launch_recorded(fake, a, out, bias, {"a_ptr": a, "c_ptr": out, "bias_ptr": bias})
    assert isinstance(bound, launch.BoundCudaLaunch) and list(roles) == ["a_ptr", "c_ptr", "bias_ptr"]
    recorded_args = fake.launches[0][5]
    bound(1 << 20, 2 << 20, 3 << 20)  # pointers in the roles' order
    fn, grid, block, smem, stream, args = fake.launches[-1]
    assert (fn, grid, block, smem, stream) == ("fn", (3, 1, 1), (128, 1, 1), 1024, 9)
    (tmap, _), (ptr_c, _), (ptr_bias, _), (scalar, scalar_at) = args
    assert tmap.opaque[0] == 1 << 20 and fake.encoded[-1] == (recorded_args[0].spec, 1 << 20)  # re-encoded map
    assert ptr_c.value == 2 << 20 and ptr_bias.value == 3 << 20
    assert scalar_at == ctypes.addressof(recorded_args[3]) and scalar.value == 5  # everything else as prepared
    assert recorded_args[0].ptr == a.data_ptr()  # the prepared launch itself is untouched
    assert recorded_args[1].value == out.data_ptr() and recorded_args[2].value == bias.data_ptr()
    bound(1 << 20, 4 << 20, 5 << 20)  # the next call's pointers in the same parameter array
    _, _, _, _, _, again = fake.launches[-1]
    assert again[1][0].value == 4 << 20 and again[2][0].value == 5 << 20 and again[0][1] == args[0][1]


def test_counters_are_zeroed_before_each_launch_and_recorded_as_written(fake):
    """A launch with ``zero`` (counters its CTAs signal through) sets them to 0 in stream order right before the
    kernel, on the recorded call and on every bound replay, at the replay's own address; the role is recorded as
    written whole, so an op's replay may hand the launch a fresh, uninitialised buffer."""
    a, out, counts = torch.randn(32, 64), torch.empty(32, 64), torch.empty(6, dtype=torch.int32)
    roles = {"a_ptr": a, "c_ptr": out, "bias_ptr": counts}  # (the prepared launch's third pointer slot)

    with _record.recording() as launches:
        launch.launch_cached({}, ("k",), lambda: _prepare(fake, a, out, counts), torch.device("cpu"), 128, 0,
                             roles, zero={"bias_ptr": 5})
    (bound, got, writes), = launches
    assert writes == ("bias_ptr",) and list(got) == ["a_ptr", "c_ptr", "bias_ptr"]
    assert fake.zeroed == [(counts.data_ptr(), 5, 7, 0)]  # zeroed, then launched
    bound(1 << 20, 2 << 20, 3 << 20)
    assert fake.zeroed[-1] == (3 << 20, 5, 9, 1)
    assert fake.launches[-1][5][2][0].value == 3 << 20
    # launch_bound: the same through a per-signature bound launch
    cache = {}
    with _record.recording() as launches:
        assert launch.launch_bound(cache, ("sig",), lambda: _prepare(fake, a, out, counts), torch.device("cpu"), 128,
                                   0, roles, zero={"bias_ptr": 5})
    assert launches[0][2] == ("bias_ptr",) and fake.zeroed[-1] == (counts.data_ptr(), 5, 9, 2)
    # without: nothing zeroed
    launch.launch_cached({}, ("k2",), lambda: _prepare(fake, a, out, counts), torch.device("cpu"), 128, 0, roles)
    assert len(fake.zeroed) == 3 and len(fake.launches) == 4


@pytest.mark.parametrize("problem", ["role without argument", "argument without role", "copy", "no roles"])
def test_a_launch_is_not_bound_on_a_guess(fake, problem):
    a, out, bias = torch.randn(32, 64), torch.empty(32, 64), torch.randn(64)
    roles = {"a_ptr": a, "c_ptr": out, "bias_ptr": bias}
    if problem == "role without argument":
        roles["res_ptr"] = torch.randn(4)
    elif problem == "argument without role":
        del roles["bias_ptr"]
    elif problem == "copy":
        roles["a_ptr"] = a.clone()  # the map holds another address than the role's tensor
    else:
        roles = None
    (bound, got, _), = _launch_recorded(fake, a, out, bias, roles)
    assert bound is None and got == {}


def test_no_recording_no_binding(fake, monkeypatch):
    called = []
    monkeypatch.setattr(launch, "bind_cuda", lambda *a: called.append(1))
    a, out = torch.randn(32, 64), torch.empty(32, 64)
    launch.launch_cached({}, ("k",), lambda: _prepare(fake, a, out, None), torch.device("cpu"), 128, 0,
                         {"a_ptr": a, "c_ptr": out})
    assert called == [] and len(fake.launches) == 1


def test_a_bound_launch_reuses_the_maps_of_addresses_it_has_seen(fake, monkeypatch):
    monkeypatch.setattr(launch, "MAPS_PER_SLOT", 2)
    a, out = torch.randn(32, 64), torch.empty(32, 64)
    (bound, _, _), = _launch_recorded(fake, a, out, None, {"a_ptr": a, "c_ptr": out})
    before = len(fake.encoded)
    bound(1 << 20, 5)
    first_map_at = fake.launches[-1][5][0][1]
    bound(1 << 20, 6)  # same A address: its map is reused, the pointer argument replaced
    assert len(fake.encoded) == before + 1 and fake.launches[-1][5][0][1] == first_map_at
    assert fake.launches[-1][5][0][0].opaque[0] == 1 << 20 and fake.launches[-1][5][1][0].value == 6
    opaque = []
    for a_ptr, c_ptr in ((2 << 20, 7), (3 << 20, 8), (1 << 20, 9)):  # a third address: the slot's 2 maps start over
        bound(a_ptr, c_ptr)
        opaque.append(fake.launches[-1][5][0][0].opaque[0])  # (read at the launch, as the driver copies it)
    assert len(fake.encoded) == before + 4
    assert opaque == [2 << 20, 3 << 20, 1 << 20]


def test_tiled_map_spec_holds_the_encode_arguments():
    spec = launch.TiledMapSpec("float16", (64, 100, 3), (256, 25600), (64, 32, 1), 64)
    assert spec.rank == 3 and spec.dtype == launch.TMA_DTYPE["float16"] and spec.swizzle == launch.TMA_SWIZZLE[64]
    assert list(spec.dims) == [64, 100, 3] and list(spec.strides) == [256, 25600] and list(spec.box) == [64, 32, 1]
    assert list(spec.elem_strides) == [1, 1, 1]


def test_threads_launching_one_bound_launch_do_not_mix_their_pointers(fake, monkeypatch):
    """A bound launch writes a call's pointers into its one parameter array, then launches: two threads calling it
    at once must each launch with their own pointers (the lock spans the writes and the launch). The fake driver
    yields the GIL inside the launch and checks both pointer slots still hold one call's values."""
    import threading
    import time

    a, out, bias = torch.randn(32, 64), torch.empty(32, 64), torch.randn(64)
    (bound, _, _), = _launch_recorded(fake, a, out, bias, {"a_ptr": a, "c_ptr": out, "bias_ptr": bias})
    mixed = []

    def launch_params(fn, grid, block, smem, stream, params):
        c, b = ctypes.c_uint64.from_address(params[1]).value, ctypes.c_uint64.from_address(params[2]).value
        time.sleep(0)  # another thread may run here
        c2, b2 = ctypes.c_uint64.from_address(params[1]).value, ctypes.c_uint64.from_address(params[2]).value
        if not (c == b == c2 == b2):
            mixed.append((c, b, c2, b2))

    monkeypatch.setattr(fake, "launch_params", launch_params)

    def worker(value):
        for _ in range(2000):
            bound(1 << 20, value, value)

    threads = [threading.Thread(target=worker, args=(v << 12,)) for v in (1, 2, 3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not mixed, mixed[:3]
