"""Offline tuning tools: the tuner and the reports (they need pandas: ``pip install 'tilewright[bench]'``).

They sit above everything they measure - the runtime half of :mod:`tilewright.autotune`, the kernels, the router
and :mod:`tilewright.bench` - and nothing under the runtime imports them (see ``tilewright/autotune/__init__.py``).
"""
