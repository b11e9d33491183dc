"""Tuning at run time: what a kernel launch reads (the tools that produce it are in :mod:`tilewright.tools`).

Runtime (this folder; imported by the launchers and the router, at every launch):

* :mod:`~tilewright.autotune.space` - the Triton config spaces, their pruning and the untuned defaults;
* :mod:`~tilewright.autotune.cache` - the persistent tuning cache ``tilewright tune`` fills, read per launch.

Tools (:mod:`tilewright.tools`; run by ``tilewright tune`` / ``tilewright report`` or from Python):

* :mod:`~tilewright.tools.tuner` - sweeps every eligible backend's configs and stores the winners;
* :mod:`~tilewright.tools.report` - CSV / markdown / HTML / PNG reports of sweeps and benchmarks.

Imports run one way: the tools import the runtime (and the kernels, the router and ``bench``), never the reverse,
so ``import tilewright`` and every launch stay on torch + triton + numpy, and the tools' pandas / matplotlib stay an
optional extra (``pip install 'tilewright[bench]'``). This file imports nothing for the same reason:
``from tilewright.autotune import cache`` must not load a tool. ``tests/test_layers.py`` checks the direction.
"""
