"""Offline tuning tools: the tuner and the reports (they need pandas: ``pip install 'tilewright[bench]'``).

They sit above everything they measure - the tuning runtime (:mod:`tilewright.autotune`), the kernels, the router
and :mod:`tilewright.bench` - and nothing under the runtime imports them. They live beside ``autotune/`` rather than
inside it so that the folder a launch reads stands below everything, with no import running back up into it.
"""
